"""Each pack's spec: everything that decides its bytes, one JSON file per pack beside the pack index.

A spec (``pack_spec``) holds the pack's ``name``, ``budget`` and ``index`` (its place in the plan's packs;
null for a validation pack), its rows of the plan's table as ``slices`` (``plan_table.pack_rows``), every
source's cursor before it (``start``) and after it (``state_after``; both empty for a validation pack, which
is never chained), whether the sources are read ``shuffle``d (and their ``seed``) and the content identity of
every source it reads (``sources``). The plan rewrites a spec only when it changes (``write_specs``), so a
pack is made again exactly when what it would hold can have changed (docs/reruns.md). A pack's job reads its
spec alone (``fsio.read_json``), not the plan.
"""

from __future__ import annotations

from collections.abc import Collection
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np

from workflow_scripts.core.cli import UserError
from workflow_scripts.core.fsio import dumps_json, write_if_changed
from workflow_scripts.core.indexed_dataset import IndexedDataset
from workflow_scripts.datapacks import pack_index, plan_table
from workflow_scripts.datapacks.plan import Plan
from workflow_scripts.datapacks.planner import shuffle_permutation

Cursors = dict[str, dict[str, int]]


def pack_start(plan: Plan, index: int) -> Cursors:
    """The cursors the plan expects before pack ``index``."""
    return next(islice(plan_table.states(plan), index, None))


def pack_spec(
    plan: Plan,
    index: int | None,
    identities: dict[str, Any],
    name: str = "",
    cursors: tuple[Cursors, Cursors] | None = None,
) -> dict[str, Any]:
    """Everything that decides a pack's bytes: its rows of the plan, its cursors before and after it
    (``cursors``, when known, else from the plan), its sources' identities (``identities``: link prefix ->
    content identity, from the data signature). ``index`` is the pack's place in ``plan.packs``; ``None``
    picks the validation pack ``name`` (no cursors: never chained)."""
    if index is not None:
        name = plan.packs[index].name
        start, after = cursors or tuple(islice(plan_table.states(plan), index, index + 2))
    else:
        start, after = {}, {}
    pack = plan.packs[index] if index is not None else next(v for v in plan.validation if v.name == name)
    rows = plan_table.pack_rows(plan, name)
    return {
        "name": name,
        "budget": pack.budget,
        "slices": rows,
        "state_after": after,
        "index": index,
        "start": start,
        "shuffle": plan.shuffle,
        **({"seed": plan.seed} if plan.shuffle else {}),  # the sources' order
        "sources": {s["source"]: identities.get(s["prefix"]) for s in rows},
    }


def reading_order(spec: dict[str, Any], prefix: str, name: str) -> np.ndarray | None:
    """The order in which the pack of ``spec`` reads the documents of source ``name``: the plan's seeded one
    when it shuffles, else None (the source's own)."""
    if not spec["shuffle"]:
        return None
    if "seed" not in spec:
        raise UserError(
            f"pack {spec['name']}: its spec was made by an older plan; rerun the plan (--forcerun plan)"
        )
    return shuffle_permutation(IndexedDataset(prefix).num_documents, spec["seed"], name)


def write_specs(
    plan: Plan, signature: list[dict[str, Any]], specs_dir: str, keep: Collection[str] = ()
) -> None:
    """``{specs_dir}/{pack}.json`` for every pack, and the pack index, each written only when it changed
    (the packs ``keep`` names, started ones, are left as they are); specs of packs that are no longer
    planned are removed. The cursors are walked once over all packs."""
    pack_index.write(plan, specs_dir)
    identities = {e["prefix"]: e.get("identity") for e in signature}
    states = plan_table.states(plan)
    before = next(states)
    for index, (pack, after) in enumerate(zip(plan.packs, states, strict=True)):
        if pack.name not in keep:
            spec = pack_spec(plan, index, identities, cursors=(before, after))
            write_if_changed(Path(specs_dir) / f"{pack.name}.json", dumps_json(spec))
        before = after
    for valid in plan.validation:
        spec = pack_spec(plan, None, identities, valid.name)
        write_if_changed(Path(specs_dir) / f"{valid.name}.json", dumps_json(spec))
    planned = {f"{p.name}.json" for p in [*plan.packs, *plan.validation]}
    for old in Path(specs_dir).glob("*.json"):
        if old.name not in planned:
            old.unlink()
