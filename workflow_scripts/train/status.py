"""``snakepack status`` (or ``snakemake status``): where the training stands, in one screen.

Usage::

    snakepack status --train-dir results/train --logs-dir logs [--train-json '{...}'] [--suggest] [--json]

For each pack: its global steps, segments done of planned, the Slurm jobs of its segments that are
queued or running (the Snakemake executor's and a detached chain's), the last iteration reached (from
``latest``, or from a running segment's log), the measured s/iter against the plan's guess, and the ETA;
for the run: the latest checkpoint and the disk the checkpoints use. A running segment whose log has not
grown for ``train.stall_minutes`` is flagged STALLED. ``--suggest`` recomputes ``checkpoint_factor``,
``exit_interval`` and the segments of the packs not started yet at the measured s/iter (seed 000 guessed
17 s/iter): set ``train.seconds_per_iter`` to the value it prints and their configs follow.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from workflow_scripts.core import train_layout
from workflow_scripts.core.fsio import read_json
from workflow_scripts.core.train_layout import TrainLayout
from workflow_scripts.train import checkpoint_dirs, progress_lines, slurm
from workflow_scripts.train.configs.keys import cadence_of
from workflow_scripts.train.settings import TrainSettings


def disk_bytes(path: str) -> int:
    """Bytes under ``path`` (links not followed)."""
    total = 0
    for root, _, files in os.walk(path):
        total += sum(os.lstat(os.path.join(root, f)).st_size for f in files)
    return total


def running_jobs(train_dir: str) -> dict[tuple[str, int], dict[str, str]]:
    """(pack, segment) -> queued or running Slurm job of a segment (executor plugin or detached chain)."""
    jobs: dict[tuple[str, int], dict[str, str]] = {}
    for job in slurm.queue("rule_train_segment_wildcards_"):
        pack, _, segment = job["comment"].removeprefix("rule_train_segment_wildcards_").rpartition("_")
        jobs[(pack, int(segment))] = job
    if os.path.exists(TrainLayout(train_dir).detach_state):
        for job in slurm.queue("snakepack_"):
            parts = job["comment"].removeprefix("snakepack_").split("/")
            if len(parts) == 3 and parts[1] == "segment":
                jobs[(parts[0], int(parts[2]))] = job
    return jobs


def last_logged_iteration(log: Path) -> int | None:
    """The last iteration a segment's log shows (the trainer's progress between checkpoints)."""
    if not log.exists():
        return None
    with open(log, "rb") as f:
        f.seek(max(0, log.stat().st_size - 65536))
        lines = f.read().decode("utf-8", "replace").splitlines()
    found = [v[0] for line in lines if (v := progress_lines.iteration_loss(line))]
    return found[-1] if found else None


def pack_state(done: bool, active: bool, started: bool) -> str:
    if done:
        return "done"
    if active:
        return "queued/running"
    return "started" if started else "waiting"


def pack_rows(train_dir: str, logs_dir: str, train: TrainSettings) -> tuple[list[dict[str, Any]], dict]:
    layout = TrainLayout(train_dir, logs_dir)
    configs = pd.read_csv(layout.file(train_layout.CONFIGS_CSV))
    jobs = running_jobs(train_dir)
    keys = read_json(layout.keys(configs["pack"][0]))
    checkpoints = keys["set"]["save"]["value"]
    layout_of_run = checkpoint_dirs.of(keys.get("trainer", "neox"))
    latest = layout_of_run.latest(checkpoints)
    rows, rates = [], []
    for pack in configs.to_dict("records"):
        name = pack["pack"]
        done = [read_json(r) for r in layout.records_of(name)]
        rates += [r["s_per_iter"] for r in done if r.get("s_per_iter")]
        start, end = pack["iteration_offset"], pack["iteration_offset"] + pack["train_iters"]
        active = {k: j for (p, k), j in jobs.items() if p == name}
        reached = min(max(latest, start), end) if latest is not None and latest >= start else start
        note = ""
        for k, job in sorted(active.items()):
            log = Path(layout.step_log(name, "segment", k))
            if job["state"] == "RUNNING":
                logged = last_logged_iteration(log)
                reached = max(reached, logged or reached)
                idle = time.time() - log.stat().st_mtime if log.exists() else 0
                if idle > train.stall_minutes * 60:
                    note = f"STALLED: {log} silent for {idle / 60:.0f} min"
        measured = statistics.median([r["s_per_iter"] for r in done if r.get("s_per_iter")] or [0]) or None
        rows.append(
            {
                "pack": name,
                "steps": f"{start}-{end}",
                "reached": reached,
                "segments": f"{len(done)}/{pack['segments']}",
                "slurm": " ".join(f"{k}:{j['id']}:{j['state']}" for k, j in sorted(active.items())) or "-",
                "s/iter": measured,
                "plan s/iter": pack.get("seconds_per_iter", train.seconds_per_iter),
                "state": pack_state(os.path.exists(layout.done(name)), bool(active), reached > start),
                "note": note,
            }
        )
    rate = statistics.median(rates) if rates else None
    left = sum(int(r["steps"].split("-")[1]) - r["reached"] for r in rows)
    run = {
        "checkpoints": checkpoints,
        "latest": None if latest is None else layout_of_run.tag(latest),
        "checkpoint_bytes": disk_bytes(checkpoints) if os.path.isdir(checkpoints) else 0,
        "measured_s_per_iter": rate,
        "iterations_left": left,
        "eta_hours": round(left * (rate or train.seconds_per_iter) / 3600, 3),
    }
    return rows, run


def suggestions(
    rows: list[dict[str, Any]], train: TrainSettings, rate: float, train_dir: str
) -> pd.DataFrame:
    """The cadence of the packs not started yet, at the measured s/iter."""
    cadence = dataclasses.replace(cadence_of(train), seconds_per_iter=rate)
    configs = pd.read_csv(TrainLayout(train_dir).file(train_layout.CONFIGS_CSV)).set_index("pack")
    out = []
    for row in rows:
        if row["state"] != "waiting":
            continue
        pack = configs.loc[row["pack"]]
        new = cadence.pack(int(pack["iteration_offset"]), int(pack["train_iters"]))
        out.append(
            {
                "pack": row["pack"],
                "checkpoint_factor": f"{pack['checkpoint_factor']} -> {new.checkpoint_factor}",
                "exit_interval": f"{pack['exit_interval']} -> {new.exit_interval}",
                "segments": f"{pack['segments']} -> {new.segments}",
            }
        )
    return pd.DataFrame(out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--train-dir", default="results/train")
    parser.add_argument("--logs-dir", default="logs")
    parser.add_argument("--train-json", default="{}", help="the config's train section (JSON; defaults)")
    parser.add_argument(
        "--suggest", action="store_true", help="the cadence of unstarted packs at measured s/iter"
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    args = parser.parse_args(argv)
    train = TrainSettings.from_config(json.loads(args.train_json))
    configs = TrainLayout(args.train_dir).file(train_layout.CONFIGS_CSV)
    if not os.path.exists(configs):
        print(f"status: no trainer configs yet ({configs}): build the data first")
        return 0
    rows, run = pack_rows(args.train_dir, args.logs_dir, train)
    if args.json:
        print(json.dumps({"packs": rows, "run": run}, indent=1))
        return 0
    shown = [{**row, "s/iter": row["s/iter"] or "-"} for row in rows]  # "-": no segment has measured it
    print(pd.DataFrame(shown).to_string(index=False))
    print(
        f"latest {run['latest'] or 'none'} in {run['checkpoints']} "
        f"({run['checkpoint_bytes'] / 2**30:.2f} GiB); "
        f"{run['iterations_left']} iterations left, ETA {run['eta_hours']} h at "
        f"{run['measured_s_per_iter'] or train.seconds_per_iter} s/iter "
        f"({'measured' if run['measured_s_per_iter'] else 'the plan guess'})"
    )
    if args.suggest:
        if not run["measured_s_per_iter"]:
            print("--suggest: no segment has measured s/iter yet")
        else:
            table = suggestions(rows, train, run["measured_s_per_iter"], args.train_dir)
            print(f"at the measured {run['measured_s_per_iter']} s/iter (set train.seconds_per_iter to it):")
            print(table.to_string(index=False) if len(table) else "  every pack has started")
    return 0
