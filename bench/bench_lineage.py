"""Benchmark lineage: the ledger's size and cost, a ledger lookup and ``--steps``, measured here and
extrapolated to seed 000's scale.

    .venv/bin/python bench/bench_lineage.py [--documents 2000000] [--quarantine 0.01] [--file-lines 100000]
        [--pack-documents 1000000] [--tokens-per-document 1000] [--repeats 3] [--index-sources 20]
        [--tiny-sources 2000] [--bucket-entries 262144]

Steps (work dir bench/_work/lineage, git-ignored):

1. Ledger: ``LedgerBuilder.add`` of ``--documents`` documents in batches of 4,000 (as tokenize adds a 4 MB
   batch), raw files of ``--file-lines`` lines, a ``--quarantine`` share of the records quarantined (each a
   gap, so a new run); its ``.ledger.npz`` bytes per document; tokenize's added work per document
   (``utf8_hashes`` of 3,000-byte texts and ``add``).
2. Lookups on that ledger, each from ``Ledger.read`` on (files in the page cache): ``at_line`` (``--doc
   FILE:LINE``: the runs only) and ``with_hash`` (``--hash``/``--text``: the hashes too), best of
   ``--repeats``.
3. ``--steps``: a pack of ``--pack-documents`` documents of ``--tokens-per-document`` tokens (its ``.idx``
   and a sparse ``.bin``: nothing reads the tokens) under a GPT-NeoX config of seed 000's
   ``seq_length`` 8192 and batch 576, every token read once: ``StepMap`` built (the index mappings, in
   memory), one step's sequences, one sequence's steps.
4. The hash index (``lineage/hash_index.py``): built over the ledger's documents split into
   ``--index-sources`` ledgers (buckets of ``--bucket-entries``: several files here), and over
   ``--tiny-sources`` ledgers of 10 documents (what a source costs apart from its documents); its bytes per
   document and bucket files; the index's own part of a lookup (``sources.json`` and one bucket's search)
   and ``find`` of a hash, each from a cold-ish start (the index's files and the ledgers dropped from the
   page cache: ``posix_fadvise`` DONTNEED) and ``find`` warm, against the scan ``find`` does without an
   index, cold and warm, over the same ledgers in the same run (the ratios); ``find`` over the tiny sources
   (its check of each source's ledger: a cost per source).
5. Seed 000 (1.2 T tokens; packs of at most 165,150,720,000 tokens, ``--max_tokens_per_pack`` of its
   slicer): its documents at ``--tokens-per-document`` and its ledgers at ``--shard-tokens`` (the default
   ``ingest.shard_size``, 1 GB, at about 4 bytes a token; both assumptions, printed as such), the ledgers'
   bytes, a lookup that reads every source's ledger (the measured cost per document scaled, plus the cost
   of a small ledger for each), tokenize's added CPU, ``StepMap`` on its largest pack (scaled by its
   samples and documents), and the hash index: its bytes and buckets (``bits_for`` at the default 2**23
   entries a bucket), its build (per document and per source) and a lookup through it (one cold bucket
   search, the check of each source, one ledger's hashes read), beside the scan's.

Results are printed and written to bench/results/lineage.json.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's workflow_scripts, first

import harness

from workflow_scripts.core import naming
from workflow_scripts.core.indexed_dataset import write_index
from workflow_scripts.datapacks.iterations import train_iters
from workflow_scripts.lineage import hash_index
from workflow_scripts.lineage.steps import StepMap
from workflow_scripts.tokens.ledger import Ledger, LedgerBuilder, save, utf8_hashes
from workflow_scripts.train.reference.config import load_config

WORK = harness.WORK / "lineage"
SEED000_TOKENS = 1.2e12
SEED000_PACK_TOKENS = 165_150_720_000
SEQ, BATCH = 8192, 576  # seed 000's seq_length and train_batch_size
BATCH_DOCS = 4000


def best(fn: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    """The best wall time of ``repeats`` calls, and the last result."""
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return min(times), result


def raw_positions(
    n: int, quarantine: float, file_lines: int, rng: np.random.Generator
) -> tuple[list[str], np.ndarray]:
    """Raw files and lines of ``n`` documents: records on consecutive lines, a ``quarantine`` share of them
    skipped."""
    records = int(n / (1 - quarantine) * 1.1) + 100
    kept = np.flatnonzero(rng.random(records) >= quarantine)[:n]
    files = [f"vendor_{k:05d}.jsonl.gz" for k in range(int(kept[-1]) // file_lines + 1)]
    return [files[k] for k in (kept // file_lines).tolist()], kept % file_lines + 1


def measure_ledger(args: argparse.Namespace, rng: np.random.Generator) -> dict[str, Any]:
    sources, lines = raw_positions(args.documents, args.quarantine, args.file_lines, rng)
    hashes = rng.integers(0, 1 << 63, args.documents, dtype=np.uint64)
    prefix = str(WORK / "ledger")

    def build() -> LedgerBuilder:
        builder = LedgerBuilder()
        for a in range(0, args.documents, BATCH_DOCS):
            b = a + BATCH_DOCS
            builder.add(sources[a:b], lines[a:b].tolist(), hashes[a:b])
        return builder

    add_s, builder = best(build, args.repeats)
    builder.write(prefix)
    size = os.path.getsize(prefix + ".ledger.npz")
    texts = rng.integers(32, 127, BATCH_DOCS * 3000, dtype=np.uint8).tobytes()
    hash_s, _ = best(lambda: utf8_hashes(texts, [3000] * BATCH_DOCS), args.repeats)
    read_s, ledger = best(lambda: Ledger.read(prefix), args.repeats)  # its runs
    doc = args.documents // 2
    where = ledger.position(doc)
    file, line = str(where.file), int(where.line or 0)
    line_s, found = best(lambda: Ledger.read(prefix).at_line(file, line), args.repeats)
    assert found == [doc], found
    hash_s, found = best(lambda: Ledger.read(prefix).with_hash(int(hashes[doc])), args.repeats)
    assert doc in found
    small = LedgerBuilder()
    small.add(sources[:1000], lines[:1000].tolist(), hashes[:1000])
    small.write(prefix + "_small")
    open_s, _ = best(lambda: Ledger.read(prefix + "_small").with_hash(0), args.repeats)
    return {
        "documents": args.documents,
        "runs": len(builder.run_docs),
        "bytes": size,
        "bytes_per_document": round(size / args.documents, 3),
        "add_us_per_document": round(add_s / args.documents * 1e6, 4),
        "hash_us_per_3000_byte_document": round(hash_s / BATCH_DOCS * 1e6, 4),
        "run_bytes": int(len(builder.run_docs) * 20),  # what a lookup by raw line reads (int32 + 2 int64)
        "read_runs_s": round(read_s, 5),
        "read_and_at_line_s": round(line_s, 5),
        "read_and_with_hash_s": round(hash_s, 5),
        "one_ledger_of_1000_documents_s": round(open_s, 5),  # what a ledger costs apart from its size
    }


def ledgers(
    folder: Path, sizes: list[int], rng: np.random.Generator
) -> tuple[list[dict[str, Any]], np.ndarray]:
    """Ledgers of ``sizes`` documents (random hashes, a share repeated across sources; raw positions
    unknown) in ``folder``: their signature entries and every hash."""
    folder.mkdir(parents=True, exist_ok=True)
    every = rng.integers(0, 1 << 64, sum(sizes), dtype=np.uint64)
    every[1::50] = every[0::50][: len(every[1::50])]  # duplicates (across sources at the boundaries)
    signature, at = [], 0
    for k, n in enumerate(sizes):
        prefix = str(folder / f"xx_bench_src_split_{k:05d}_text_document")
        save(prefix, [], [-1] if n else [], [0] if n else [], [n] if n else [], every[at : at + n])
        signature.append({"name": os.path.basename(prefix), "prefix": prefix, "documents": n})
        at += n
    return signature, every


def drop_cache(*paths: Path | str) -> None:
    """Ask the kernel to drop the files' pages from the page cache (they are clean: written and synced)."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def timed_find(
    signature: list[dict[str, Any]], value: int, folder: Path
) -> tuple[float, dict[str, list[int]]]:
    """``hash_index.find`` of ``value`` over ``signature``'s sources (an index in ``folder``, or none), each
    ledger read once as lineage's cache reads it; its note on standard error dropped."""
    prefixes = {naming.source_name(s["name"]): s["prefix"] for s in signature}
    start = time.perf_counter()
    with contextlib.redirect_stderr(io.StringIO()):
        found = hash_index.find(value, prefixes, functools.cache(Ledger.read), folder)
    return time.perf_counter() - start, found


