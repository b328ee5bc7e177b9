"""The training section, once training ran: train and validation loss on one global-iteration axis across
segments and packs, measured s/iter against the plan's guess, and the segments' timeline (Slurm jobs,
retries), and how much of each language and domain each checkpoint has seen (``consumption``).

Reads what the trainers leave under ``train/`` (the names are core/train_layout.py's): the Slurm segment
records (pack, segment, first_step, last_step, iterations, slurm_job_id, nodelist, wall_seconds, s_per_iter,
train_loss, valid_loss, exit, retries), the runs that wrote no record (the attempts: failed or killed), the
segments' curve (``loss.csv``: every iteration's loss, killed attempts' included; ``evals.csv``: each
checkpoint's validation loss), and the reference trainer's own curves, evaluations and segment records.
Missing files leave their chart out.

Usage (the report's training section, in ``--out-dir`` as ``snakepack report`` writes the others)::

    snakepack report-training --train-dir results/train [--checkpoints DIR] [--plan plan.json] \
        [--seconds-per-iter S] [--captions report/training/*.rst] --out-dir results/report/training
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Sequence

import numpy as np
import pandas as pd

from workflow_scripts.core import train_layout
from workflow_scripts.core.fsio import read_json
from workflow_scripts.core.train_layout import TrainLayout
from workflow_scripts.datapacks.plan import Plan
from workflow_scripts.lineage.steps import pack_config
from workflow_scripts.report import consumption
from workflow_scripts.report.charts import (
    Chart,
    colors,
    figure,
    message_figure,
    read_captions,
    write_section,
)
from workflow_scripts.train import checkpoint_dirs

SEGMENT_COLUMNS = [
    "pack",
    "trainer",
    "segment",
    "first_step",
    "last_step",
    "iterations",
    "slurm_job_id",
    "nodelist",
    "wall_seconds",
    "s_per_iter",
    "train_loss",
    "valid_loss",
    "exit",
    "retries",
    "failed",
]


def segments(paths: list[str]) -> pd.DataFrame:
    """One row per segment record (Slurm and reference) and per Slurm run that wrote none (``failed``), in
    the order they ran (global iteration)."""
    records, attempts = [], []
    for path in paths:
        kind = train_layout.kind_of(path)
        if kind and kind[0] == "record":
            records.append((read_json(path), kind[1], kind[2], path))
        elif kind:
            attempts.append(read_json(path))
    written = [record for record, *_ in records]
    runs = records + [(a, a["pack"], "slurm", "") for a in attempts if a not in written]
    rows = []
    for record, pack, trainer, path in runs:
        iterations = record.get("iterations") or 0
        rows.append(
            {
                "pack": record.get("pack", pack),
                "trainer": trainer,
                "segment": record.get("segment", os.path.basename(path).removesuffix(".json")),
                "first_step": record["first_step"],
                "last_step": record["last_step"],
                "iterations": iterations,
                "slurm_job_id": record.get("slurm_job_id"),
                "nodelist": record.get("slurm_nodelist", record.get("nodelist")),
                "wall_seconds": record.get("wall_seconds"),
                "s_per_iter": record.get("s_per_iter")
                or (
                    record["train_seconds"] / iterations if iterations and "train_seconds" in record else None
                ),
                "train_loss": record.get("train_loss"),
                "valid_loss": record.get("valid_loss"),
                "exit": record.get("exit"),
                "retries": record.get("attempt", 1) - 1,
                "failed": not path,
            }
        )
    table = pd.DataFrame(rows, columns=SEGMENT_COLUMNS)
    order = ["first_step", "failed", "trainer", "pack"]  # a failed run before its retry from the same step
    return table.sort_values(order, ascending=[True, False, True, True], kind="stable").reset_index(drop=True)


def losses(paths: list[str]) -> pd.DataFrame:
    """The loss per global iteration and the evaluations, one row each: the Slurm segments' curve and the
    reference trainer's."""
    frames = []
    for path in paths:
        pack = os.path.basename(os.path.dirname(path))
        if os.path.basename(path) == train_layout.LOSS_CSV:
            rows = pd.read_csv(path)
            packs = rows.get("pack", pack)  # the segments' curve names each row's pack
            frames.append(
                pd.DataFrame(
                    {"pack": packs, "kind": "train", "iteration": rows["iteration"], "loss": rows["loss"]}
                )
            )
        elif os.path.basename(path) == train_layout.EVALS_CSV:
            rows = pd.read_csv(path).dropna(subset=["valid_loss"])
            frames.append(
                pd.DataFrame(
                    {
                        "pack": rows["pack"],
                        "kind": "validation",
                        "iteration": rows["iteration"],
                        "loss": rows["valid_loss"],
                    }
                )
            )
        elif path.endswith("eval.jsonl"):
            with open(path, encoding="utf-8") as f:
                evals = [json.loads(line) for line in f if line.strip()]
            frames.append(
                pd.DataFrame(
                    {
                        "pack": pack,
                        "kind": "validation",
                        "iteration": [e["iteration"] for e in evals],
                        "loss": [e["valid_loss"] for e in evals],
                    }
                )
            )
    table = (
        pd.concat(frames, ignore_index=True)
        if frames
        else pd.DataFrame(columns=["pack", "kind", "iteration", "loss"])
    )
    return table.sort_values(["iteration", "kind", "pack"], kind="stable").reset_index(drop=True)


