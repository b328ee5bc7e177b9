"""Benchmark: the whole data path, raw jsonl to a merged datapack, against the chain a user runs by hand.

    .venv/bin/python bench/bench_end_to_end.py [--repeats 1] [--shard-mb 50]

Both run on the same raw files, in one run, on this machine's cores (2 workers each):

* **Hand chain**: datatrove's four MinHash stages (bench_dedup.py's pipeline, one task per raw file: word
  5-grams, characters for zh/ja, 64-bit hashes, our LSH shape), the kept documents concatenated, then
  Megatron-LM's ``tools/preprocess_data.py --workers 2`` with the same SentencePiece model (the pinned
  source of ``../shared/trainers``, see tests/trainers.py).
* **snakepack**: ``snakemake --cores 2`` from an empty results tree in a copy of the workflow: ingest, dedup,
  tokenize, count, mixture, plan, slicing, merging, report (the default target). One phase takes
  nearly all tokens (98% of what Megatron-LM wrote, in whole iterations), so the merged pack holds about
  the same tokens as the hand chain's output.

Data: bench_tokenize_fast.py's corpus (Debian documentation in many languages, >= 200 MB of jsonl, built once
with apt-get) split into raw files of at most 32 MB per language ({lang}_docs_debian_part-NN.jsonl); its 32k
BPE model. Where our time goes comes from the rules' benchmark records (results/benchmarks/). Goal: >= 3x.
Figures also go to bench/results/end_to_end.json.
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import shutil
import sys
from collections import defaultdict
from contextlib import ExitStack
from pathlib import Path
from typing import BinaryIO

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's packages, first

import bench_dedup
import bench_tokenize_fast
import harness
import orjson
import yaml

from tests.trainers import trainers
from workflow_scripts.core.indexed_dataset import IndexedDataset
from workflow_scripts.dedup.settings import DedupSettings

WORK = harness.WORK / "end_to_end"
GOAL = 3.0
RAW_FILE_MB = 32
LANG_DIRS = re.compile(r"^[a-z]{2}(?:[_-][A-Za-z]{2})?$")  # man/de/, fortunes/zh/, debian-reference/zh-cn/
# the languages of the packages' translations (other two-letter folders are sections or architectures)
LANGS = {*(lang[:2] for lang in bench_tokenize_fast.LANGS.split()), "ar", "ca", "id", "ko", "nb", "tr"}
SEQ_LENGTH, BATCH = 2048, 8


def log(msg: str) -> None:
    bench_tokenize_fast.log(msg)


def lang_of(doc_id: str) -> str:
    """The language of a corpus document, from its path (a language folder), else en."""
    parts = doc_id.split("#")[0].split("/")[:-1]
    return next((p[:2] for p in parts if LANG_DIRS.match(p) and p[:2] in LANGS), "en")


def raw_files(corpus: Path) -> Path:
    """The corpus as a delivery: per language, raw files of at most RAW_FILE_MB (built once)."""
    raw = WORK / "raw"
    if raw.exists():
        return raw
    tmp = WORK / "raw.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    parts: dict[str, list[int]] = defaultdict(lambda: [0, 0])  # lang -> [file number, bytes in it]
    with open(corpus, "rb") as f, ExitStack() as stack:
        handles: dict[str, BinaryIO] = {}
        for line in f:
            lang = lang_of(orjson.loads(line)["id"])
            part = parts[lang]
            if part[1] + len(line) > RAW_FILE_MB * harness.MB and part[1]:
                handles.pop(lang).close()
                part[0], part[1] = part[0] + 1, 0
            if lang not in handles:
                name = tmp / f"{lang}_docs_debian_part-{part[0]:02d}.jsonl"
                handles[lang] = stack.enter_context(open(name, "wb"))
            handles[lang].write(line)
            part[1] += len(line)
    tmp.rename(raw)
    return raw


def hand_chain(raw: Path, model: Path, workers: int) -> tuple[dict[str, float], Path]:
    """datatrove's MinHash dedup, then Megatron-LM's preprocess_data.py on the kept documents."""
    bands, rows = DedupSettings().lsh_shape()
    dedup = bench_dedup.run_datatrove(raw, workers, bands, rows)
    kept = dedup["out"] / "kept"
    merged = WORK / "hand" / "kept.jsonl"
    merged.parent.mkdir(parents=True, exist_ok=True)
    concat = harness.run_child(["sh", "-c", 'cat "$0"/*.jsonl > "$1"', str(kept), str(merged)])
    meg = trainers()
    prefix = WORK / "hand" / "megatron"
    cmd = [meg.python, "tools/preprocess_data.py", "--input", str(merged), "--output-prefix", str(prefix)]
    cmd += ["--tokenizer-type", "SentencePieceTokenizer", "--tokenizer-model", str(model), "--append-eod"]
    cmd += ["--workers", str(workers), "--json-keys", "text", "--log-interval", "100000000"]
    env = {**os.environ, "PYTHONPATH": str(meg.tree("megatron")), "PYTHONWARNINGS": "ignore"}
    pre = harness.run_child(cmd, cwd=meg.tree("megatron"), env=env)
    walls = {f"datatrove stage {k}": w for k, w in enumerate(dedup["stage_walls"], 1)}
    walls |= {"cat kept": concat.wall, "megatron preprocess_data": pre.wall}
    return walls, Path(f"{prefix}_text_document")


def workflow(raw: Path, model: Path, tokens: int, shard_mb: int, workers: int) -> Path:
    """A fresh copy of the workflow whose config reads the raw files with the given model."""
    root = WORK / "snakepack"
    harness.copy_workflow(root)
    source = {
        "name": "debian",
        "paths": [f"{raw}/*.jsonl"],
        "name_regex": r"^(?P<lang>[a-z]+)_(?P<domain>[a-z]+)_(?P<subdomain>[a-z]+)_part",
    }
    config = {
        "sources": [source],
        "ingest": {"shard_size": shard_mb * harness.MB},
        "tokenizer": {"model": str(model)},
        "tokenize": {"threads": workers},
        "mixtures": {"all": {}},
        "training": {"seq_length": SEQ_LENGTH, "global_batch_size": BATCH},
        "datapacks": {"phases": [{"name": "all", "tokens": tokens, "mixture": "all"}]},
    }
    (root / "e2e.yaml").write_text(yaml.safe_dump(config))
    return root


def rule_seconds(root: Path) -> dict[str, float]:
    """Wall seconds per rule from the rules' benchmark records (summed over their jobs)."""
    per_rule: dict[str, float] = defaultdict(float)
    for tsv in (root / "results" / "benchmarks").rglob("*.tsv"):
        rule = str(tsv.parent.relative_to(root / "results" / "benchmarks")).replace("/", " ")
        with open(tsv) as f:
            for row in csv.DictReader(f, delimiter="\t"):
                per_rule[rule] += float(row["s"])
    return dict(sorted(per_rule.items(), key=lambda kv: -kv[1]))


