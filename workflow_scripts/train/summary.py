"""``snakepack train-summary``: the packs' training table (iterations, cadence, segments, hours), as CSV and
Markdown, from each pack's keys file (its ``summary``, a row that ``train-config`` writes with ``row``)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from workflow_scripts.core import schedule
from workflow_scripts.core.fsio import atomic_path, read_json
from workflow_scripts.datapacks.plan import PackPlan
from workflow_scripts.train.settings import TrainSettings

SUMMARY_COLUMNS = [
    "pack",
    "config",
    "train_iters",
    "iteration_offset",
    "checkpoint_factor",
    "exit_interval",
    "segments",
    "hours",
    "seconds_per_iter",
    "data_parallel",
]


def row(
    pack: PackPlan, values: dict[str, Any], train: TrainSettings, layout: dict[str, int], path: str
) -> dict[str, Any]:
    """A pack's row: iterations, cadence, segments, time (``values``: the keys its config sets)."""
    iters, interval = pack.train_iters, values["exit_interval"]
    return {
        "pack": pack.name,
        "config": path,
        "train_iters": iters,
        "iteration_offset": values["iteration_offset"],
        "checkpoint_factor": values["checkpoint_factor"],
        "exit_interval": interval,
        "segments": schedule.segments(iters, interval, train.spare_segments),
        "hours": round(iters * train.seconds_per_iter / 3600, 3),
        "seconds_per_iter": train.seconds_per_iter,
        "data_parallel": layout["dp"],
    }


def main(argv: Sequence[str] | None = None) -> int:
    """``snakepack train-summary``: the packs' training rows as CSV and Markdown, printed too."""
    import pandas as pd

    parser = argparse.ArgumentParser(description="The per-pack training summary table.")
    parser.add_argument("--csv", required=True)
    parser.add_argument("--md", required=True)
    parser.add_argument("keys", nargs="*", help="each pack's keys file, in plan order")
    args = parser.parse_args(argv)
    table = pd.DataFrame([read_json(k)["summary"] for k in args.keys], columns=SUMMARY_COLUMNS)
    with atomic_path(args.csv) as tmp:
        table.to_csv(tmp, index=False)
    text = table.to_markdown(index=False) if len(table) else "(no packs)"
    with atomic_path(args.md) as tmp:
        tmp.write_text(text + "\n", encoding="utf-8")
    print(text)
    return 0
