"""A run's checkpoint folder in its trainer's own layout.

- GPT-NeoX (DeepSpeed): ``global_stepN/`` folders; ``latest`` holds the tag of the newest complete one (a
  folder above it is a save cut short: ``remove_partial``).
- Megatron-LM: ``iter_NNNNNNN/`` folders (seven digits); ``latest_checkpointed_iteration.txt`` holds the
  iteration (or ``release``, a converted model without one).

Everything the workflow reads or writes in a checkpoint folder goes through ``of(trainer)``.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass

from workflow_scripts.core.cli import UserError
from workflow_scripts.core.fsio import atomic_path

TRAINERS = ("neox", "megatron")


class CheckpointDirError(UserError, ValueError):
    """A tracker file that names no checkpoint of its trainer's layout."""


@dataclass(frozen=True)
class CheckpointLayout:
    """The names one trainer gives its checkpoints and its tracker file."""

    trainer: str
    tracker: str
    prefix: str
    digits: int  # zero padding of the step (0: none)

    def tag(self, step: int) -> str:
        """The folder name of the checkpoint at global step ``step``."""
        return f"{self.prefix}{step:0{self.digits}d}" if self.digits else f"{self.prefix}{step}"

    def step(self, tag: str) -> int | None:
        """The global step of a folder name, or None for a name of another kind."""
        match = re.fullmatch(re.escape(self.prefix) + r"(\d+)", tag)
        if match is None or (self.digits and len(match.group(1)) != self.digits):
            return None
        return int(match.group(1))

    def latest(self, checkpoints: str) -> int | None:
        """The global step the tracker names (None without a tracker)."""
        path = os.path.join(checkpoints, self.tracker)
        if not os.path.isfile(path):
            return None
        with open(path, encoding="utf-8") as f:
            text = f.read().strip()
        step = self.step(text) if self.trainer == "neox" else (int(text) if text.isdigit() else None)
        if step is None:
            raise CheckpointDirError(f"{path} holds {text!r}, not a checkpoint of {self.trainer}'s layout")
        return step

    def latest_tag(self, checkpoints: str) -> str | None:
        step = self.latest(checkpoints)
        return None if step is None else self.tag(step)

    def set_latest(self, checkpoints: str, step: int) -> None:
        """Point the tracker at ``step`` (written under a temporary name, then renamed)."""
        text = self.tag(step) if self.trainer == "neox" else str(step)
        with atomic_path(os.path.join(checkpoints, self.tracker)) as tmp:
            tmp.write_text(text + "\n", encoding="utf-8")

    def steps(self, checkpoints: str) -> list[int]:
        """The global steps with a checkpoint folder (or a link to one) in ``checkpoints``."""
        if not os.path.isdir(checkpoints):
            return []
        return sorted(s for name in os.listdir(checkpoints) if (s := self.step(name)) is not None)

    def path(self, checkpoints: str, step: int) -> str:
        return os.path.join(checkpoints, self.tag(step))

    def remove_partial(self, checkpoints: str) -> list[str]:
        """Remove the checkpoint folders above the tracker's step (none without a tracker): saves cut before
        the tracker named them. The LUMI fork (with ``iteration_offset``) takes its iteration from the
        newest ``global_step*`` folder while DeepSpeed loads the weights ``latest`` names. A link (a
        fine-tune's start, named past the run's end for Megatron-LM) is left alone. Returns their names."""
        latest = self.latest(checkpoints)
        if latest is None:
            return []
        doomed = [
            s for s in self.steps(checkpoints) if s > latest and not os.path.islink(self.path(checkpoints, s))
        ]
        for step in doomed:
            shutil.rmtree(self.path(checkpoints, step))
        return [self.tag(s) for s in doomed]


NEOX = CheckpointLayout("neox", "latest", "global_step", 0)
MEGATRON = CheckpointLayout("megatron", "latest_checkpointed_iteration.txt", "iter_", 7)


def of(trainer: str) -> CheckpointLayout:
    """The layout of ``train.trainer``."""
    return {"neox": NEOX, "megatron": MEGATRON}[trainer]
