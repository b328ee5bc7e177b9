"""``snakepack train-curve``: the run's tables and its loss curve, across segments and packs.

Usage (the train_curve rule's command)::

    snakepack train-curve --out-dir results/train --segments RECORD... --evals EVAL...   # train_layout

Writes, under ``--out-dir``:

- ``loss.csv``: ``iteration,pack,segment,loss`` on one global-iteration axis, from each segment's attempts
  (beside its record, same config) and its record: a killed attempt's iterations are there,
  and a step trained twice (lost by a crash, trained again by the retry) has the later attempt's loss,
- ``evals.csv``: one row per evaluated checkpoint (``pack,segment,checkpoint,iteration,valid_loss,...``),
- ``segments.csv``: one row per segment (steps, Slurm job id, nodes, wall time, s/iter, exit),
- ``loss.png``: the training loss and the checkpoints' validation losses, packs shaded (matplotlib),
- ``stats.json``: packs, segments, iterations, evaluations.
"""

from __future__ import annotations

import argparse
import csv
import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from workflow_scripts.core import train_layout
from workflow_scripts.core.fsio import atomic_path, read_json, write_json

SEGMENT_COLUMNS = (
    "pack",
    "segment",
    "attempt",
    "first_step",
    "last_step",
    "iterations",
    "checkpoint",
    "slurm_job_id",
    "slurm_nodelist",
    "wall_seconds",
    "s_per_iter",
    "train_loss",
    "valid_loss",
    "exit",
)
EVAL_COLUMNS = ("pack", "segment", "checkpoint", "iteration", "valid_loss", "valid_ppl", "samples", "skipped")


def write_csv(path: Path, columns: Sequence[str], rows: list[dict[str, Any]]) -> None:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    with atomic_path(path) as tmp:
        tmp.write_text(buffer.getvalue(), encoding="utf-8")


def plot(path: Path, losses: list[dict[str, Any]], evals: list[dict[str, Any]]) -> None:
    """The loss curve (PNG, deterministic bytes)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4.5), dpi=100)
    ax.plot([r["iteration"] for r in losses], [r["loss"] for r in losses], lw=1, label="training loss")
    done = [e for e in evals if e.get("valid_loss") is not None]
    if done:
        ax.plot(
            [e["iteration"] for e in done], [e["valid_loss"] for e in done], "o-", label="validation loss"
        )
    packs: dict[str, list[int]] = {}
    for r in losses:
        packs.setdefault(r["pack"], []).append(r["iteration"])
    for i, (name, steps) in enumerate(packs.items()):
        ax.axvspan(min(steps) - 1, max(steps), alpha=0.08 if i % 2 else 0.0, color="grey")
        ax.text(
            (min(steps) + max(steps)) / 2,
            1.0,
            name,
            transform=ax.get_xaxis_transform(),
            ha="center",
            va="bottom",
            fontsize=8,
        )
    ax.set_xlabel("global iteration")
    ax.set_ylabel("loss")
    ax.legend()
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", metadata={"Software": None})
    plt.close(fig)


def attempts(record_path: str, record: dict[str, Any]) -> list[dict[str, Any]]:
    """The runs of a segment with the record's config that did not write the record, in the order they
    started, then the record."""
    runs = [read_json(p) for p in train_layout.attempts_of(record_path, record["segment"])]
    runs = [r for r in runs if r != record and r.get("config_sha256") == record.get("config_sha256")]
    return [*sorted(runs, key=lambda r: r["started"]), record]


def loss_rows(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per global step trained, the last run's loss where runs overlap, in step order."""
    rows: dict[int, dict[str, Any]] = {}
    for run in runs:
        for step, loss in run["losses"]:
            if step > run["first_step"]:
                rows[step] = {"iteration": step, "pack": run["pack"], "segment": run["segment"], "loss": loss}
    return [rows[step] for step in sorted(rows)]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out-dir", required=True)
    parser.add_argument("--segments", nargs="+", required=True, help="segment records, in training order")
    parser.add_argument("--evals", nargs="*", default=[], help="evaluation records")
    args = parser.parse_args(argv)
    out = Path(args.out_dir)
    records = [read_json(p) for p in args.segments]
    runs = [attempts(path, record) for path, record in zip(args.segments, records, strict=True)]
    files = [read_json(p) for p in args.evals]  # a segment's: one row per checkpoint it evaluated
    rows = [row for e in files for row in e.get("evaluations", [e])]
    evals = sorted(rows, key=lambda e: (e["iteration"], e["pack"]))
    losses = loss_rows([run for segment_runs in runs for run in segment_runs])
    write_csv(out / train_layout.LOSS_CSV, ("iteration", "pack", "segment", "loss"), losses)
    write_csv(out / train_layout.EVALS_CSV, EVAL_COLUMNS, evals)
    write_csv(out / train_layout.SEGMENTS_CSV, SEGMENT_COLUMNS, records)
    if losses:
        plot(out / train_layout.LOSS_PNG, losses, evals)
    packs = list(dict.fromkeys(r["pack"] for r in records))
    stats = {
        "packs": len(packs),
        "segments": len(records),
        "segments_training": sum(1 for r in records if r["iterations"]),
        "iterations": sum(r["iterations"] for r in records),
        "first_step": min((r["first_step"] for r in records), default=None),
        "last_step": max((r["last_step"] for r in records), default=None),
        "loss_points": len(losses),
        "failed_attempts": sum(len(segment_runs) - 1 for segment_runs in runs),
        "evaluations": sum(1 for e in evals if e.get("valid_loss") is not None),
        "evaluations_skipped": sum(1 for e in evals if e.get("skipped")),
        "wall_seconds": round(sum(r["wall_seconds"] for r in records), 3),
    }
    write_json(out / train_layout.STATS, stats)
    print(
        f"train-curve: {stats['packs']} packs, {stats['segments']} segments, global steps "
        f"{stats['first_step']}-{stats['last_step']}, {stats['evaluations']} evaluations"
    )
    return 0