def measure_index(args: argparse.Namespace, rng: np.random.Generator) -> dict[str, Any]:
    n, k = args.documents, args.index_sources
    signature, every = ledgers(WORK / "index_ledgers", [n // k] * k, rng)
    tiny, _ = ledgers(WORK / "tiny_ledgers", [10] * args.tiny_sources, rng)
    folder, tiny_folder, none = WORK / "index", WORK / "tiny_index", WORK / "no_index"
    build_s, meta = best(lambda: hash_index.build(signature, folder, args.bucket_entries), args.repeats)
    tiny_s, _ = best(lambda: hash_index.build(tiny, tiny_folder, args.bucket_entries), args.repeats)
    sizes = [
        os.path.getsize(folder / hash_index.HashIndex.bucket_name(b)) for b in range(len(meta["counts"]))
    ]
    total = sum(os.path.getsize(f) for f in folder.iterdir())
    value = int(every[len(every) // 2 + 1])
    files = [*folder.iterdir(), *(s["ledger"] for s in meta["sources"])]
    cold = []
    for _ in range(args.repeats):
        drop_cache(*files)
        seconds, found = timed_find(signature, value, folder)
        cold.append(seconds)
    warm_s, warm = best(lambda: timed_find(signature, value, folder), args.repeats)
    bucket = [folder / hash_index.HashIndex.bucket_name(b) for b in range(len(sizes))]
    lookup = []  # the index's own part: sources.json read, one bucket searched
    for _ in range(args.repeats):
        drop_cache(folder / hash_index.SOURCES, *bucket)
        start = time.perf_counter()
        index = hash_index.HashIndex.open(folder)
        assert index is not None and len(index.lookup(value)) == 2
        lookup.append(time.perf_counter() - start)
    scan_cold = []
    for _ in range(args.repeats):
        drop_cache(*files)
        scan_cold.append(timed_find(signature, value, none)[0])
    scan_s, scanned = best(lambda: timed_find(signature, value, none), args.repeats)
    assert found == warm[1] == scanned[1] and sum(map(len, found.values())) == 2, found
    tiny_find_s, _ = best(lambda: timed_find(tiny, 0, tiny_folder), args.repeats)
    return {
        "documents": len(every),
        "sources": k,
        "buckets": len(sizes),
        "bucket_bytes_min": min(sizes),
        "bucket_bytes_max": max(sizes),
        "bytes": total,
        "bytes_per_document": round(total / len(every), 3),
        "build_s": round(build_s, 3),
        "build_us_per_document": round(build_s / len(every) * 1e6, 4),
        "tiny_sources": args.tiny_sources,
        "tiny_build_s": round(tiny_s, 3),
        "build_ms_per_source": round(tiny_s / args.tiny_sources * 1e3, 4),
        "open_and_lookup_cold_s": round(min(lookup), 5),
        "find_cold_s": round(min(cold), 5),
        "find_warm_s": round(warm_s, 5),
        "scan_cold_s": round(min(scan_cold), 5),
        "scan_s": round(scan_s, 5),
        "cold_scan_over_index": round(min(scan_cold) / min(cold), 1),
        "warm_scan_over_index": round(scan_s / warm_s, 1),
        "tiny_find_s": round(tiny_find_s, 4),
        "find_ms_per_source": round(tiny_find_s / args.tiny_sources * 1e3, 5),
    }


def measure_steps(args: argparse.Namespace, rng: np.random.Generator, model: str) -> dict[str, Any]:
    docs = args.pack_documents
    lengths = rng.integers(args.tokens_per_document // 2, args.tokens_per_document * 3 // 2 + 1, docs)
    prefix = WORK / "pack"
    write_index(f"{prefix}.idx", np.uint16, [lengths.astype(np.int32)], [np.arange(docs + 1, dtype=np.int64)])
    with open(f"{prefix}.bin", "wb") as f:
        f.truncate(int(lengths.sum()) * 2)  # sparse: nothing reads the tokens
    iters = train_iters(int(lengths.sum()), SEQ, BATCH)  # one epoch, as the plan sizes packs
    config = WORK / "pack.yml"
    config.write_text(yaml.safe_dump(neox_config(str(prefix), iters, model), sort_keys=False))
    cfg = load_config([str(config)])
    build_s, steps = best(lambda: StepMap(cfg), args.repeats)
    middle = iters // 2
    step_s, read = best(lambda: steps.sequences(middle, middle), args.repeats)
    seq = read[0].sequence
    seq_s, found = best(lambda: steps.steps(0, seq), args.repeats)
    assert middle in found
    return {
        "pack_documents": docs,
        "pack_tokens": int(lengths.sum()),
        "train_iters": iters,
        "samples": iters * BATCH,
        "stepmap_build_s": round(build_s, 3),
        "one_step_sequences_s": round(step_s, 4),
        "sequences_of_one_step": len(read),
        "one_sequence_steps_s": round(seq_s, 4),
    }


def neox_config(prefix: str, iters: int, model: str) -> dict[str, Any]:
    """A GPT-NeoX config of seed 000's sequence and batch over one pack, with a tiny model: the step map
    reads only its data keys."""
    return {
        "num_layers": 2,
        "hidden_size": 32,
        "num_attention_heads": 4,
        "seq_length": SEQ,
        "max_position_embeddings": SEQ,
        "train_batch_size": BATCH,
        "train_micro_batch_size_per_gpu": 4,
        "gradient_accumulation_steps": 144,
        "optimizer": {"type": "Adam", "params": {"lr": 0.0003}},
        "train_iters": iters,
        "iteration_offset": 0,
        "seed": 1234,
        "vocab_file": model,
        "tokenizer_type": "SPMTokenizer",
        "train_data_paths": [prefix],
        "train_data_weights": [1.0],
        "test_data_paths": [],
    }


def seed000(
    ledger: dict[str, Any],
    steps: dict[str, Any],
    index: dict[str, Any],
    tokens_per_document: int,
    shard_tokens: int,
) -> dict[str, Any]:
    """The measured figures scaled to seed 000 (linear in documents; ``--steps`` in the pack's samples)."""
    documents = SEED000_TOKENS / tokens_per_document
    scale = documents / ledger["documents"]
    ledgers = SEED000_TOKENS / shard_tokens
    opening = ledgers * ledger["one_ledger_of_1000_documents_s"]
    pack_scale = SEED000_PACK_TOKENS / steps["pack_tokens"]
    bits = hash_index.bits_for(int(documents), 1 << 23)
    by_hash = ledger["read_and_with_hash_s"] * scale + opening
    # one source's ledger checked (its hashes read: a shard's share of the measured ledger), each source's
    # ledger checked for changes, and one bucket's search from cold
    index_lookup = (
        ledger["read_and_with_hash_s"] * scale / ledgers
        + ledgers * index["find_ms_per_source"] / 1e3
        + index["find_cold_s"]
    )
    return {
        "assumed_tokens_per_document": tokens_per_document,
        "assumed_tokens_per_shard": shard_tokens,
        "documents": int(documents),
        "ledgers": int(ledgers),
        "ledger_bytes_all_sources": int(documents * ledger["bytes_per_document"]),
        "run_bytes_all_sources": int(ledger["run_bytes"] * scale),
        "lookup_by_raw_line_all_sources_s": round(ledger["read_and_at_line_s"] * scale + opening, 1),
        "lookup_by_hash_all_sources_s": round(by_hash, 1),
        "tokenize_added_cpu_s": round(
            documents * (ledger["add_us_per_document"] + ledger["hash_us_per_3000_byte_document"]) / 1e6, 1
        ),
        "largest_pack_stepmap_build_s": round(steps["stepmap_build_s"] * pack_scale, 1),
        "largest_pack_scale": round(pack_scale, 1),
        "index_bytes": int(documents * 16),
        "index_buckets": 1 << bits,
        "index_bucket_bytes": int(documents * 16 / (1 << bits)),
        "index_build_s": round(
            documents * index["build_us_per_document"] / 1e6 + ledgers * index["build_ms_per_source"] / 1e3, 1
        ),
        "lookup_by_hash_with_index_s": round(index_lookup, 2),
        "lookup_by_hash_scan_over_index": round(by_hash / index_lookup, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--documents", type=int, default=2_000_000, help="documents of the measured ledger")
    parser.add_argument("--quarantine", type=float, default=0.01, help="share of records quarantined")
    parser.add_argument("--file-lines", type=int, default=100_000, help="lines of each raw file")
    parser.add_argument("--pack-documents", type=int, default=1_000_000, help="documents of the pack")
    parser.add_argument("--tokens-per-document", type=int, default=1000, help="mean tokens of a document")
    parser.add_argument(
        "--shard-tokens", type=int, default=250_000_000, help="tokens of a shard (one ledger): 1 GB of text"
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--index-sources", type=int, default=20, help="ledgers the index is built over")
    parser.add_argument("--tiny-sources", type=int, default=2000, help="ledgers of 10 documents, indexed")
    parser.add_argument("--bucket-entries", type=int, default=1 << 18, help="the index's bucket size here")
    args = parser.parse_args()
    WORK.mkdir(parents=True, exist_ok=True)
    model = str(harness.WORK / "tokenize_fast" / "bpe_32000.model")  # named only: StepMap loads no tokenizer
    rng = np.random.default_rng(0)
    ledger = measure_ledger(args, rng)
    steps = measure_steps(args, rng, model)
    index = measure_index(args, rng)
    scaled = seed000(ledger, steps, index, args.tokens_per_document, args.shard_tokens)
    res = {"args": vars(args), "cpus": os.cpu_count(), "ledger": ledger, "steps": steps, "index": index}
    res["seed000"] = scaled
    for part in ("ledger", "steps", "index", "seed000"):
        print(
            f"{part}: "
            + ", ".join(f"{k} {v:,}" if isinstance(v, int) else f"{k} {v}" for k, v in res[part].items())
        )
    harness.write_results("lineage", res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
