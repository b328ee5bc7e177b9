"""Shared fixtures (helpers live in tests/utils.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import trainers as trainer_code
from tests.utils import Workflow


@pytest.fixture
def workflow(tmp_path: Path) -> Workflow:
    """A fresh copy of the workflow in a temporary directory."""
    return Workflow(tmp_path / "wf")


@pytest.fixture(scope="session")
def sample_run(tmp_path_factory: pytest.TempPathFactory) -> Workflow:
    """The main job (`snakemake --profile profiles/local --configfile config/sample.yaml`) on the embedded
    sample, run once per session (tests/workflow, tests/report)."""
    wf = Workflow(tmp_path_factory.mktemp("sample") / "wf")
    wf.ok("--profile", "profiles/local", "--cores", "2")
    return wf


@pytest.fixture(scope="session")
def trainers() -> trainer_code.Trainers:
    """The trainers' pinned sources and their Python (tests/trainers.py), or a skip saying why not."""
    try:
        return trainer_code.trainers()
    except trainer_code.Missing as missing:
        pytest.skip(f"compatibility NOT CHECKED: {missing}")
