"""The plan as typed data: ``Plan.read(path)`` is the one reader of ``plan.json`` and its table.

``plan.json`` is the plan's header, for people and trainers: the iteration math, the phases, each pack's
summary (budget, tokens, iterations, offset, merged prefix, trainer keys, training cadence), the validation
packs', the notes and the documents taken out (``Excluded``); its size does not grow with the sources. The
rows per (pack, source) slice and per source are the plan's table beside it (``plan_table``: Parquet), read
only by what needs them. The planner (``planner.make_plan``) and ``plan_files`` build the plan in its
in-memory form (the header's keys, each pack's rows under ``slices`` and the sources' columns under
``sources``); ``Plan.from_dict`` reads that form or the header alone. The entries are frozen dataclasses whose
fields are the JSON keys, in the JSON's order, read with ``msgspec.convert`` (lists become tuples, objects
dataclasses), refusing one without a key it needs or with a value of the wrong type (naming the file, the
entry and the key). ``to_dict`` gives the header back unchanged, field by field: a field with a default
(``notes``; the trainer settings, ``training`` and ``checkpoint_disk`` that ``plan_files`` adds, ``excluded``)
is left out while it holds that default, and one without a default is always written (``wall_hours`` and
``tb_each`` as null when unknown). ``Slice`` and ``HeldOutSlice`` type a pack's rows of the table
(``plan_table.pack_slices``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, TypeAlias

import msgspec

from workflow_scripts.core.cli import UserError
from workflow_scripts.core.fsio import read_json

# A JSON number where the plan holds a float: msgspec reads ``float`` alone as a float, and 10 would be
# written back as 10.0 (a config's ``checkpoint_quota_tb: 10``); read as ``int | float``, it stays as written.
Number: TypeAlias = int | float


class PlanFormatError(UserError, ValueError):
    """A plan without a key this version reads, or with a value of another type (made by another version, or
    edited by hand)."""


REMAKE = "(a plan of another snakepack version? make it again: snakemake --forcerun plan)"


def _format_error(error: msgspec.ValidationError, where: str) -> PlanFormatError:
    """msgspec's ``Object missing required field `tokens` - at `$.packs[1].slices[0]``` as
    ``results/plan.json: packs[1].slices[0] has no 'tokens' (...)``."""
    what, _, at = str(error).partition(" - at `$")
    at = at.rstrip("`").lstrip(".")
    place = f"{where}: {at}" if at else where
    missing = re.fullmatch(r"Object missing required field `(.+)`", what)
    if missing:
        return PlanFormatError(f"{place} has no {missing.group(1)!r} {REMAKE}")
    return PlanFormatError(f"{place}: {what[:1].lower()}{what[1:]} {REMAKE}")


def _json(value: Any) -> Any:
    """``value`` in its JSON form: an entry as its ``to_dict``, tuples as lists."""
    if isinstance(value, _Entry):
        return value.to_dict()
    if isinstance(value, tuple | list):
        return [_json(v) for v in value]
    if isinstance(value, dict):
        return {k: _json(v) for k, v in value.items()}
    return value


class _Entry:
    """An entry of the plan (a dataclass): its JSON form is its fields, those at their default left out."""

    def to_dict(self) -> dict[str, Any]:
        """The JSON form: every field in order, one with a default only when it holds another value (a field
        kept out of ``repr`` is no key: ``Plan.where``)."""
        values = ((f, getattr(self, f.name)) for f in fields(self) if f.repr)  # type: ignore[arg-type]
        return {f.name: _json(value) for f, value in values if value != f.default}


@dataclass(frozen=True, kw_only=True)
class CursorState(_Entry):
    """Where a source is read next: completed epochs and the document index."""

    epoch: int
    doc: int


@dataclass(frozen=True, kw_only=True)
class Slice(_Entry):
    """A source's documents in a training pack: ``ranges`` of (epoch, first, stop) in its reading order."""

    source: str
    prefix: str  # the source's counted link (no .bin)
    lang: str
    domain: str
    target: int  # the source's share of the pack's budget, less what the sources before it gave over theirs
    tokens: int  # what the whole documents up to the target hold
    documents: int
    ranges: tuple[tuple[int, int, int], ...]
    start: CursorState
    end: CursorState
    epochs_before: Number
    epochs_after: Number
    upsampled: bool  # read in a second (or later) epoch
    name: str  # the slice's file name


@dataclass(frozen=True, kw_only=True)
class HeldOutSlice(_Entry):
    """A source's documents held out for validation: the last ones, in epoch 0."""

    source: str
    prefix: str
    lang: str
    tokens: int
    documents: int
    ranges: tuple[tuple[int, int, int], ...]
    epochs_after: Number
    upsampled: bool
    name: str


