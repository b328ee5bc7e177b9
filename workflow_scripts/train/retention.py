"""``snakepack train-prune``: the checkpoint retention policy, applied after each segment.

Usage (the train_prune rule's command)::

    snakepack train-prune --record RECORD --keep-last 3 --milestones 1000 2000 --out RETENTION
    # RECORD, RETENTION: a segment's files (core/train_layout.py)

Of the checkpoints up to the segment's own (in its trainer's layout, checkpoint_dirs), it keeps the last
``--keep-last`` (0 keeps all), the milestones, the run's starting checkpoint (``--protect``) and whatever
the tracker names, and deletes the rest. Checkpoints after the segment's are never touched: the next
segment may be saving them, and their evaluations have not run yet (this job runs after the segment's
evaluation). The record lists what was kept and deleted, and the bytes freed.
"""

from __future__ import annotations

import argparse
import shutil
from collections.abc import Sequence
from pathlib import Path

from workflow_scripts.core import schedule
from workflow_scripts.core.fsio import read_json, write_json
from workflow_scripts.train import checkpoint_dirs


def size_of(path: Path) -> int:
    if path.is_symlink() or path.is_file():
        return path.lstat().st_size
    return sum(p.lstat().st_size for p in path.rglob("*") if not p.is_dir() or p.is_symlink())


def prune(
    checkpoints: str,
    up_to: int,
    keep_last: int,
    milestones: Sequence[int],
    protect: Sequence[int],
    trainer: str = "neox",
) -> dict:
    """Delete the checkpoints up to ``up_to`` that the policy does not keep; say what it did."""
    layout = checkpoint_dirs.of(trainer)
    steps = [s for s in layout.steps(checkpoints) if s <= up_to]
    latest = layout.latest(checkpoints)
    keep = set(schedule.kept_checkpoints(steps, keep_last, milestones)) | set(protect)
    if latest is not None:
        keep.add(latest)
    deleted, freed = [], 0
    for step in steps:
        if step in keep:
            continue
        path = Path(layout.path(checkpoints, step))
        freed += size_of(path)
        if path.is_symlink():
            path.unlink()
        else:
            shutil.rmtree(path)
        deleted.append(step)
    return {
        "checkpoints": checkpoints,
        "up_to": up_to,
        "latest": latest,
        "kept": sorted(s for s in steps if s in keep),
        "deleted": deleted,
        "bytes_freed": freed,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--record", required=True, help="the segment's record")
    parser.add_argument(
        "--keep-last", type=int, default=0, help="checkpoints kept besides milestones (0: all)"
    )
    parser.add_argument("--milestones", type=int, nargs="*", default=[], help="global steps always kept")
    parser.add_argument("--protect", type=int, nargs="*", default=[], help="more global steps always kept")
    parser.add_argument("--out", required=True, help="what was kept and deleted (JSON)")
    args = parser.parse_args(argv)
    record = read_json(args.record)
    result = prune(
        record["checkpoints"],
        record["last_step"],
        args.keep_last,
        args.milestones,
        args.protect,
        record.get("trainer", "neox"),
    )
    write_json(args.out, {"pack": record["pack"], "segment": record["segment"], **result})
    print(
        f"train-prune: {record['pack']} segment {record['segment']}: kept {result['kept']}, deleted "
        f"{result['deleted'] or 'nothing'} ({result['bytes_freed'] / 2**20:.1f} MiB freed)"
    )
    return 0
