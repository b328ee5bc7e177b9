"""Shared fixtures (helpers live in tests/utils.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.utils import Workflow


@pytest.fixture
def workflow(tmp_path: Path) -> Workflow:
    """A fresh copy of the workflow in a temporary directory."""
    return Workflow(tmp_path / "wf")
