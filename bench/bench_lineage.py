"""Benchmark lineage: the ledger's size and cost, a ledger lookup and ``--steps``, measured here and
extrapolated to seed 000's scale.

    .venv/bin/python bench/bench_lineage.py [--documents 2000000] [--quarantine 0.01] [--file-lines 100000]
        [--pack-documents 1000000] [--tokens-per-document 1000] [--repeats 3]

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
4. Seed 000 (1.2 T tokens; packs of at most 165,150,720,000 tokens, ``--max_tokens_per_pack`` of its
   slicer): its documents at ``--tokens-per-document`` and its ledgers at ``--shard-tokens`` (the default
   ``ingest.shard_size``, 1 GB, at about 4 bytes a token; both assumptions, printed as such), the ledgers'
   bytes, a lookup that reads every source's ledger (the measured cost per document scaled, plus the cost
   of a small ledger for each), tokenize's added CPU, and ``StepMap`` on its largest pack (scaled by its
   samples and documents).

Results are printed and written to bench/results/lineage.json.
"""

from __future__ import annotations

import argparse
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

from workflow_scripts.core.indexed_dataset import write_index
from workflow_scripts.datapacks.iterations import train_iters
from workflow_scripts.lineage.steps import StepMap
from workflow_scripts.tokens.ledger import Ledger, LedgerBuilder, utf8_hashes
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
    ledger: dict[str, Any], steps: dict[str, Any], tokens_per_document: int, shard_tokens: int
) -> dict[str, Any]:
    """The measured figures scaled to seed 000 (linear in documents; ``--steps`` in the pack's samples)."""
    documents = SEED000_TOKENS / tokens_per_document
    scale = documents / ledger["documents"]
    ledgers = SEED000_TOKENS / shard_tokens
    opening = ledgers * ledger["one_ledger_of_1000_documents_s"]
    pack_scale = SEED000_PACK_TOKENS / steps["pack_tokens"]
    return {
        "assumed_tokens_per_document": tokens_per_document,
        "assumed_tokens_per_shard": shard_tokens,
        "documents": int(documents),
        "ledgers": int(ledgers),
        "ledger_bytes_all_sources": int(documents * ledger["bytes_per_document"]),
        "run_bytes_all_sources": int(ledger["run_bytes"] * scale),
        "lookup_by_raw_line_all_sources_s": round(ledger["read_and_at_line_s"] * scale + opening, 1),
        "lookup_by_hash_all_sources_s": round(ledger["read_and_with_hash_s"] * scale + opening, 1),
        "tokenize_added_cpu_s": round(
            documents * (ledger["add_us_per_document"] + ledger["hash_us_per_3000_byte_document"]) / 1e6, 1
        ),
        "largest_pack_stepmap_build_s": round(steps["stepmap_build_s"] * pack_scale, 1),
        "largest_pack_scale": round(pack_scale, 1),
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
    args = parser.parse_args()
    WORK.mkdir(parents=True, exist_ok=True)
    model = str(harness.WORK / "tokenize_fast" / "bpe_32000.model")  # named only: StepMap loads no tokenizer
    rng = np.random.default_rng(0)
    ledger = measure_ledger(args, rng)
    steps = measure_steps(args, rng, model)
    scaled = seed000(ledger, steps, args.tokens_per_document, args.shard_tokens)
    res = {"args": vars(args), "cpus": os.cpu_count(), "ledger": ledger, "steps": steps, "seed000": scaled}
    for part in ("ledger", "steps", "seed000"):
        print(
            f"{part}: "
            + ", ".join(f"{k} {v:,}" if isinstance(v, int) else f"{k} {v}" for k, v in res[part].items())
        )
    harness.write_results("lineage", res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