@dataclass(frozen=True, kw_only=True)
class NeoxKeys(_Entry):
    """The GPT-NeoX keys that train on one pack (for the users' own tools)."""

    train_data_paths: tuple[str, ...]
    train_data_weights: tuple[Number, ...]
    train_iters: int
    iteration_offset: int
    seq_length: int
    train_batch_size: int


@dataclass(frozen=True, kw_only=True)
class PackTraining(_Entry):
    """A pack's training cadence (config ``train``): trainer config, checkpoints, Slurm segments, hours.

    The fields are in the columns' order of the plan's training table."""

    config: str
    checkpoint_factor: int
    extra_save_iters: tuple[int, ...]
    exit_interval: int
    segments: int
    hours: Number  # at the s/iter guess


@dataclass(frozen=True, kw_only=True)
class PackPlan(_Entry):
    """One training pack's summary: its size, iterations and place in the run (its rows: ``plan_table``).

    ``merged_prefix``, ``neox`` and ``megatron_data_args`` are set once ``plan_files`` knows where the packs
    are merged, ``training`` when the config has ``train.base_config``; ``None`` (and absent) before.
    """

    name: str
    phase: str
    mixture: str
    budget: int
    tokens: int
    documents: int
    sources: int  # the sources it reads (its rows of the table)
    upsampled_sources: int  # of them, those read in a second (or later) epoch
    train_iters: int
    iteration_offset: int  # the global iterations of the packs before it
    trained_tokens: int
    wall_hours: Number | None  # None: no estimate (training.model_params, gpus, tflops_per_gpu)
    merged_prefix: str | None = None
    neox: NeoxKeys | None = None
    megatron_data_args: tuple[str, ...] | None = None
    training: PackTraining | None = None


@dataclass(frozen=True, kw_only=True)
class ValidationPack(_Entry):
    """One language's held-out documents (``valid_{lang}``): read by no training pack, never chained."""

    name: str
    phase: str  # "validation"
    lang: str
    budget: int  # datapacks.validation_tokens
    tokens: int
    documents: int
    sources: int  # the sources it holds documents of
    merged_prefix: str | None = None  # set by plan_files, as a pack's


@dataclass(frozen=True, kw_only=True)
class PhaseBudget(_Entry):
    """A phase of ``datapacks.phases`` and the tokens it was given (a fraction phase's carved out)."""

    name: str
    mixture: str
    tokens: int


@dataclass(frozen=True, kw_only=True)
class CheckpointDisk(_Entry):
    """The run's checkpoints under the retention policy and the disk they need (None: unknown or unset)."""

    checkpoints_saved: int
    checkpoints_kept: int
    tb_each: Number | None
    tb_needed: Number | None  # the kept ones and the one being written
    quota_tb: Number | None


@dataclass(frozen=True, kw_only=True)
class Excluded(_Entry):
    """A source's documents taken out (``datapacks.exclude``): the packs after the started ones read none."""

    source: str
    documents: tuple[int, ...]  # its own document numbers
    places: tuple[int, ...]  # theirs in the reading order, those training may read (not held out)
    started_packs: tuple[str, ...]  # the started (kept) packs that hold one of them


@dataclass(frozen=True, kw_only=True)
class Plan(_Entry):
    """The datapack plan's header: the iteration math, the phases, the packs' and validation packs' summaries.

    ``where`` is the ``plan.json`` it was read from (its table is beside it); not part of the JSON."""

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
    notes: tuple[str, ...] = ()
    excluded: tuple[Excluded, ...] = ()
    total_train_iters: int
    checkpoint_disk: CheckpointDisk | None = None  # with train.base_config
    where: str = field(default="", compare=False, repr=False)

    @classmethod
    def read(cls, path: str | os.PathLike[str]) -> Plan:
        """The plan in ``path`` (a ``plan.json``); its table is read from beside it when asked for."""
        try:
            raw = read_json(path)
        except FileNotFoundError:
            raise PlanFormatError(f"{path}: missing (make the plan: snakemake plan)") from None
        return cls.from_dict({**raw, "where": os.fspath(path)}, os.fspath(path))

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any], where: str = "the plan") -> Plan:
        """The plan in its JSON form, the header alone or the planner's form with its rows (kept for its
        table: ``plan_table.tables``); ``where`` names it in errors (the file it was read from)."""
        try:
            plan = msgspec.convert(raw, type=cls)
        except msgspec.ValidationError as error:
            raise _format_error(error, where) from None
        if "sources" in raw:
            plan.__dict__["rows"] = raw  # a frozen dataclass: its own __dict__ keeps what it was made from
        return plan
