"""``snakepack train-finished``: a pack is done when its checkpoint says so, not when its jobs ended.

Usage (the train_pack rule's command)::

    snakepack train-finished --keys KEYS --out DONE RECORD...   # the pack's files (core/train_layout.py)

It checks that ``latest`` in the checkpoint folder names exactly the pack's last global step
(``iteration_offset + train_iters``) and that this checkpoint exists, and writes the pack's summary from
its segment records: segments, iterations recorded (a failed attempt leaves no record), wall time, the
median measured s/iter, the last losses. The next pack's first segment waits for this file. A pack with
nothing to train has no segment and no record: it is done where the pack before it ended (at step 0 of a
run with no checkpoint yet, before any).
"""

from __future__ import annotations

import argparse
import os
import statistics
from collections.abc import Sequence

from workflow_scripts.core.cli import UserError
from workflow_scripts.core.fsio import read_json, write_json
from workflow_scripts.train.segment import PackKeys


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", required=True, help="the pack's keys file")
    parser.add_argument("--out", required=True, help="the pack's summary (JSON)")
    parser.add_argument("records", nargs="*", help="the pack's segment records, in order (none: no segment)")
    args = parser.parse_args(argv)
    keys = PackKeys.read(args.keys)
    latest = keys.latest()
    tag = keys.layout.path(keys.checkpoints, keys.end)
    untrained = latest is None and keys.end == 0 and not args.records  # nothing trained, nothing to train
    if not untrained and (latest != keys.end or not os.path.exists(tag)):
        raise UserError(
            f"{keys.pack} is not finished: latest in {keys.checkpoints} is "
            f"{keys.tag(latest)}, its end is {keys.tag(keys.end)}"
            f"{'' if os.path.exists(tag) else ' (no such checkpoint)'}"
        )
    records = [read_json(p) for p in args.records]
    rates = [r["s_per_iter"] for r in records if r.get("s_per_iter")]
    trained = [r for r in records if r["iterations"]]
    summary = {
        "pack": keys.pack,
        "first_step": keys.offset,
        "last_step": keys.end,
        "train_iters": keys.train_iters,
        "checkpoint": keys.tag(latest),
        "segments": len(records),
        "segments_training": len(trained),
        "iterations_recorded": sum(r["iterations"] for r in records),  # a failed attempt's are not
        "wall_seconds": round(sum(r["wall_seconds"] for r in records), 3),
        "s_per_iter": statistics.median(rates) if rates else None,
        "train_loss": trained[-1]["train_loss"] if trained else None,
        "slurm_job_ids": [r["slurm_job_id"] for r in records],
    }
    if records and records[-1]["last_step"] != keys.end:
        raise UserError(
            f"{keys.pack}: its last segment record ends at step {records[-1]['last_step']}, the pack "
            f"at {keys.end} (records from another run?)"
        )
    write_json(args.out, summary)
    print(f"train-finished: {keys.pack} at {keys.tag(latest)} after {len(records)} segment(s)")
    return 0
