"""The plan's table: a row per (pack, source) slice and a row per source, in Parquet beside ``plan.json``.

``plan.slices.parquet`` (for ``plan.json``) holds every slice of the training packs, then of the validation
packs, in the plan's order: ``pack``, ``source``, ``prefix``, ``lang``, ``domain``, ``target``, ``tokens``,
``documents``, ``ranges`` (``[epoch, first, stop]`` in the source's reading order), the cursor before and
after it (``start_epoch``, ``start_doc``, ``end_epoch``, ``end_doc``), ``epochs_before``, ``epochs_after``,
``upsampled`` and ``name`` (a held-out slice has no domain, target, cursors or ``epochs_before``: null).
``plan.sources.parquet`` holds every source, in the signature's order: ``source``, ``prefix``, ``lang``,
``domain``, its ``documents`` (the held-out ones included), the tokens ``available`` to the packs,
``taken`` by them, the ``epochs`` read after the last pack and the tokens ``held_out`` for validation
(null: none). No pack stores every source's cursor: a pack moves
only the cursors of the sources it reads, so each cursor before and after every pack follows from the rows
(``states``), as each pack's spec writes it.

Parquet (pyarrow) rather than numpy arrays: typed, compressed columns (names and prefixes are strings of any
length, a slice's ranges a list) that the report sums with pandas and a pack's spec filters by pack, without
a layout of our own; at 100,000 sources the table is a few MB where the plan's JSON was 60.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from workflow_scripts.core.fsio import atomic_path
from workflow_scripts.datapacks.plan import REMAKE, HeldOutSlice, Plan, PlanFormatError, Slice

INT, FLOAT = pa.int64(), pa.float64()
SLICES = pa.schema(
    [
        ("pack", pa.string()),
        ("source", pa.string()),
        ("prefix", pa.string()),
        ("lang", pa.string()),
        ("domain", pa.string()),
        ("target", INT),
        ("tokens", INT),
        ("documents", INT),
        ("ranges", pa.list_(pa.list_(INT))),
        ("start_epoch", INT),
        ("start_doc", INT),
        ("end_epoch", INT),
        ("end_doc", INT),
        ("epochs_before", FLOAT),
        ("epochs_after", FLOAT),
        ("upsampled", pa.bool_()),
        ("name", pa.string()),
    ]
)
SOURCES = pa.schema(
    [
        ("source", pa.string()),
        ("prefix", pa.string()),
        ("lang", pa.string()),
        ("domain", pa.string()),
        ("documents", INT),
        ("available", INT),
        ("taken", INT),
        ("epochs", FLOAT),
        ("held_out", INT),
    ]
)
HELD_OUT_KEYS = (
    "source",
    "prefix",
    "lang",
    "tokens",
    "documents",
    "ranges",
    "epochs_after",
    "upsampled",
    "name",
)


@dataclass(frozen=True)
class Tables:
    """The plan's two tables."""

    slices: pa.Table
    sources: pa.Table


def paths(plan_json: str | os.PathLike[str]) -> tuple[Path, Path]:
    """The slices' and the sources' files of the plan ``plan_json``."""
    path = Path(plan_json)
    return path.with_name(f"{path.stem}.slices.parquet"), path.with_name(f"{path.stem}.sources.parquet")


def from_rows(raw: dict[str, Any]) -> Tables:
    """The tables of the plan in the planner's form (each pack's ``slices``, the ``sources`` columns)."""
    columns: dict[str, list[Any]] = {name: [] for name in SLICES.names}
    for pack in [*raw["packs"], *raw["validation"]]:
        for row in pack["slices"]:
            start, end = row.get("start") or {}, row.get("end") or {}
            flat = {
                **row,
                "pack": pack["name"],
                "start_epoch": start.get("epoch"),
                "start_doc": start.get("doc"),
                "end_epoch": end.get("epoch"),
                "end_doc": end.get("doc"),
            }
            for name, values in columns.items():
                values.append(flat.get(name))
    return Tables(pa.Table.from_pydict(columns, SLICES), pa.Table.from_pydict(raw["sources"], SOURCES))


