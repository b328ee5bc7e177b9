"""The reference trainer's DeepSpeed set-up (train/reference/engine.py)."""

from __future__ import annotations

import os
import shutil
import socket
import sys
from pathlib import Path

import pytest

from workflow_scripts.train.reference import engine

ENV_NINJA = Path(sys.executable).parent / "ninja"


@pytest.mark.skipif(not ENV_NINJA.exists(), reason="no ninja in this environment (DeepSpeed brings it)")
def test_the_ops_are_built_by_the_environments_ninja(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever PATH a job or a test starts with: the system's ninja hashes its build log otherwise, and each
    of the two would rebuild the op the other built."""
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.delenv("TORCH_EXTENSIONS_DIR", raising=False)
    with engine.ops_environment() as folder:
        assert folder == os.path.join(sys.prefix, "torch_extensions")
        assert os.environ["TORCH_EXTENSIONS_DIR"] == folder
        assert shutil.which("ninja") == str(ENV_NINJA)


def test_building_the_op_leaves_the_environment_to_later_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    """A process started after the op was built (another environment's DeepSpeed: GPT-NeoX in the
    compatibility tests) must not inherit this environment's ops folder: it would build its own op there,
    and the next reference run would rebuild this one, a minute inside a segment's time limit."""
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.delenv("TORCH_EXTENSIONS_DIR", raising=False)
    folder = engine.build_ops()
    assert folder == os.path.join(sys.prefix, "torch_extensions")
    assert (Path(folder) / "deepspeed_shm_comm" / "deepspeed_shm_comm.so").exists()
    assert "TORCH_EXTENSIONS_DIR" not in os.environ
    assert os.environ["PATH"] == "/usr/bin:/bin"


def test_a_world_of_one_takes_no_port_chosen_ahead(monkeypatch: pytest.MonkeyPatch) -> None:
    """A port found free and then handed to the store can be taken by another process in between (two
    segments or tests starting at once: EADDRINUSE, the trainer exits 1). Here one is taken on purpose:
    every port a port finder could name is busy, and the world of one still starts."""
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.setenv(name, "0")
        monkeypatch.delenv(name)  # restored to unset afterwards
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        monkeypatch.setattr(engine, "_free_port", lambda: port, raising=False)  # the old way's pick
        monkeypatch.setenv("MASTER_PORT", str(port))
        dist = engine.init_distributed("gloo")
        import torch.distributed

        assert (dist.rank, dist.world_size) == (0, 1)
        torch.distributed.destroy_process_group()
