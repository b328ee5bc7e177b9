"""The plan as typed data: ``Plan.read(path)`` is the one reader of ``plan.json``.

The planner (``planner.make_plan``) and ``plan_files`` build the plan in its JSON form (a dict) and write it;
every module that reads a plan takes a ``Plan``. ``Plan.from_dict`` reads the JSON form, refusing one
without a key it needs (naming the file, the entry and the key), and ``to_dict`` gives it back unchanged,
so ``plan.json`` keeps its format: keys written only when they are set (``notes``; the trainer settings,
``training`` and ``checkpoint_disk`` that ``plan_files`` adds) stay absent when they are not.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from workflow_scripts.core.cli import UserError
from workflow_scripts.core.fsio import read_json

T = TypeVar("T")


class PlanFormatError(UserError, ValueError):
    """A plan without a key this version reads (made by another version, or edited by hand)."""


class _Entry:
    """One JSON object of the plan, its file and where in it (``packs[2].slices[0]``), for the errors."""

    def __init__(self, raw: Any, file: str, at: str = "") -> None:
        self.raw, self.file, self.at = raw, file, at
        if not isinstance(raw, Mapping):
            raise PlanFormatError(f"{self.place()} is not an object")

    def place(self) -> str:
        """The file, and the entry in it: ``results/plan.json: packs[2].slices[0]``."""
        return f"{self.file}: {self.at}" if self.at else self.file

    def get(self, key: str) -> Any:
        """The value of a key every plan has."""
        if key not in self.raw:
            raise PlanFormatError(
                f"{self.place()} has no {key!r} (a plan of another snakepack version? "
                "make it again: snakemake --forcerun plan)"
            )
        return self.raw[key]

    def optional(self, key: str) -> Any:
        """The value of a key that only some plans have; ``None`` when absent."""
        return self.raw.get(key)

    def entry(self, key: str, value: Any) -> _Entry:
        """The object ``value`` found under ``key``."""
        return _Entry(value, self.file, f"{self.at}.{key}" if self.at else key)

    def each(self, key: str, read: Callable[[_Entry], T]) -> tuple[T, ...]:
        """A list of objects, each read with ``read``."""
        return tuple(read(self.entry(f"{key}[{i}]", item)) for i, item in enumerate(self.get(key)))

    def by_name(self, key: str, read: Callable[[_Entry], T]) -> dict[str, T]:
        """An object of objects (by source name), each read with ``read``."""
        return {name: read(self.entry(f"{key}.{name}", item)) for name, item in self.get(key).items()}

    def one(self, key: str, read: Callable[[_Entry], T]) -> T:
        """An object every plan has, read with ``read``."""
        return read(self.entry(key, self.get(key)))

    def maybe(self, key: str, read: Callable[[_Entry], T]) -> T | None:
        """An object that only some plans have, read with ``read``; ``None`` when absent."""
        value = self.optional(key)
        return None if value is None else read(self.entry(key, value))


def _present(**values: Any) -> dict[str, Any]:
    """The keys whose value is set (the optional keys of the JSON form)."""
    return {k: v for k, v in values.items() if v is not None}


@dataclass(frozen=True)
class CursorState:
    """Where a source is read next: completed epochs and the document index."""

    epoch: int
    doc: int

    @classmethod
    def read(cls, entry: _Entry) -> CursorState:
        return cls(entry.get("epoch"), entry.get("doc"))

    def to_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "doc": self.doc}


def _cursors(cursors: Mapping[str, CursorState]) -> dict[str, dict[str, int]]:
    return {name: c.to_dict() for name, c in cursors.items()}


@dataclass(frozen=True)
class Slice:
    """A source's documents in a training pack: ``ranges`` of (epoch, first, stop) in its reading order."""

    source: str
    prefix: str  # the source's counted link (no .bin)
    lang: str
    domain: str
    target: int  # the source's share of the pack's budget
    tokens: int  # what the whole documents up to the target hold
    documents: int
    ranges: tuple[tuple[int, int, int], ...]
    start: CursorState
    end: CursorState
    epochs_before: float
    epochs_after: float
    upsampled: bool  # read in a second (or later) epoch
    name: str  # the slice's file name

    @classmethod
    def read(cls, e: _Entry) -> Slice:
        return cls(
            source=e.get("source"),
            prefix=e.get("prefix"),
            lang=e.get("lang"),
            domain=e.get("domain"),
            target=e.get("target"),
            tokens=e.get("tokens"),
            documents=e.get("documents"),
            ranges=tuple((a, b, c) for a, b, c in e.get("ranges")),
            start=e.one("start", CursorState.read),
            end=e.one("end", CursorState.read),
            epochs_before=e.get("epochs_before"),
            epochs_after=e.get("epochs_after"),
            upsampled=e.get("upsampled"),
            name=e.get("name"),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "prefix": self.prefix,
            "lang": self.lang,
            "domain": self.domain,
            "target": self.target,
            "tokens": self.tokens,
            "documents": self.documents,
            "ranges": [list(r) for r in self.ranges],
            "start": self.start.to_dict(),
            "end": self.end.to_dict(),
            "epochs_before": self.epochs_before,
            "epochs_after": self.epochs_after,
            "upsampled": self.upsampled,
            "name": self.name,
        }