def loss_chart(curve: pd.DataFrame, segs: pd.DataFrame, offsets: dict[str, int]) -> Chart:
    """Train and validation loss against the global iteration; dotted lines where packs start."""
    fig, (ax,) = figure(10, 4.5)
    packs = list(dict.fromkeys([*offsets, *curve["pack"], *segs["pack"]]))
    palette = dict(zip(packs, colors(len(packs)), strict=True))
    for pack, rows in curve[curve["kind"] == "train"].groupby("pack", sort=False):
        ax.plot(rows["iteration"], rows["loss"], lw=1, color=palette[pack], label=f"{pack} train")
    for pack, rows in curve[curve["kind"] == "validation"].groupby("pack", sort=False):
        ax.plot(rows["iteration"], rows["loss"], "o--", ms=4, color=palette[pack], label=f"{pack} validation")
    points = [
        {"pack": r.pack, "kind": f"segment {kind}", "iteration": r.last_step, "loss": loss}
        for r in segs.itertuples()
        for kind, loss in (("train", r.train_loss), ("validation", r.valid_loss))
        if loss is not None and not pd.isna(loss)
    ]
    labelled = set()
    for point in points:
        marker = "s" if point["kind"] == "segment train" else "D"
        label = None if point["kind"] in labelled else point["kind"]
        labelled.add(point["kind"])
        ax.plot(point["iteration"], point["loss"], marker, ms=5, color=palette[point["pack"]], label=label)
    for offset in sorted(set(offsets.values()) - {0}):
        ax.axvline(offset, color="#999", ls=":", lw=1)
    ax.set_xlabel("global iteration")
    ax.set_ylabel("loss")
    if packs:
        ax.legend(fontsize=7, bbox_to_anchor=(1.01, 1), loc="upper left")
    table = pd.concat([curve, pd.DataFrame(points, columns=curve.columns)], ignore_index=True)
    return Chart("loss", TITLES["loss"], fig, table)


def speed_chart(segs: pd.DataFrame, guess: float | None) -> Chart:
    """Measured seconds per iteration of each segment against the plan's s/iter guess."""
    table = segs[["pack", "trainer", "segment", "first_step", "last_step", "s_per_iter"]].copy()
    table["planned_s_per_iter"] = guess
    fig, (ax,) = figure(10, 4)
    x = np.arange(len(table))
    packs = list(dict.fromkeys(table["pack"]))
    palette = dict(zip(packs, colors(len(packs)), strict=True))
    ax.bar(x, table["s_per_iter"].astype(float), color=table["pack"].map(palette))
    if guess is not None:
        ax.axhline(guess, color="#d43", ls="--", label=f"plan: {guess:g} s/iter")
        ax.legend()
    ax.set_xticks(
        x,
        [
            f"{p}\n{a}-{b}"
            for p, a, b in zip(table["pack"], table["first_step"], table["last_step"], strict=True)
        ],
        fontsize=7,
    )
    ax.set_ylabel("seconds per iteration")
    return Chart("speed", TITLES["speed"], fig, table)


