"""The packs whose training has started, and what a new plan keeps of them (``planner.Kept``): every pack up
to the last started one, as its spec holds it.

A pack has started when its train folder holds a segment's record or a run's attempt (``TrainLayout.started``;
a checkpoint folder is no evidence: it may hold another run's checkpoints). The plan looks when it runs:
nothing of training is an input of the plan in the DAG, so training's records never rerun it. ``check``
refuses a plan that would change a kept pack's spec (beyond the cursors of sources it does not read) or its
trainer keys.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from workflow_scripts.core.fsio import read_json
from workflow_scripts.core.train_layout import TrainLayout
from workflow_scripts.datapacks import pack_index, specs
from workflow_scripts.datapacks.plan import Plan
from workflow_scripts.datapacks.planner import Kept

CURSORS = ("start", "state_after")  # a spec's cursors of every source, read by the pack or not


def kept_packs(specs_dir: str, train_dir: str) -> list[Kept]:
    """Every pack of the plan on disk (its index beside the specs) up to the last started one, in order, with
    its spec's rows; none before a plan or training."""
    index = Path(specs_dir, pack_index.NAME)
    names = read_json(index)["packs"] if index.is_file() else []
    layout = TrainLayout(train_dir)
    markers = [layout.started(name) for name in names]
    last = max((i for i, m in enumerate(markers) if m), default=-1)
    kept = []
    for name, why in zip(names[: last + 1], markers, strict=False):
        spec = read_json(Path(specs_dir, f"{name}.json"))
        kept.append(
            Kept(name, spec["budget"], spec["slices"], why or f"{names[last]} after it has: {markers[last]}")
        )
    return kept


def check(
    plan: Plan,
    kept: Sequence[Kept],
    signature: list[dict[str, Any]],
    specs_dir: str,
    train_dir: str,
    start_offset: int,
) -> None:
    """Refuse (``Kept.refusal``) a plan that changes a kept pack's spec on disk, beyond the cursors of
    sources it does not read (added or removed), or its iterations, offset, sequence length or batch size
    as its trainer config has them (its keys file's, when it has one; ``start_offset``: the run's first
    step)."""
    identities = {e["prefix"]: e.get("identity") for e in signature}
    layout = TrainLayout(train_dir)
    for index, pack in enumerate(kept):
        new = specs.pack_spec(plan, index, identities)
        old = read_json(Path(specs_dir, f"{pack.name}.json"))
        changed = [key for key in new if key not in CURSORS and new[key] != old.get(key)]
        changed += [
            key for key in CURSORS if any(new[key].get(s) != c for s, c in old[key].items() if s in new[key])
        ]
        if changed:
            raise pack.refusal(f"its spec's {', '.join(changed)} would change")
        if not os.path.isfile(layout.keys(pack.name)):
            continue
        have = read_json(layout.keys(pack.name))["set"]
        summary = plan.packs[index]
        want = {
            "train_iters": summary.train_iters,
            "iteration_offset": start_offset + summary.iteration_offset,
            "seq_length": plan.seq_length,
            "train_batch_size": plan.global_batch_size,
        }  # its data: the spec (its absolute path is the machine's)
        if "pack_impl" in have:  # SFT: its train_iters count bins (train/sft.py), not the plan's
            del want["train_iters"]
        keys = [k for k, v in want.items() if have.get(k, {}).get("value") != v]
        if keys:
            listed = ", ".join(f"{k} {have.get(k, {}).get('value')} -> {want[k]}" for k in keys)
            raise pack.refusal(f"its trainer config's {listed}")
