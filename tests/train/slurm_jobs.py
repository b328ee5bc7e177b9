"""Rules run as jobs of Snakemake's Slurm executor on the local test cluster (``profiles/slurm-local``), for
the launch tests (test_lumi_launch.py, test_megatron_launch.py): a Snakefile in a folder of its own, run by
Snakemake as the workflow runs its training rules, so that each rule runs as the executor's job step runs
it (snakemake-executor-plugin-slurm-jobstep's own code: inside ``srun``, or with ``mpi`` in the batch step,
its ``SLURM_*`` variables stripped either way)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.utils import REPO, snakemake_env
from tests.workflow.test_slurm import SNAKEMAKE_TIMEOUT_S, slurm_cluster

__all__ = ["job_environment", "run_snakefile", "slurm_cluster"]  # slurm_cluster: the tests' fixture


def run_snakefile(work: Path, snakefile: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Snakemake with ``profiles/slurm-local`` on ``snakefile`` (written to ``work/Snakefile``), its jobs
    started from ``work``; ``env`` over Snakemake's own environment (tests.utils.snakemake_env), with this
    checkout importable (a launch's ``python -m workflow_scripts``, as in a checkout). Killed after
    SNAKEMAKE_TIMEOUT_S (the Slurm status hang)."""
    (work / "Snakefile").write_text(snakefile)
    cmd = ["timeout", "-s", "KILL", str(SNAKEMAKE_TIMEOUT_S), sys.executable, "-m", "snakemake",
           "--profile", str(REPO / "profiles" / "slurm-local"), "--directory", str(work), "-s",
           str(work / "Snakefile"), "--jobs", "1"]  # fmt: skip
    full = snakemake_env() | {"PYTHONPATH": str(REPO)} | env
    return subprocess.run(cmd, cwd=work, env=full, capture_output=True, text=True)


def job_environment(path: Path) -> dict[str, str]:
    """A rule's environment as ``env > FILE`` wrote it."""
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)
