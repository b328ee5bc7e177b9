"""Write one datapack from its spec straight out of the tokenized sources: ``merged/{pack}/{pack}.bin/.idx``.

The pack's ``.bin`` is one sequential write: each source's ranges copied in the kernel, or, with
``datapacks.shuffle``, its documents gathered in the source's seeded order (``specs.reading_order``); its
``.idx`` is built from the lengths. Both are written under temporary names, flushed and renamed: no file per
source. The bytes are those of one slice per source (seed 000's ``{source}_slice{k}_{first_doc}_{tokens}``)
merged in the plan's order.

Beside it, ``state.json`` holds every source's cursor after the pack and ``stats.json`` what each source gave
(labelled with its slice name). A pack is written from its spec alone (its start cursors are in it), so the
packs of a plan are written in parallel.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import IO, Any

import numpy as np

from workflow_scripts.core.dataset_merge import Part, append_documents, append_ranges
from workflow_scripts.core.dataset_verify import verify
from workflow_scripts.core.fsio import atomic_path, read_json, start_writeback, write_json
from workflow_scripts.core.indexed_dataset import (
    WRITEBACK_BYTES,
    IndexedDataset,
    IndexedDatasetError,
    PathLike,
    bin_path,
    check_complete,
    idx_path,
    write_index,
)
from workflow_scripts.core.progress import Progress
from workflow_scripts.datapacks.specs import reading_order

# A tokenized source's batch tokenizes again the shards whose files changed; an imported one is copied again.
SOURCE_FIX = (
    "rerun with --forcerun tokenize (an imported source: delete it and rerun): Snakemake makes it again"
)


def _append(spec: dict[str, Any], entry: dict[str, Any], dst: IO[bytes], sequences: int) -> tuple[Part, str]:
    """Append one source's share of the pack to ``dst``; return it and the source's dtype."""
    src = IndexedDataset(entry["prefix"])
    ranges = [(a, b) for _, a, b in entry["ranges"]]
    order = reading_order(spec, entry["prefix"], entry["source"])
    if order is None:
        part = append_ranges(src, ranges, dst, sequences)
    else:
        part = append_documents(src, np.concatenate([order[a:b] for a, b in ranges]), dst, sequences)
    if part.tokens != entry["tokens"] or part.documents != entry["documents"]:
        raise RuntimeError(
            f"{entry['prefix']}: gave {part.tokens} tokens in {part.documents} documents to pack "
            f"{spec['name']}, but the plan says {entry['tokens']} in {entry['documents']}"
        )
    return part, src.dtype.name


def write_pack(
    spec: dict[str, Any], out_prefix: PathLike, progress: Progress | None = None
) -> dict[str, Any]:
    """Write the pack of ``spec`` as the dataset ``out_prefix`` (atomic); return its stats (what each source
    gave, under ``sources``)."""
    if not spec["slices"]:
        raise IndexedDatasetError(f"pack {spec['name']}: the plan gives it no source")
    verified: set[str] = set()
    for entry in spec["slices"]:  # every source checked before the pack's files are opened
        if entry["prefix"] not in verified:
            check_complete(entry["prefix"], SOURCE_FIX)  # a missing or truncated source named, first
            verify(entry["prefix"])
            verified.add(entry["prefix"])
    lengths: list[np.ndarray] = []
    doc_idx = [np.zeros(1, np.int64)]
    sources: list[dict[str, Any]] = []
    dtype = ""
    sequences = written = 0
    with atomic_path(idx_path(out_prefix)) as idx_tmp, atomic_path(bin_path(out_prefix)) as bin_tmp:
        with open(bin_tmp, "wb") as f:
            for entry in spec["slices"]:
                part, its_dtype = _append(spec, entry, f, sequences)
                if dtype and its_dtype != dtype:
                    raise IndexedDatasetError(
                        f"{entry['prefix']}: dtype {its_dtype}, the pack's other sources {dtype}"
                    )
                dtype = its_dtype
                sequences += part.sequences
                lengths.append(part.lengths)
                doc_idx.append(part.doc_idx)
                sources.append(_gave(entry, part))
                if f.tell() - written >= WRITEBACK_BYTES:  # the fsync before the rename has less left to do
                    f.flush()
                    start_writeback(f.fileno(), written, f.tell() - written)
                    written = f.tell()
                if progress is not None:
                    progress.advance(part.tokens * np.dtype(dtype).itemsize, part.documents)
        write_index(idx_tmp, dtype, lengths, doc_idx)
    return _stats(spec, sources, sequences)


def _gave(entry: dict[str, Any], part: Part) -> dict[str, Any]:
    """What one source gave the pack, labelled with its slice name."""
    return {
        "name": entry["name"],
        "source": entry["source"],
        "prefix": entry["prefix"],
        "tokens": part.tokens,
        "documents": part.documents,
        "sequences": part.sequences,
        "epochs_after": entry["epochs_after"],
        "upsampled": entry["upsampled"],
    }


def _stats(spec: dict[str, Any], sources: Sequence[dict[str, Any]], sequences: int) -> dict[str, Any]:
    tokens = sum(s["tokens"] for s in sources)
    return {
        "pack": spec["name"],
        "budget": spec["budget"],
        "tokens": tokens,
        "documents": sum(s["documents"] for s in sources),
        "sequences": sequences,
        "over_budget": tokens - spec["budget"],
        "sources": list(sources),
    }


def main(argv: Sequence[str] | None = None) -> None:
    """``snakepack pack``: write one pack, its cursor state and its stats."""
    parser = argparse.ArgumentParser(
        description="Write one datapack from its spec and the tokenized sources."
    )
    parser.add_argument("--spec", required=True, help="the pack's spec file, written by `snakepack plan`")
    parser.add_argument("--output", required=True, help="the pack's prefix (its .bin and .idx)")
    parser.add_argument("--state-out", required=True, help="every source's cursor after the pack")
    parser.add_argument("--stats", required=True)
    args = parser.parse_args(argv)
    spec = read_json(args.spec)
    planned = sum(s["documents"] for s in spec["slices"])
    with Progress(f"pack {spec['name']}") as progress:
        stats = write_pack(spec, args.output, progress)
        written = IndexedDataset(args.output)
        run = progress.summary(planned, written.num_documents, 0)
    if (written.num_tokens, written.num_documents) != (stats["tokens"], planned):
        raise RuntimeError(
            f"{args.output}: holds {written.num_tokens} tokens in {written.num_documents} documents, but the "
            f"plan gives pack {spec['name']} {stats['tokens']} in {planned}"
        )
    write_json(args.stats, {**stats, "run": run})
    write_json(args.state_out, {"pack": spec["name"], "cursors": spec["state_after"]})
    print(
        f"{spec['name']}: {len(stats['sources'])} sources, {stats['tokens']} tokens (budget {spec['budget']})"
    )
