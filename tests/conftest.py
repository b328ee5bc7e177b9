"""Shared fixtures (helpers live in tests/utils.py)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import slurm_client
from tests import trainers as trainer_code
from tests.utils import Workflow

TEST_CLUSTER: slurm_client.Cluster | str = "the test cluster was not looked for"


def pytest_configure(config: pytest.Config) -> None:
    """The Slurm the tests may use: only the test cluster that tests/slurm/local-cluster.sh started (its state
    file), through its configuration (``SLURM_CONF``); without it the Slurm tests skip. Where Slurm's client
    is installed and no controller answers, every subprocess of the tests gets a Slurm configuration that
    gives up at once (tests/slurm_client.py): no 9 s wait per Snakemake start."""
    global TEST_CLUSTER
    TEST_CLUSTER = slurm_client.harness_cluster()
    if isinstance(TEST_CLUSTER, slurm_client.Cluster):
        os.environ["SLURM_CONF"] = str(TEST_CLUSTER.conf)
        return
    if os.environ.get("SNAKEPACK_QUIET_SLURM_CONF"):  # set by the controller process (xdist workers inherit)
        return
    conf = slurm_client.fail_fast_conf(Path(tempfile.mkdtemp(prefix="snakepack-slurm-")))
    if conf is not None:
        os.environ["SLURM_CONF"] = os.environ["SNAKEPACK_QUIET_SLURM_CONF"] = str(conf)


# The tiers (README, "Tests"): `pytest -m fast` while working; the whole suite (.ci/run) before a landing.
# A test that runs Snakemake on a copy of the workflow is `workflow`, one that runs a trainer's code or the
# reference trainer is `trainer`, one that needs the local Slurm is `slurm` (each file or test says so; the
# fixtures below also mark whoever uses them); every other test is `fast`.
MARKED_BY_FIXTURE = {
    "workflow": "workflow",
    "sample_run": "workflow",
    "trainers": "trainer",
    "slurm_cluster": "slurm",
}
SLOW = ("slurm", "workflow", "trainer", "slow")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        for fixture in set(getattr(item, "fixturenames", ())) & MARKED_BY_FIXTURE.keys():
            item.add_marker(MARKED_BY_FIXTURE[fixture])
        if not any(item.get_closest_marker(name) for name in SLOW):
            item.add_marker("fast")
        if item.get_closest_marker("slurm"):  # one Slurm node: its tests run one at a time, on one worker
            item.add_marker(pytest.mark.xdist_group("slurm"))
            if isinstance(TEST_CLUSTER, str):
                item.add_marker(pytest.mark.skip(reason=TEST_CLUSTER))


def pytest_report_header(config: pytest.Config) -> list[str]:
    if isinstance(TEST_CLUSTER, str):
        lines = [f"Slurm tests skip: {TEST_CLUSTER}"]
    else:
        lines = [f"Slurm tests: cluster {TEST_CLUSTER.name} ({TEST_CLUSTER.conf})"]
    if conf := os.environ.get("SNAKEPACK_QUIET_SLURM_CONF"):
        lines.append(f"no Slurm controller answers: subprocesses use {conf} (MessageTimeout=1)")
    return lines


@pytest.fixture(autouse=True)
def _slurm_watchdog(request: pytest.FixtureRequest) -> Iterator[None]:
    """A Slurm test whose cluster goes away fails within seconds (tests/slurm_client.py, ``Watchdog``)."""
    if not request.node.get_closest_marker("slurm") or isinstance(TEST_CLUSTER, str):
        yield
        return
    with slurm_client.Watchdog(TEST_CLUSTER) as watchdog:
        yield
    if watchdog.lost:
        pytest.fail(
            f"the test cluster {TEST_CLUSTER.name} went away: {watchdog.lost}; its subprocesses were stopped"
        )


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
