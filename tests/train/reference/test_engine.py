"""The reference trainer's DeepSpeed set-up (train/reference/engine.py)."""

from __future__ import annotations

import os
import shutil
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
    assert engine.extensions_dir() == os.path.join(sys.prefix, "torch_extensions")
    assert shutil.which("ninja") == str(ENV_NINJA)