@dataclass(frozen=True)
class HeldOutSlice:
    """A source's documents held out for validation: the last ones, in epoch 0."""

    source: str
    prefix: str
    lang: str
    tokens: int
    documents: int
    ranges: tuple[tuple[int, int, int], ...]
    epochs_after: float
    upsampled: bool
    name: str

    @classmethod
    def read(cls, e: _Entry) -> HeldOutSlice:
        return cls(
            source=e.get("source"),
            prefix=e.get("prefix"),
            lang=e.get("lang"),
            tokens=e.get("tokens"),
            documents=e.get("documents"),
            ranges=tuple((a, b, c) for a, b, c in e.get("ranges")),
            epochs_after=e.get("epochs_after"),
            upsampled=e.get("upsampled"),
            name=e.get("name"),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "prefix": self.prefix,
            "lang": self.lang,
            "tokens": self.tokens,
            "documents": self.documents,
            "ranges": [list(r) for r in self.ranges],
            "epochs_after": self.epochs_after,
            "upsampled": self.upsampled,
            "name": self.name,
        }


@dataclass(frozen=True)
class NeoxKeys:
    """The GPT-NeoX keys that train on one pack (for the users' own tools)."""

    train_data_paths: tuple[str, ...]
    train_data_weights: tuple[float, ...]
    train_iters: int
    iteration_offset: int
    seq_length: int
    train_batch_size: int

    @classmethod
    def read(cls, e: _Entry) -> NeoxKeys:
        return cls(
            train_data_paths=tuple(e.get("train_data_paths")),
            train_data_weights=tuple(e.get("train_data_weights")),
            train_iters=e.get("train_iters"),
            iteration_offset=e.get("iteration_offset"),
            seq_length=e.get("seq_length"),
            train_batch_size=e.get("train_batch_size"),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "train_data_paths": list(self.train_data_paths),
            "train_data_weights": list(self.train_data_weights),
            "train_iters": self.train_iters,
            "iteration_offset": self.iteration_offset,
            "seq_length": self.seq_length,
            "train_batch_size": self.train_batch_size,
        }