def timeline_chart(segs: pd.DataFrame) -> Chart:
    """Every segment run on a wall-clock axis (one after another), labelled with its job; failed runs and
    retries marked."""
    columns = ["pack", "trainer", "segment", "slurm_job_id", "nodelist", "wall_seconds", "retries", "failed"]
    table = segs[[*columns, "exit"]].copy()
    hours = table["wall_seconds"].fillna(0).astype(float) / 3600
    table["start_hours"] = (hours.cumsum() - hours).round(6)
    packs = list(dict.fromkeys(table["pack"]))
    fig, (ax,) = figure(10, max(2.5, 0.45 * len(packs) + 1.2))
    y = {p: len(packs) - 1 - i for i, p in enumerate(packs)}
    for start, width, row in zip(table["start_hours"], hours, table.itertuples(), strict=True):
        color = "#d43" if row.failed else "#e93" if row.retries else "#58a"
        ax.barh(y[row.pack], width, left=start, color=color, edgecolor="white")
        job = row.slurm_job_id if row.slurm_job_id is not None and not pd.isna(row.slurm_job_id) else "local"
        label = f"{job}" + (" (failed)" if row.failed else f" ({row.retries} retries)" if row.retries else "")
        ax.text(start + width / 2, y[row.pack], label, ha="center", va="center", fontsize=7, color="white")
    ax.set_yticks(list(y.values()), list(y))
    ax.set_xlabel("wall hours (runs one after another; red: failed or killed, orange: a retry)")
    return Chart("timeline", TITLES["timeline"], fig, table)


def consumption_chart(configs: list[str], plan: Plan | None) -> Chart:
    """Each language and domain's share of its trainable tokens read by each saved checkpoint."""
    if plan is None or not configs:
        return _nothing("consumption", "no trainer config yet")
    runs = [pack_config(c, plan) for c in configs]
    saved = sorted({s for r in runs if r.save for s in checkpoint_dirs.of(r.trainer).steps(r.save)})
    if not saved:
        return _nothing("consumption", "no checkpoint saved yet")
    table = consumption.consumption(runs, plan, saved)
    fig, (ax,) = figure(10, 4)
    groups = list(dict.fromkeys(table["group"]))
    for group, color in zip(groups, colors(len(groups)), strict=True):
        rows = table[table["group"] == group]
        ax.plot(rows["step"], rows["share"], marker="o", color=color, label=group)
    ax.set_xlabel("global step (each point a saved checkpoint)")
    ax.set_ylabel("share of the trainable tokens read (1 = one epoch)")
    ax.legend(fontsize=7, bbox_to_anchor=(1.01, 1), loc="upper left")
    return Chart("consumption", TITLES["consumption"], fig, table)


def charts(
    paths: list[str], plan: Plan | None, seconds_per_iter: float | None, configs: list[str]
) -> list[Chart]:
    """The four training charts; each says so when the records do not have its numbers yet."""
    runs, curve = segments(paths), losses(paths)
    segs = runs[~runs["failed"].astype(bool)]
    offsets = {p.name: p.iteration_offset for p in plan.packs} if plan else {}
    has_loss = len(curve) or segs[["train_loss", "valid_loss"]].notna().to_numpy().any()
    return [
        loss_chart(curve, segs, offsets) if has_loss else _nothing("loss", "no loss recorded yet"),
        speed_chart(segs, seconds_per_iter)
        if segs["s_per_iter"].notna().any()
        else _nothing("speed", "no segment timed yet"),
        timeline_chart(runs) if len(runs) else _nothing("timeline", "no segment recorded yet"),
        consumption_chart(configs, plan),
    ]


def _nothing(name: str, why: str) -> Chart:
    return Chart(name, TITLES[name], message_figure(why), pd.DataFrame())


TITLES = {
    "loss": "Loss and validation loss across segments and packs",
    "speed": "Measured s/iter against the plan's guess",
    "timeline": "Segment timeline: Slurm jobs and retries",
    "consumption": "What each checkpoint has seen of each language and domain",
}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="The report's training section: charts, tables, a page.")
    parser.add_argument("--out-dir", required=True, help="where the charts, tables and index.html go")
    parser.add_argument("--captions", nargs="*", default=[], help="one-line caption files, {chart}.rst")
    parser.add_argument("--train-dir", required=True, help="the train stage's folder")
    parser.add_argument(
        "--checkpoints", help="the run's checkpoints (train.checkpoints_dir; default: the train folder's)"
    )
    parser.add_argument("--plan")
    parser.add_argument("--seconds-per-iter", type=float, help="the plan's s/iter guess")
    args = parser.parse_args(argv)
    layout, plan = TrainLayout(args.train_dir), Plan.read(args.plan) if args.plan else None
    packs = plan.packs if plan else ()
    configs = [layout.config(p.name, ext) for p in packs for ext in (".yml", ".args")]
    made = charts(
        layout.records(args.checkpoints),
        plan,
        args.seconds_per_iter,
        [c for c in configs if os.path.isfile(c)],
    )
    write_section(args.out_dir, "Training", made, read_captions(args.captions))
    print(f"Training: {', '.join(c.name for c in made)} -> {args.out_dir}")
    return 0
