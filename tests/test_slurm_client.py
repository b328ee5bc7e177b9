"""The tests' guard against a Slurm client with no controller (tests/slurm_client.py)."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import slurm_client
from tests.utils import REPO


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


# --- the test cluster: the one tests/slurm/local-cluster.sh started (its state file), and no other ---------


def test_without_the_harness_state_file_there_is_no_test_cluster(tmp_path: Path) -> None:
    found = slurm_client.harness_cluster(tmp_path / "cluster")
    assert found == (
        f"no test cluster: {tmp_path / 'cluster'} is missing"
        " (start one: sudo bash tests/slurm/local-cluster.sh start)"
    )


def _stand_in_slurmctld(tmp_path: Path) -> subprocess.Popen:
    """A live process named slurmctld (a copy of sleep): the pid a state file names."""
    binary = tmp_path / "slurmctld"
    shutil.copy(shutil.which("sleep") or "/bin/sleep", binary)
    process = subprocess.Popen([str(binary), "600"])
    comm = Path(f"/proc/{process.pid}/comm")
    deadline = time.monotonic() + 10
    while comm.read_text().strip() != "slurmctld" and time.monotonic() < deadline:
        time.sleep(0.01)  # Popen returns before the child has exec'd: until then it has Python's name
    return process


def _state(tmp_path: Path, conf: str, pid: int, name: str = "t", port: int = 1) -> Path:
    (tmp_path / "slurm.conf").write_text(conf)
    (tmp_path / "slurmctld.pid").write_text(f"{pid}\n")
    state = tmp_path / "cluster"
    state.write_text(
        f"# comment\nconf={tmp_path / 'slurm.conf'}\ncluster={name}\nport={port}\n"
        f"pidfile={tmp_path / 'slurmctld.pid'}\n"
    )
    return state


def test_a_recorded_cluster_that_is_not_the_one_configured_or_running_is_refused(tmp_path: Path) -> None:
    port = _free_port()
    conf = f"ClusterName=other\nSlurmctldHost=localhost\nSlurmctldPort={port}\n"
    controller = _stand_in_slurmctld(tmp_path)
    try:
        state = _state(tmp_path, conf, controller.pid, name="t", port=port)
        assert slurm_client.harness_cluster(state) == (
            f"test cluster t ({state}): {tmp_path / 'slurm.conf'} names cluster other port {port},"
            f" not t port {port}"
        )
        state = _state(tmp_path, conf.replace("=other", "=t"), controller.pid, name="t", port=port)
        assert (
            slurm_client.harness_cluster(state) == f"test cluster t ({state}): nothing answers on port {port}"
        )
    finally:
        controller.kill()
        controller.wait()
    assert slurm_client.harness_cluster(state) == (
        f"test cluster t ({state}): slurmctld is not running"
        f" ({tmp_path / 'slurmctld.pid'}: no live slurmctld)"
    )


def _running_cluster() -> slurm_client.Cluster:
    found = slurm_client.harness_cluster()
    if isinstance(found, str):
        pytest.skip(found)
    return found


def test_the_harness_records_the_cluster_it_started() -> None:
    """The running test cluster answers as its state file says: its own name, through its configuration."""
    cluster = _running_cluster()
    assert (cluster.name, cluster.port) == ("snakepack-test", 6917)
    shown = subprocess.run(
        ["scontrol", "show", "config"],
        env={"SLURM_CONF": str(cluster.conf)},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert re.search(rf"^ClusterName\s*=\s*{cluster.name}$", shown.stdout, re.MULTILINE), shown.stdout[-2000:]


def test_a_cluster_that_goes_away_stops_the_tests_subprocesses(tmp_path: Path) -> None:
    """The watchdog of a Slurm test: once the cluster is gone (here: its slurmctld, a stand-in with the
    running cluster's configuration and port), the test's waiting subprocess is stopped within seconds."""
    real = _running_cluster()
    controller = _stand_in_slurmctld(tmp_path)
    (tmp_path / "slurmctld.pid").write_text(f"{controller.pid}\n")
    cluster = slurm_client.Cluster(real.conf, real.name, real.port, tmp_path / "slurmctld.pid")
    with slurm_client.Watchdog(cluster, interval_s=0.2, grace_s=1.0) as watchdog:
        waiting = subprocess.Popen(["sleep", "600"])  # as a Snakemake run polling squeue would
        time.sleep(1.0)
        assert waiting.poll() is None and watchdog.lost is None  # the cluster is there: nothing happens
        controller.kill()
        controller.wait()
        start = time.monotonic()
        assert waiting.wait(timeout=20) != 0
        assert time.monotonic() - start < 10
    assert watchdog.lost == f"slurmctld is not running ({tmp_path / 'slurmctld.pid'}: no live slurmctld)"


def test_without_the_test_cluster_the_slurm_tests_skip_and_say_why(tmp_path: Path) -> None:
    env = {**os.environ, "SNAKEPACK_SLURM_STATE": str(tmp_path / "none")}
    env.pop("SNAKEPACK_QUIET_SLURM_CONF", None)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-q",
            "-rs",
            "-m",
            "slurm",
            "-n",
            "0",
            "tests/workflow/test_slurm.py",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0 and " passed" not in proc.stdout, proc.stdout[-3000:]
    assert f"no test cluster: {tmp_path / 'none'} is missing" in proc.stdout, proc.stdout[-3000:]