@dataclass(frozen=True)
class PackTraining:
    """A pack's training cadence (config ``train``): trainer config, checkpoints, Slurm segments, hours."""

    config: str
    checkpoint_factor: int
    extra_save_iters: tuple[int, ...]
    exit_interval: int
    segments: int
    hours: float  # at the s/iter guess

    @classmethod
    def read(cls, e: _Entry) -> PackTraining:
        return cls(
            config=e.get("config"),
            checkpoint_factor=e.get("checkpoint_factor"),
            extra_save_iters=tuple(e.get("extra_save_iters")),
            exit_interval=e.get("exit_interval"),
            segments=e.get("segments"),
            hours=e.get("hours"),
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON form, in the columns' order of the plan's training table."""
        return {
            "config": self.config,
            "checkpoint_factor": self.checkpoint_factor,
            "extra_save_iters": list(self.extra_save_iters),
            "exit_interval": self.exit_interval,
            "segments": self.segments,
            "hours": self.hours,
        }


@dataclass(frozen=True)
class PackPlan:
    """One training pack: its slices, iterations and place in the run, and the cursors after it.

    ``merged_prefix``, ``neox`` and ``megatron_data_args`` are set once ``plan_files`` knows where the packs
    are merged, ``training`` when the config has ``train.base_config``; ``None`` before.
    """

    name: str
    phase: str
    mixture: str
    budget: int
    tokens: int
    documents: int
    slices: tuple[Slice, ...]
    train_iters: int
    iteration_offset: int  # the global iterations of the packs before it
    trained_tokens: int
    wall_hours: float | None  # None: no estimate (training.model_params, gpus, tflops_per_gpu)
    state_after: dict[str, CursorState]  # every source's cursor after this pack
    merged_prefix: str | None = None
    neox: NeoxKeys | None = None
    megatron_data_args: tuple[str, ...] | None = None
    training: PackTraining | None = None

    @classmethod
    def read(cls, e: _Entry) -> PackPlan:
        megatron = e.optional("megatron_data_args")
        return cls(
            name=e.get("name"),
            phase=e.get("phase"),
            mixture=e.get("mixture"),
            budget=e.get("budget"),
            tokens=e.get("tokens"),
            documents=e.get("documents"),
            slices=e.each("slices", Slice.read),
            train_iters=e.get("train_iters"),
            iteration_offset=e.get("iteration_offset"),
            trained_tokens=e.get("trained_tokens"),
            wall_hours=e.get("wall_hours"),
            state_after=e.by_name("state_after", CursorState.read),
            merged_prefix=e.optional("merged_prefix"),
            neox=e.maybe("neox", NeoxKeys.read),
            megatron_data_args=None if megatron is None else tuple(megatron),
            training=e.maybe("training", PackTraining.read),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "phase": self.phase,
            "mixture": self.mixture,
            "budget": self.budget,
            "tokens": self.tokens,
            "documents": self.documents,
            "slices": [s.to_dict() for s in self.slices],
            "train_iters": self.train_iters,
            "iteration_offset": self.iteration_offset,
            "trained_tokens": self.trained_tokens,
            "wall_hours": self.wall_hours,
            "state_after": _cursors(self.state_after),
            **_present(
                merged_prefix=self.merged_prefix,
                neox=self.neox and self.neox.to_dict(),
                megatron_data_args=None if self.megatron_data_args is None else list(self.megatron_data_args),
                training=self.training and self.training.to_dict(),
            ),
        }


@dataclass(frozen=True)
class ValidationPack:
    """One language's held-out documents (``valid_{lang}``): read by no training pack, never chained."""

    name: str
    phase: str  # "validation"
    lang: str
    budget: int  # datapacks.validation_tokens
    tokens: int
    documents: int
    slices: tuple[HeldOutSlice, ...]
    state_after: dict[str, CursorState]  # empty: a validation pack moves no cursor
    merged_prefix: str | None = None  # set by plan_files, as a pack's

    @classmethod
    def read(cls, e: _Entry) -> ValidationPack:
        return cls(
            name=e.get("name"),
            phase=e.get("phase"),
            lang=e.get("lang"),
            budget=e.get("budget"),
            tokens=e.get("tokens"),
            documents=e.get("documents"),
            slices=e.each("slices", HeldOutSlice.read),
            state_after=e.by_name("state_after", CursorState.read),
            merged_prefix=e.optional("merged_prefix"),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "phase": self.phase,
            "lang": self.lang,
            "budget": self.budget,
            "tokens": self.tokens,
            "documents": self.documents,
            "slices": [s.to_dict() for s in self.slices],
            "state_after": _cursors(self.state_after),
            **_present(merged_prefix=self.merged_prefix),
        }


@dataclass(frozen=True)
class PhaseBudget:
    """A phase of ``datapacks.phases`` and the tokens it was given (a fraction phase's carved out)."""

    name: str
    mixture: str
    tokens: int

    @classmethod
    def read(cls, e: _Entry) -> PhaseBudget:
        return cls(e.get("name"), e.get("mixture"), e.get("tokens"))

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "mixture": self.mixture, "tokens": self.tokens}


