"""The tests' guard against a Slurm client with no controller (tests/slurm_client.py)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from tests import slurm_client


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_listening_controller_answers_and_a_closed_port_does_not() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        assert slurm_client.controller_answers(f"SlurmctldHost=localhost(127.0.0.1)\nSlurmctldPort={port}\n")
    assert not slurm_client.controller_answers(f"SlurmctldHost=localhost\nSlurmctldPort={_free_port()}\n")


@pytest.mark.skipif(shutil.which("scontrol") is None, reason="Slurm's client is not installed")
def test_the_copy_makes_scontrol_give_up_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A controller that does not answer: scontrol with the copy fails in well under the 9 s it waits with
    the default MessageTimeout."""
    conf = tmp_path / "given.conf"
    conf.write_text(
        f"ClusterName=t\nSlurmctldHost=localhost\nSlurmctldPort={_free_port()}\nMessageTimeout=10\n"
        "NodeName=localhost CPUs=1 State=UNKNOWN\nPartitionName=p Nodes=localhost Default=YES\n"
    )
    monkeypatch.setenv("SLURM_CONF", str(conf))
    quick = slurm_client.fail_fast_conf(tmp_path)
    assert quick is not None and quick.read_text().count("MessageTimeout") == 1
    started = time.monotonic()
    done = subprocess.run(
        ["scontrol", "show", "config"], env={"SLURM_CONF": str(quick)}, capture_output=True, timeout=30
    )
    assert done.returncode != 0 and time.monotonic() - started < 3
