"""What Slurm says about jobs: states (squeue, then sacct), a job's end time, and this job's identity.

Every query is one short command with a timeout; without Slurm (no ``squeue`` on PATH) the answers are
empty, never an error, so the same code runs on a laptop.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import subprocess
from collections.abc import Iterable

# Job states in which a job may still run: a chain holding one of them is not submitted again.
ACTIVE = {"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "REQUEUED", "RESIZING", "SUSPENDED", "STOPPED"}


def _run(cmd: list[str]) -> str | None:
    if shutil.which(cmd[0]) is None:
        return None
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        return None
    return out.stdout if out.returncode == 0 else None


def states(job_ids: Iterable[str]) -> dict[str, str]:
    """Job id -> Slurm state (``PENDING``, ``RUNNING``, ``COMPLETED``, ``CANCELLED`` ...); squeue first
    (it knows queued jobs and, for ``MinJobAge``, finished ones), sacct for the rest where accounting
    exists. Jobs neither knows are left out."""
    ids = sorted({str(j) for j in job_ids if j})
    if not ids:
        return {}
    found: dict[str, str] = {}
    out = _run(["squeue", "--states=all", "--noheader", "--format=%i|%T", "--jobs", ",".join(ids)])
    for line in (out or "").splitlines():
        job, _, state = line.strip().partition("|")
        found[job] = state
    rest = [j for j in ids if j not in found]
    if rest:
        out = _run(["sacct", "--noheader", "--parsable2", "--format=JobID,State", "--jobs", ",".join(rest)])
        for line in (out or "").splitlines():
            job, _, state = line.strip().partition("|")
            if job in rest:
                found[job] = state.split()[0] if state else ""
    return found


def queue(comment_prefix: str = "rule_train_") -> list[dict[str, str]]:
    """The queued and running jobs whose comment starts with ``comment_prefix`` (the Slurm executor
    plugin's ``rule_{rule}_wildcards_{...}``): id, state, comment, elapsed time and nodes."""
    out = _run(["squeue", "--noheader", "--format=%i|%T|%k|%M|%N|%j"])
    jobs = []
    for line in (out or "").splitlines():
        parts = line.strip().split("|")
        if len(parts) == 6 and parts[2].startswith(comment_prefix):
            jobs.append(dict(zip(("id", "state", "comment", "elapsed", "nodes", "name"), parts, strict=True)))
    return jobs


def end_time(job_id: str) -> dt.datetime | None:
    """When a running job reaches its time limit (squeue ``%e``), or None when unknown or unlimited."""
    out = _run(["squeue", "--noheader", "--format=%e", "--jobs", job_id])
    text = (out or "").strip()
    try:
        return dt.datetime.fromisoformat(text) if text else None
    except ValueError:  # "N/A", "Unknown", or no time limit
        return None


def this_job() -> dict[str, str | None]:
    """The Slurm job this process runs in (all None outside Slurm)."""
    return {
        "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
        "slurm_nodelist": os.environ.get("SLURM_JOB_NODELIST"),
        "slurm_partition": os.environ.get("SLURM_JOB_PARTITION"),
    }
