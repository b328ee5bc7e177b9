"""Fine-tuning from a checkpoint (seed 003): the run's checkpoint folder and the ``finetune`` flag.

Usage::

    snakepack finetune-start --checkpoints DIR --start /path/to/global_stepN

makes ``DIR`` hold a relative symbolic link ``global_stepN`` to the starting checkpoint and a ``latest``
file naming it, so the first job loads it (GPT-NeoX's and DeepSpeed's layout). An existing ``latest`` is
left alone: once the run has saved a checkpoint of its own, a retried job resumes from that.

``finetune`` must be true only while ``latest`` still names the starting checkpoint (weights only, a fresh
optimizer) and false once the run has saved its own, so a retried first job does not reset the optimizer
twice; ``finetune_flag`` gives it, and the training segments set it when they start.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence

from workflow_scripts.core import schedule
from workflow_scripts.core.cli import UserError
from workflow_scripts.core.fsio import atomic_path

LATEST = "latest"


class FinetuneError(UserError, ValueError):
    """A starting checkpoint or checkpoint folder that cannot be used."""


def latest(checkpoints: str) -> str | None:
    """The tag ``latest`` names, or None."""
    path = os.path.join(checkpoints, LATEST)
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as f:
        return f.read().strip() or None


def prepare(checkpoints: str, start: str) -> str:
    """Link the starting checkpoint into ``checkpoints`` and point ``latest`` at it (unless the run has
    its own ``latest`` already); return its tag."""
    step = schedule.start_step(start)
    if not os.path.isdir(start):
        raise FinetuneError(f"train.finetune_from: {start} is not a directory")
    tag = f"global_step{step}"
    os.makedirs(checkpoints, exist_ok=True)
    link = os.path.join(checkpoints, tag)
    target = os.path.relpath(os.path.abspath(start), os.path.abspath(checkpoints))
    if os.path.lexists(link):
        if os.path.realpath(link) != os.path.realpath(start):
            raise FinetuneError(f"{link} exists and is not the starting checkpoint {start}")
    else:
        os.symlink(target, link)
    if latest(checkpoints) is None:
        with atomic_path(os.path.join(checkpoints, LATEST)) as tmp:
            tmp.write_text(tag + "\n", encoding="utf-8")
    return tag


def finetune_flag(checkpoints: str, start: str | None) -> bool:
    """True while ``latest`` still names the starting checkpoint (seed 003's rule)."""
    return start is not None and latest(checkpoints) == f"global_step{schedule.start_step(start)}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoints", required=True, help="the run's save/load directory")
    parser.add_argument("--start", required=True, help="the starting checkpoint (a global_stepN directory)")
    args = parser.parse_args(argv)
    tag = prepare(args.checkpoints, args.start)
    print(f"{args.checkpoints}: latest = {latest(args.checkpoints)} (start {tag})")
    return 0
