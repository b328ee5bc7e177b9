"""What a dry run under a Slurm profile would submit: one row per rule with its Slurm job count and the
largest request (CPUs, memory, time limit). A per-shard stage's job covers a batch of shards
(core/batches.py).

This handler gathers the jobs Snakemake logs in the dry run and prints the table after its "This was a
dry-run" line.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from snakemake_interface_logger_plugins.common import LogEvent

DRY_RUN_DONE = "This was a dry-run"  # the start of Snakemake's last line of a dry run


@dataclass
class RuleRow:
    """The Slurm jobs of one rule in the plan."""

    slurm_jobs: int = 0
    cpus: int = 0
    mem_mb: int = 0
    runtime_min: int = 0

    def add(self, resources: Any) -> None:
        self.slurm_jobs += 1
        self.cpus = max(self.cpus, int(resources.get("_cores", 1) or 1))
        self.mem_mb = max(self.mem_mb, _int(resources.get("mem_mb")))
        self.runtime_min = max(self.runtime_min, _int(resources.get("runtime")))


def _int(value: Any) -> int:
    return value if isinstance(value, int) else 0  # unknown until run (TBD) or unset


def table(rows: dict[str, RuleRow]) -> str:
    """The plan as text: a row per rule, then the totals."""
    import pandas as pd  # only in a dry run under a cluster profile

    records = [
        {
            "rule": name,
            "slurm jobs": row.slurm_jobs,
            "cpus": row.cpus,
            "mem_mb": row.mem_mb,
            "runtime (min)": row.runtime_min,
        }
        for name, row in sorted(rows.items())
    ]
    total = {"rule": "total", "slurm jobs": sum(r.slurm_jobs for r in rows.values())}
    frame = pd.DataFrame([*records, total], dtype=object).fillna("")
    return frame.to_string(index=False)


class SlurmPlan(logging.Handler):
    """Gathers the jobs a dry run logs; prints what Slurm would get when the dry run ends.

    ``is_local(rule)`` says whether a rule runs where Snakemake runs (``localrule``): no Slurm job.
    """

    def __init__(self, is_local: Callable[[str], bool]) -> None:
        super().__init__()
        self.is_local = is_local
        self.rows: dict[str, RuleRow] = {}
        self.local_jobs = 0

    def emit(self, record: logging.LogRecord) -> None:
        event = getattr(record, "event", None)
        if event == LogEvent.JOB_INFO and self.is_local(record.rule_name):
            self.local_jobs += 1
        elif event == LogEvent.JOB_INFO:
            resources = {**dict(record.resources.items()), "_cores": record.threads}
            self.rows.setdefault(record.rule_name, RuleRow()).add(resources)
        elif record.getMessage().startswith(DRY_RUN_DONE) and self.rows:
            slurm = sum(r.slurm_jobs for r in self.rows.values())
            local = self.local_jobs
            print(
                "Slurm jobs this run would submit (the jobs known now: those after a checkpoint join once"
                f" it ran):\n{table(self.rows)}\n"
                f"{slurm} Slurm jobs and {local} local jobs: the plan's {slurm + local} jobs",
                flush=True,
            )