@dataclass(frozen=True)
class SourceTokens:
    """A source's tokens: available, taken by each pack and in all, epochs read, held out for validation."""

    available: int
    taken: int
    epochs: float
    by_pack: dict[str, int]
    held_out: int | None = None  # None: nothing held out of this source

    @classmethod
    def read(cls, e: _Entry) -> SourceTokens:
        return cls(
            available=e.get("available"),
            taken=e.get("taken"),
            epochs=e.get("epochs"),
            by_pack=dict(e.get("by_pack")),
            held_out=e.optional("held_out"),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "available": self.available,
            "taken": self.taken,
            "epochs": self.epochs,
            "by_pack": dict(self.by_pack),
            **_present(held_out=self.held_out),
        }


@dataclass(frozen=True)
class CheckpointDisk:
    """The run's checkpoints under the retention policy and the disk they need (None: unknown or unset)."""

    checkpoints_saved: int
    checkpoints_kept: int
    tb_each: float | None
    tb_needed: float | None  # the kept ones and the one being written
    quota_tb: float | None

    @classmethod
    def read(cls, e: _Entry) -> CheckpointDisk:
        return cls(
            checkpoints_saved=e.get("checkpoints_saved"),
            checkpoints_kept=e.get("checkpoints_kept"),
            tb_each=e.get("tb_each"),
            tb_needed=e.get("tb_needed"),
            quota_tb=e.get("quota_tb"),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "checkpoints_saved": self.checkpoints_saved,
            "checkpoints_kept": self.checkpoints_kept,
            "tb_each": self.tb_each,
            "tb_needed": self.tb_needed,
            "quota_tb": self.quota_tb,
        }


@dataclass(frozen=True)
class Plan:
    """The datapack plan: the iteration math, the phases, the packs and validation packs, and the sources'
    epochs and token conservation."""

    tokens_per_iter: int
    seq_length: int
    global_batch_size: int
    epoch_rule: str
    max_tokens_per_pack: int
    shuffle: bool
    seed: int  # the sources' reading order when they are shuffled
    phases: tuple[PhaseBudget, ...]
    packs: tuple[PackPlan, ...]
    validation: tuple[ValidationPack, ...]
    total_train_iters: int
    final_epochs: dict[str, float]  # every source's epochs read after the last pack
    conservation: dict[str, SourceTokens]
    notes: tuple[str, ...] = ()
    checkpoint_disk: CheckpointDisk | None = None  # with train.base_config

    @classmethod
    def read(cls, path: str | os.PathLike[str]) -> Plan:
        """The plan in ``path`` (a ``plan.json``)."""
        return cls.from_dict(read_json(path), os.fspath(path))

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any], where: str = "the plan") -> Plan:
        """The plan in its JSON form; ``where`` names it in errors (the file it was read from)."""
        e = _Entry(raw, where)
        return cls(
            tokens_per_iter=e.get("tokens_per_iter"),
            seq_length=e.get("seq_length"),
            global_batch_size=e.get("global_batch_size"),
            epoch_rule=e.get("epoch_rule"),
            max_tokens_per_pack=e.get("max_tokens_per_pack"),
            shuffle=e.get("shuffle"),
            seed=e.get("seed"),
            phases=e.each("phases", PhaseBudget.read),
            packs=e.each("packs", PackPlan.read),
            validation=e.each("validation", ValidationPack.read),
            total_train_iters=e.get("total_train_iters"),
            final_epochs=dict(e.get("final_epochs")),
            conservation=e.by_name("conservation", SourceTokens.read),
            notes=tuple(e.optional("notes") or ()),
            checkpoint_disk=e.maybe("checkpoint_disk", CheckpointDisk.read),
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON form, as the planner and ``plan_files`` build it."""
        return {
            "tokens_per_iter": self.tokens_per_iter,
            "seq_length": self.seq_length,
            "global_batch_size": self.global_batch_size,
            "epoch_rule": self.epoch_rule,
            "max_tokens_per_pack": self.max_tokens_per_pack,
            "shuffle": self.shuffle,
            "seed": self.seed,
            "phases": [p.to_dict() for p in self.phases],
            "packs": [p.to_dict() for p in self.packs],
            "validation": [v.to_dict() for v in self.validation],
            **({"notes": list(self.notes)} if self.notes else {}),
            "total_train_iters": self.total_train_iters,
            "final_epochs": dict(self.final_epochs),
            "conservation": {name: t.to_dict() for name, t in self.conservation.items()},
            **_present(checkpoint_disk=self.checkpoint_disk and self.checkpoint_disk.to_dict()),
        }