def documents_and_tokens(prefix: Path) -> tuple[int, int]:
    ds = IndexedDataset(prefix)
    return ds.num_documents, ds.num_tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--shard-mb", type=int, default=50, help="ingest.shard_size in MB")
    args = parser.parse_args()
    corpus = bench_tokenize_fast.make_corpus()
    model = bench_tokenize_fast.train_model(corpus)
    raw = raw_files(corpus)
    raw_mb = sum(p.stat().st_size for p in raw.glob("*.jsonl")) / harness.MB
    log(f"{len(list(raw.glob('*.jsonl')))} raw files, {raw_mb:.1f} MB; warming up the trainers' environment")
    trainers()
    hand_runs: list[float] = []
    ours_runs: list[float] = []
    for r in range(args.repeats):
        log(f"round {r + 1}: hand chain")
        walls, hand_prefix = hand_chain(raw, model, args.workers)
        hand_runs.append(sum(walls.values()))
        docs, tokens = documents_and_tokens(hand_prefix)
        per_iter = SEQ_LENGTH * BATCH
        target = int(tokens * 0.98) // per_iter * per_iter
        log(f"  {hand_runs[-1]:.1f} s: " + ", ".join(f"{k} {v:.1f}" for k, v in walls.items()))
        log(f"round {r + 1}: snakepack (a phase of {target:,} tokens)")
        root = workflow(raw, model, target, args.shard_mb, args.workers)
        cmd = [*harness.SNAKEMAKE, "--configfile", "e2e.yaml", "--cores", str(args.workers), "--quiet"]
        ours = harness.run_child(cmd, cwd=root)
        ours_runs.append(ours.wall)
        log(f"  {ours.wall:.1f} s")
    packs = sorted((root / "results" / "merged").glob("*/*.bin"))
    counts = [documents_and_tokens(p.with_suffix("")) for p in packs]
    ours_docs, ours_tokens = sum(c[0] for c in counts), sum(c[1] for c in counts)
    rules = rule_seconds(root)
    hand, best = min(hand_runs), min(ours_runs)
    ratio = hand / best
    print(f"\nraw: {raw_mb:.1f} MB in {len(list(raw.glob('*.jsonl')))} files, {args.workers} workers")
    print(f"hand chain (datatrove MinHash + Megatron-LM preprocess_data): {hand:.1f} s, ", end="")
    print(f"{docs:,} docs, {tokens:,} tokens")
    print(
        f"snakepack (snakemake --cores {args.workers}, raw to merged pack): {best:.1f} s, "
        f"{ours_docs:,} docs, {ours_tokens:,} tokens in {len(packs)} pack(s)"
    )
    print("snakepack's rules (benchmark records, s): " + ", ".join(f"{k} {v:.1f}" for k, v in rules.items()))
    print(f"ratio: x{ratio:.2f} (goal >= {GOAL}): {'met' if ratio >= GOAL else 'NOT met'}")
    harness.write_results(
        "end_to_end",
        {
            "args": vars(args),
            "raw_mb": round(raw_mb, 1),
            "hand_s": [round(w, 2) for w in hand_runs],
            "hand_steps_s": {k: round(v, 2) for k, v in walls.items()},
            "ours_s": [round(w, 2) for w in ours_runs],
            "ours_rules_s": {k: round(v, 2) for k, v in rules.items()},
            "hand_docs_tokens": [docs, tokens],
            "ours_docs_tokens": [ours_docs, ours_tokens],
            "ratio": round(ratio, 2),
        },
    )


if __name__ == "__main__":
    main()
