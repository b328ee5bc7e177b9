"""Cut one datapack's slices out of the tokenized sources, continuing from the previous pack's cursor.

A pack is cut from its *spec* (``pack_spec``): its entry of the plan, the cursors it starts from, and the
content identity of every source it reads. The plan writes one spec file per pack and rewrites it only
when it changes, so a pack is cut again exactly when what it would hold can have changed.

Slices are byte-range copies of the source ``.bin`` plus index arithmetic (no re-tokenization), named as in
seed 000: ``{source}_slice{k}_{first_doc}_{tokens}``. The pack's ``state.json`` holds the cursor of every
source after the pack; the next pack starts from it, so the chain of packs is explicit in the DAG.
"""

from __future__ import annotations

import argparse
import os
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from workflow_scripts.core.cli import UserError
from workflow_scripts.core.dataset_merge import write_slice
from workflow_scripts.core.dataset_verify import verify
from workflow_scripts.core.fsio import atomic_path, read_json, write_json
from workflow_scripts.core.indexed_dataset import IndexedDataset, IndexedDatasetBuilder
from workflow_scripts.core.progress import Progress
from workflow_scripts.datapacks.planner import shuffle_permutation

GATHER_TOKENS = 1 << 24  # tokens gathered per step when writing a shuffled copy


class StateMismatch(UserError, RuntimeError):
    """The previous pack's cursor is not where the plan expects this pack to start."""


def write_shuffled(src_prefix: str, name: str, seed: int, out_prefix: str) -> dict[str, Any]:
    """Write a copy of a source with its documents in the plan's seeded order (done once per source)."""
    src = IndexedDataset(src_prefix)
    order = shuffle_permutation(src.num_documents, seed, name)
    first_seq = src.doc_idx[order]
    if np.any(src.doc_idx[order + 1] - first_seq != 1):
        raise StateMismatch(f"{src_prefix}: shuffling needs one sequence per document")
    starts, lens = src.pointers[first_seq] // src.itemsize, src.lengths[first_seq].astype(np.int64)
    ends = np.cumsum(lens)  # once: the steps below search it instead of summing the rest each time
    with IndexedDatasetBuilder(out_prefix, src.dtype) as builder:
        a = 0
        while a < len(order):
            done = int(ends[a - 1]) if a else 0
            b = a + max(1, int(np.searchsorted(ends[a:], done + GATHER_TOKENS)))
            flat = np.concatenate(
                [src.tokens[s : s + n] for s, n in zip(starts[a:b], lens[a:b], strict=True)]
            )
            builder.add_documents(flat, lens[a:b])
            a = b
    return {
        "source": src_prefix,
        "documents": len(order),
        "seed": seed,
        "crc": zlib.crc32(order.tobytes()),
    }


def pack_start(plan: dict[str, Any], index: int) -> dict[str, dict[str, int]]:
    """The cursors the plan expects before pack ``index``."""
    if index == 0:
        return {name: {"epoch": 0, "doc": 0} for name in plan["final_epochs"]}
    return plan["packs"][index - 1]["state_after"]


def pack_spec(plan: dict[str, Any], index: int | None, identities: dict[str, Any], name: str = "") -> dict:
    """Everything that decides a pack's bytes: its plan entry, its start cursors, its sources' identities
    (``identities``: link prefix -> content identity, from the data signature). ``index`` is the pack's
    place in ``plan["packs"]``; ``None`` picks the validation pack ``name`` (no cursors: never chained)."""
    pack = (
        plan["packs"][index]
        if index is not None
        else next(v for v in plan["validation"] if v["name"] == name)
    )
    keys = ("name", "budget", "slices", "state_after")
    return {
        **{k: pack[k] for k in keys},
        "index": index,
        "start": pack_start(plan, index) if index is not None else {},
        "shuffle": plan["shuffle"],
        "sources": {s["source"]: identities.get(s["prefix"]) for s in pack["slices"]},
    }


def slice_pack(
    spec: dict[str, Any],
    out_dir: str,
    state_in: str | None,
    sources_dir: str | None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Write the pack's slices; return its stats (with the cursor after it under ``state``)."""
    pack, pack_name = spec, spec["name"]
    expected = spec["start"]
    if state_in is not None:
        state = read_json(state_in)["cursors"]
        if state != expected:
            raise StateMismatch(
                f"{state_in}: the cursor after the previous pack differs from the plan; rerun the earlier "
                "packs (snakemake reruns them when their plan entry changed)"
            )
    checked: set[str] = set()
    slices = []
    for s in pack["slices"]:
        src = os.path.join(sources_dir, s["source"]) if sources_dir else s["prefix"]
        if src not in checked:
            verify(src)
            checked.add(src)
        out = os.path.join(out_dir, s["name"])
        counts = write_slice(src, [(a, b) for _, a, b in s["ranges"]], out)
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
    p_slice.add_argument("--sources-dir", help="read sources from here (their shuffled copies)")
    p_slice.add_argument("--out-dir", required=True)
    p_slice.add_argument("--state-out", required=True)
    p_slice.add_argument("--stats", required=True)
    p_slice.add_argument("--list", required=True, help="write the slice prefixes here, in merge order")
    args = p_slice.parse_args(argv)
    Path(args.out_dir).mkdir(parents=True, exist_ok=True)
    spec = read_json(args.spec)
    with Progress(f"slice {spec['name']}") as progress:
        stats = slice_pack(spec, args.out_dir, args.state_in, args.sources_dir, progress)
        run = progress.summary(stats["documents"], stats["documents"], 0)
    write_json(args.stats, {**{k: v for k, v in stats.items() if k != "state"}, "run": run})
    with atomic_path(args.list) as tmp:
        tmp.write_text("".join(s["prefix"] + "\n" for s in stats["slices"]))
    write_json(args.state_out, {"pack": stats["pack"], "cursors": stats["state"]})
    print(
        f"{stats['pack']}: {len(stats['slices'])} slices, {stats['tokens']} tokens (budget {stats['budget']})"
    )


def shuffle_main(argv: list[str] | None = None) -> None:
    """``snakepack shuffle``: a source's documents in the plan's seeded order."""
    parser = argparse.ArgumentParser(description="Write a source's documents in the plan's seeded order.")
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--output", required=True)
    args = parser.parse_args(argv)
    print(write_shuffled(args.prefix, args.name, args.seed, args.output))