def _read(path: Path, schema: pa.Schema) -> pa.Table:
    """One table, refused (naming the file) when it is missing or lacks a column of ``schema``."""
    try:
        table = pq.read_table(path)
    except FileNotFoundError:
        raise PlanFormatError(f"{path}: missing {REMAKE}") from None
    except pa.ArrowInvalid as error:
        raise PlanFormatError(f"{path}: not a table ({error}) {REMAKE}") from None
    for field in schema:
        if field.name not in table.column_names:
            raise PlanFormatError(f"{path}: has no column {field.name!r} {REMAKE}")
        if not table.schema.field(field.name).type.equals(field.type):
            found = table.schema.field(field.name).type
            raise PlanFormatError(f"{path}: column {field.name!r} is {found}, expected {field.type} {REMAKE}")
    return table.select(schema.names)


def read(plan_json: str | os.PathLike[str]) -> Tables:
    """The tables beside ``plan_json``."""
    slices, sources = paths(plan_json)
    return Tables(_read(slices, SLICES), _read(sources, SOURCES))


def write(tables: Tables, plan_json: str | os.PathLike[str]) -> None:
    """Write the tables beside ``plan_json``, each atomically."""
    for table, path in zip((tables.slices, tables.sources), paths(plan_json), strict=True):
        with atomic_path(path) as tmp:
            pq.write_table(table, tmp, compression="zstd")


def tables(plan: Plan) -> Tables:
    """The plan's tables: from the rows it was made from, else from beside its file (read once)."""
    cached = plan.__dict__.get("tables")
    if cached is None:
        if "rows" in plan.__dict__:
            cached = from_rows(plan.__dict__["rows"])
        elif plan.where:
            cached = read(plan.where)
        else:
            raise PlanFormatError(f"the plan has no table: read it with Plan.read {REMAKE}")
        plan.__dict__["tables"] = cached  # a frozen dataclass: its own __dict__ keeps it
    return cached


def pack_rows(plan: Plan, pack: str) -> list[dict[str, Any]]:
    """The rows of ``pack`` as in its spec: a slice's cursors as ``start`` and ``end``, a held-out slice's
    keys alone."""
    rows = tables(plan).slices.filter(pc.equal(tables(plan).slices["pack"], pack)).to_pylist()
    spec = []
    for row in rows:
        if row["target"] is None:
            spec.append({k: row[k] for k in HELD_OUT_KEYS})
            continue
        row["start"] = {"epoch": row.pop("start_epoch"), "doc": row.pop("start_doc")}
        row["end"] = {"epoch": row.pop("end_epoch"), "doc": row.pop("end_doc")}
        del row["pack"]
        spec.append(row)
    return spec


def pack_slices(plan: Plan, pack: str) -> tuple[Slice, ...] | tuple[HeldOutSlice, ...]:
    """The slices of ``pack``, typed (a validation pack's as ``HeldOutSlice``)."""
    kind = HeldOutSlice if pack in {v.name for v in plan.validation} else Slice
    return msgspec.convert(pack_rows(plan, pack), type=tuple[kind, ...])  # type: ignore[valid-type]


def states(plan: Plan) -> Iterator[dict[str, dict[str, int]]]:
    """Every source's cursor (``{"epoch", "doc"}``) before the first pack, then after each training pack."""
    table = tables(plan)
    names = table.sources["source"].to_pylist()
    index = {name: i for i, name in enumerate(names)}
    packs = table.slices["pack"].to_numpy(zero_copy_only=False)
    rows = np.array([index[s] for s in table.slices["source"].to_pylist()], dtype=np.int64)
    ends = [table.slices[c].fill_null(0).to_numpy() for c in ("end_epoch", "end_doc")]
    epoch, doc = np.zeros(len(names), np.int64), np.zeros(len(names), np.int64)

    def state() -> dict[str, dict[str, int]]:
        return {
            n: {"epoch": e, "doc": d} for n, e, d in zip(names, epoch.tolist(), doc.tolist(), strict=True)
        }

    yield state()
    for pack in plan.packs:
        mine = np.flatnonzero(packs == pack.name)
        epoch[rows[mine]], doc[rows[mine]] = ends[0][mine], ends[1][mine]
        yield state()


def slice_frame(plan: Plan) -> pd.DataFrame:
    """The training packs' slices (without their ranges), with each pack's phase and mixture."""
    slices = tables(plan).slices.drop_columns(["ranges"]).to_pandas()
    packs = pd.DataFrame(
        [(p.name, p.phase, p.mixture) for p in plan.packs], columns=["pack", "phase", "mixture"]
    )
    return packs.merge(slices, on="pack", how="inner", sort=False)


def source_frame(plan: Plan) -> pd.DataFrame:
    """Every source: available, taken, epochs read, held out."""
    return tables(plan).sources.to_pandas()
