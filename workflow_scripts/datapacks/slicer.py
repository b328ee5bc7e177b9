"""Cut one datapack's slices out of the tokenized sources, continuing from the previous pack's cursor.

A pack is cut from its *spec* (``pack_spec``): its entry of the plan, the cursors it starts from, and the
content identity of every source it reads. The plan writes one spec file per pack and rewrites it only
when it changes, so a pack is cut again exactly when what it would hold can have changed.

Slices are byte-range copies of the source ``.bin`` plus index arithmetic (no re-tokenization), named as in
seed 000: ``{source}_slice{k}_{first_doc}_{tokens}``. With ``datapacks.shuffle`` a source is read in its
seeded order (``shuffle_permutation``: the order the plan counted its ranges in), so a slice gathers its
documents from the source instead; no shuffled copy of a source is written. The pack's ``state.json``
holds the cursor of every source after the pack; the next pack starts from it, so the chain of packs is
explicit in the DAG.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

import numpy as np

from workflow_scripts.core.cli import UserError
from workflow_scripts.core.dataset_merge import write_documents, write_slice
from workflow_scripts.core.dataset_verify import verify
from workflow_scripts.core.fsio import atomic_path, read_json, sync_filesystem, write_json
from workflow_scripts.core.indexed_dataset import check_complete
from workflow_scripts.core.progress import Progress
from workflow_scripts.datapacks.specs import pack_spec, pack_start, reading_order

# A tokenized source's batch tokenizes again the shards whose files changed; an imported one is copied again.
SOURCE_FIX = (
    "rerun with --forcerun tokenize (an imported source: delete it and rerun): Snakemake makes it again"
)


class StateMismatch(UserError, RuntimeError):
    """The previous pack's cursor is not where the plan expects this pack to start."""


__all__ = ["StateMismatch", "pack_spec", "pack_start", "reading_order", "slice_main", "slice_pack"]


def slice_pack(
    spec: dict[str, Any], out_dir: str, state_in: str | None, progress: Progress | None = None
) -> dict[str, Any]:
    """Write the pack's slices (a shuffled pack's gathered in each source's seeded order); return its stats
    (with the cursor after it under ``state``)."""
    pack, pack_name = spec, spec["name"]
    expected = spec["start"]
    if state_in is not None:
        state = read_json(state_in)["cursors"]
        if state != expected:
            raise StateMismatch(
                f"{state_in}: the cursor after the previous pack differs from the plan; rerun the earlier "
                "packs (snakemake reruns them when their plan entry changed)"
            )
    verified: set[str] = set()
    slices = []
    for s in pack["slices"]:
        src, ranges = s["prefix"], [(a, b) for _, a, b in s["ranges"]]
        if src not in verified:
            check_complete(src, SOURCE_FIX)  # a missing or truncated source named, before the full check
            verify(src)
            verified.add(src)
        out = os.path.join(out_dir, s["name"])
        order = reading_order(spec, src, s["source"])  # one source's at a time (a slice a source, a pack)
        if order is None:  # not fsync'd one by one: their file system is flushed once below
            counts = write_slice(src, ranges, out, durable=False)
        else:
            docs = np.concatenate([order[a:b] for a, b in ranges])
            counts = write_documents(src, docs, out, durable=False)
        if counts["tokens"] != s["tokens"] or counts["documents"] != s["documents"]:
            raise RuntimeError(f"{out}: wrote {counts} but the plan says {s['tokens']} tokens")
        if progress is not None:
            progress.advance(os.path.getsize(out + ".bin"), counts["documents"])
        slices.append(
            {
                "prefix": out,
                "source": s["source"],
                **counts,
                "epochs_after": s["epochs_after"],
                "upsampled": s["upsampled"],
            }
        )
    sync_filesystem(out_dir)  # before the list, state and stats say the slices are there
    taken = sum(s["tokens"] for s in slices)
    return {
        "pack": pack_name,
        "budget": pack["budget"],
        "tokens": taken,
        "documents": sum(s["documents"] for s in slices),
        "over_budget": taken - pack["budget"],
        "slices": slices,
        "state": pack["state_after"],
    }


def slice_main(argv: list[str] | None = None) -> None:
    """``snakepack slice``: cut one pack's slices."""
    p_slice = argparse.ArgumentParser(description="Cut one pack's slices from its spec and the cursor state.")
    p_slice.add_argument("--spec", required=True, help="the pack's spec file, written by `snakepack plan`")
    p_slice.add_argument("--state-in", help="state.json of the previous pack (none for the first pack)")
    p_slice.add_argument("--out-dir", required=True)
    p_slice.add_argument("--state-out", required=True)
    p_slice.add_argument("--stats", required=True)
    p_slice.add_argument("--list", required=True, help="write the slice prefixes here, in merge order")
    args = p_slice.parse_args(argv)
    Path(args.out_dir).mkdir(parents=True, exist_ok=True)
    spec = read_json(args.spec)
    with Progress(f"slice {spec['name']}") as progress:
        stats = slice_pack(spec, args.out_dir, args.state_in, progress)
        run = progress.summary(stats["documents"], stats["documents"], 0)
    write_json(args.stats, {**{k: v for k, v in stats.items() if k != "state"}, "run": run})
    with atomic_path(args.list) as tmp:
        tmp.write_text("".join(s["prefix"] + "\n" for s in stats["slices"]))
    write_json(args.state_out, {"pack": stats["pack"], "cursors": stats["state"]})
    print(
        f"{stats['pack']}: {len(stats['slices'])} slices, {stats['tokens']} tokens (budget {stats['budget']})"
    )
