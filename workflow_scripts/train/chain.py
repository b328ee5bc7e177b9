"""The training chain as plain data: packs -> segments -> evaluations -> retention, with what each step waits
for, whether checkpoints are evaluated, and which checkpoints retention must keep.

Built from every pack's summary (in its keys file, written by ``train-config``) and the ``train`` settings.
The Snakemake rules (``rules/train.smk``, through ``rules/common.smk``) and the detached sbatch chain
(``train/detach.py``) both read it; neither derives any of it again.

- Segment k of a pack waits for segment k - 1; a pack's first segment waits for the previous pack's end
  (``done``: ``train-finished`` found its last step in the checkpoints), under Snakemake and detached.
- A pack is checked after its segments; a pack with nothing to train (0 iterations, no segment) after the
  pack before it, so it keeps its place: the next pack waits for it as for any other.
- Each segment's checkpoint is evaluated when there is an eval command, and not in an SFT run unless
  ``train.evaluate_sft``.
- Retention after segment k waits for its record, its evaluation and the retention before it (so for every
  earlier evaluation: none of them still loads a checkpoint it may delete), and it keeps every pack's end
  (where the next pack starts) and the run's starting checkpoint (``train.finetune_from``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from workflow_scripts.core import schedule
from workflow_scripts.core.cli import UserError
from workflow_scripts.core.train_layout import LOSS_CSV, TrainLayout
from workflow_scripts.train.settings import TrainSettings


class ChainError(UserError, ValueError):
    """A segment that is not in the chain."""


@dataclass(frozen=True)
class Pack:
    """A pack's place in the chain, from the summary in its keys file."""

    name: str
    keys: str
    iteration_offset: int
    train_iters: int
    exit_interval: int
    segments: int
    hours: float

    @classmethod
    def from_summary(cls, keys: str, summary: dict[str, Any]) -> Pack:
        fields = ("iteration_offset", "train_iters", "exit_interval", "segments", "hours")
        return cls(summary["pack"], keys, **{f: summary[f] for f in fields})

    @property
    def end(self) -> int:
        """The pack's last global step."""
        return self.iteration_offset + self.train_iters

    def estimate_s(self) -> int:
        """The plan's guess of one segment's time: the pack's hours over the segments that train."""
        busy = min(self.segments, -(-self.train_iters // self.exit_interval))
        return round(self.hours * 3600 / max(busy, 1))


@dataclass(frozen=True)
class Segment:
    """One segment and the files of its steps."""

    pack: Pack
    k: int
    record: str
    evaluation: str | None  # None: checkpoints are not evaluated
    retention: str
    previous: Segment | None  # the one before it in the chain, in this pack or the last of an earlier one


def evaluates(train: TrainSettings, sft: bool) -> bool:
    """Whether every segment's checkpoint is evaluated: an eval command, and not SFT unless asked."""
    return bool(train.eval_launch) and (not sft or train.evaluate_sft)


@dataclass(frozen=True)
class Chain:
    """Every segment of the run, in training order."""

    layout: TrainLayout
    packs: tuple[Pack, ...]
    segments: tuple[Segment, ...]
    evaluate: bool
    protected: tuple[int, ...]

    @classmethod
    def build(cls, packs: Sequence[Pack], train: TrainSettings, sft: bool, layout: TrainLayout) -> Chain:
        evaluate = evaluates(train, sft)
        protected = [p.end for p in packs]
        protected += [schedule.start_step(train.finetune_from)] if train.finetune_from else []
        segments: list[Segment] = []
        for pack in packs:
            for k in range(pack.segments):
                evaluation = layout.evaluation(pack.name, k) if evaluate else None
                previous = segments[-1] if segments else None
                record, retention = layout.record(pack.name, k), layout.retention(pack.name, k)
                segments.append(Segment(pack, k, record, evaluation, retention, previous))
        return cls(layout, tuple(packs), tuple(segments), evaluate, tuple(protected))

    def pack(self, name: str) -> Pack:
        found = next((p for p in self.packs if p.name == name), None)
        if found is None:
            raise ChainError(
                f"{name} is not a pack of the plan (packs: {', '.join(p.name for p in self.packs)})"
            )
        return found

    def segment(self, pack: str, k: int) -> Segment:
        """Segment ``k`` of ``pack``; an error names the pack's segments when there is no such one."""
        found = next((s for s in self.segments if s.pack.name == pack and s.k == k), None)
        if found is None:
            n = self.pack(pack).segments
            has = f"{n} segments (0-{n - 1})" if n else "no segment (nothing to train)"
            raise ChainError(f"{pack} has {has}, not {k}")
        return found

    def before(self, pack: str) -> Pack | None:
        """The pack trained before ``pack`` (None for the first)."""
        index = self.packs.index(self.pack(pack))
        return self.packs[index - 1] if index else None

    def waits_for(self, pack: str, k: int) -> list[str]:
        """What a segment waits for under Snakemake: the segment before it, or the previous pack's end."""
        self.segment(pack, k)  # an error naming the pack's segments where it has no such one
        if k:
            return [self.layout.record(pack, k - 1)]
        before = self.before(pack)
        return [self.layout.done(before.name)] if before else []

    def finish_waits(self, pack: str) -> list[str]:
        """What a pack's check waits for besides its records: the previous pack's end where it has none."""
        before = self.before(pack)
        return [self.layout.done(before.name)] if before and not self.records(pack) else []

    def prune_inputs(self, pack: str, k: int) -> dict[str, Any]:
        """Retention after a segment: its record, its evaluation, the retention before it."""
        segment = self.segment(pack, k)
        return {
            "record": segment.record,
            "evaluation": [segment.evaluation] if segment.evaluation else [],
            "previous": [segment.previous.retention] if segment.previous else [],
        }

    def records(self, pack: str | None = None) -> list[str]:
        """Every segment record (of ``pack`` only, when given), in training order."""
        return [s.record for s in self.segments if pack in (None, s.pack.name)]

    def evaluations(self) -> list[str]:
        return [s.evaluation for s in self.segments if s.evaluation]

    def target(self) -> list[str]:
        """Everything the training makes: every pack done, every segment's retention, the curve."""
        done = [self.layout.done(p.name) for p in self.packs]
        return [*done, *(s.retention for s in self.segments), self.layout.file(LOSS_CSV)]
