"""Fine-tuning from a checkpoint (seed 003): the run's checkpoint folder and the ``finetune`` flag.

Usage::

    snakepack finetune-start --checkpoints DIR --start /path/to/global_stepN [--trainer megatron] [--out FLAG]

makes ``DIR`` hold a relative symbolic link to the starting checkpoint and the tracker naming it, in the
trainer's layout (checkpoint_dirs: GPT-NeoX ``global_stepN`` + ``latest``; Megatron-LM ``iter_NNNNNNN`` +
``latest_checkpointed_iteration.txt``), so the first job loads it. An existing tracker is left alone: once
the run has saved a checkpoint of its own, a retried job resumes from that. A folder of the same name that
is not a link to the start (a checkpoint the run made) is never replaced.

``finetune`` must be true only while the tracker still names the starting checkpoint (weights only, a fresh
optimizer) and false once the run has saved its own, so a retried first job does not reset the optimizer
twice; ``finetune_flag`` gives it, and the training segments set it when they start.

Megatron-LM's ``--finetune`` restarts the iteration count at 0, so a start named within the run's
iterations would be overwritten through the link by the run's own save of that iteration: refused, except
iteration 0 (``train.init_from.hf``'s import), which Megatron-LM never saves (it saves after a trained
iteration, in ``checkpoint_and_decide_exit``, and its final save skips iteration 0).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence

from workflow_scripts.core import schedule
from workflow_scripts.core.cli import UserError
from workflow_scripts.core.fsio import write_json
from workflow_scripts.train import checkpoint_dirs


class FinetuneError(UserError, ValueError):
    """A starting checkpoint or checkpoint folder that cannot be used."""


def prepare(checkpoints: str, start: str, trainer: str = "neox", last_step: int | None = None) -> str:
    """Link the starting checkpoint into ``checkpoints`` and point the tracker at it (unless the run has
    its own already); return its folder name there. ``last_step``: the run's last global step."""
    layout = checkpoint_dirs.of(trainer)
    step = schedule.start_step(start)
    if not os.path.isdir(start):
        raise FinetuneError(f"train.finetune_from: {start} is not a directory")
    if trainer == "megatron" and last_step is not None and 0 < step <= last_step:
        raise FinetuneError(
            f"train.finetune_from: {start}: Megatron-LM's --finetune restarts the iteration count at 0, so "
            f"this run (to iteration {last_step}) could save its own {layout.tag(step)} through the link to "
            "the start and overwrite it; start from a copy named past the run's end (e.g. iter_9999999)"
        )
    tag = layout.tag(step)
    os.makedirs(checkpoints, exist_ok=True)
    link = os.path.join(checkpoints, tag)
    target = os.path.relpath(os.path.abspath(start), os.path.abspath(checkpoints))
    if os.path.lexists(link):
        if not os.path.islink(link) or os.path.realpath(link) != os.path.realpath(start):
            raise FinetuneError(
                f"{link} exists and is not a link to the starting checkpoint {start}: refusing to replace a "
                "checkpoint of the run's own"
            )
    else:
        os.symlink(target, link)
    if layout.latest(checkpoints) is None:
        layout.set_latest(checkpoints, step)
    return tag


def finetune_flag(checkpoints: str, start: str | None, trainer: str = "neox") -> bool:
    """True while the tracker still names the starting checkpoint (seed 003's rule)."""
    if start is None:
        return False
    return checkpoint_dirs.of(trainer).latest(checkpoints) == schedule.start_step(start)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoints", required=True, help="the run's save/load directory")
    parser.add_argument(
        "--start", required=True, help="the starting checkpoint (global_stepN or iter_NNNNNNN)"
    )
    parser.add_argument("--trainer", choices=checkpoint_dirs.TRAINERS, default="neox", help="train.trainer")
    parser.add_argument("--last-step", type=int, help="the run's last global step (the plan's end)")
    parser.add_argument("--out", help="also write what was done here (JSON; the workflow's rule output)")
    args = parser.parse_args(argv)
    tag = prepare(args.checkpoints, args.start, args.trainer, args.last_step)
    layout = checkpoint_dirs.of(args.trainer)
    latest = layout.latest_tag(args.checkpoints)
    if args.out:
        write_json(
            args.out, {"checkpoints": args.checkpoints, "start": args.start, "link": tag, "latest": latest}
        )
    print(f"{args.checkpoints}: {layout.tracker} = {latest} (start {tag})")
    return 0
