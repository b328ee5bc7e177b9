"""The packs whose training has started, and what a new plan keeps of them (``planner.Kept``): every pack up
to the last started one, as its spec holds it.

A pack has started when its train folder holds a segment's record or a run's attempt
(``train/{pack}/segments/``, ``core/train_layout.py``), or when the run's checkpoint folder holds a
checkpoint past the pack's first step (its keys file's ``iteration_offset``; links, a fine-tune's start, are
left aside). The plan looks when it runs: nothing of training is an input of the plan in the DAG, so
training's records never rerun it. ``check`` refuses a plan that would change a kept pack's spec (beyond
the cursors of sources it does not read) or its trainer keys.
"""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from workflow_scripts.core.fsio import read_json
from workflow_scripts.core.train_layout import ATTEMPTS, IMPORT_FOLDERS, SEGMENTS, TrainLayout
from workflow_scripts.datapacks import pack_index, specs
from workflow_scripts.datapacks.plan import Plan
from workflow_scripts.datapacks.planner import Kept

CURSORS = ("start", "state_after")  # a spec's cursors of every source, read by the pack or not


def latest_step(checkpoints: str, trainer: str) -> int | None:
    """The last global step with a checkpoint folder of the run's own (not a link) in ``checkpoints``: named
    as the trainer names its step-0 folder (``global_step0``, ``iter_0000000``), another step's digits."""
    name = re.compile(re.escape(IMPORT_FOLDERS[trainer].rstrip("0")) + r"(\d+)")
    found = os.scandir(checkpoints) if os.path.isdir(checkpoints) else []
    own = [int(m[1]) for e in found if (m := name.fullmatch(e.name)) and not e.is_symlink()]
    return max(own, default=None)


def marker(layout: TrainLayout, pack: str, latest: int | None) -> str | None:
    """What shows that ``pack`` has started training (a record's path, or the checkpoint past its first
    step), else None; ``latest``: the run's last checkpoint step."""
    folder = os.path.join(glob.escape(layout.root), pack, SEGMENTS)
    found = sorted(
        glob.glob(os.path.join(folder, "*.json")) + glob.glob(os.path.join(folder, ATTEMPTS, "*.json"))
    )
    if found:
        return found[0]
    keys = layout.keys(pack)
    if latest is not None and os.path.isfile(keys):
        offset = read_json(keys)["set"]["iteration_offset"]["value"]
        if latest > offset:
            return f"checkpoint step {latest} is past its first step {offset}"
    return None


def plan_input(
    plan_json: str, layout: TrainLayout, pack: str, checkpoints: str, trainer: str, keep: Callable[[str], Any]
) -> Any:
    """The plan as a pack's trainer config reads it: ``plan_json``, through ``keep`` (the rules'
    ``ancient()``) once the pack has started training, so that a new plan, which keeps the pack, leaves its
    config and its segments alone."""
    return keep(plan_json) if marker(layout, pack, latest_step(checkpoints, trainer)) else plan_json


def kept_packs(specs_dir: str, train_dir: str, checkpoints: str, trainer: str) -> list[Kept]:
    """Every pack of the plan on disk (its index beside the specs) up to the last started one, in order, with
    its spec's rows; none before a plan or training."""
    index = Path(specs_dir, pack_index.NAME)
    names = read_json(index)["packs"] if index.is_file() else []
    layout, latest = TrainLayout(train_dir), latest_step(checkpoints, trainer)
    markers = [marker(layout, name, latest) for name in names]
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
