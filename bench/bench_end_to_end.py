"""Benchmark: the whole data path, raw jsonl to a merged datapack, against the chain a user runs by hand.

    .venv/bin/python bench/bench_end_to_end.py [--corpus debian|synthetic|both] [--repeats 1] [--shard-mb 50]

Both run on the same raw files, in one run, on this machine's cores (2 workers each):

* **Hand chain**: datatrove's four MinHash stages (bench_dedup.py's pipeline, one task per raw file: word
  5-grams, characters for zh/ja, 64-bit hashes, our LSH shape), the kept documents concatenated, then
  Megatron-LM's ``tools/preprocess_data.py --workers 2`` with the same SentencePiece model (the pinned
  source of ``../shared/trainers``, see tests/trainers.py).
* **snakepack**: ``snakemake --cores 2`` from an empty results tree in a copy of the workflow: ingest, dedup,
  tokenize, count, mixture, plan, slicing, merging, report (the default target). One phase takes
  nearly all tokens (98% of what Megatron-LM wrote, in whole iterations), so the merged pack holds about
  the same tokens as the hand chain's output.

Data: bench_tokenize_fast.py's corpora and models (``--corpus``, both by default, each run on its own):
``debian`` (Debian documentation in many languages, 323 MB of jsonl, built once with apt-get; its 32k BPE
model) split into raw files of at most 32 MB per language ({lang}_docs_debian_part-NN.jsonl, the language
from the document's path), and ``synthetic`` (bench/synthetic_corpus.py's text in eight scripts, 202 MB; its
Llama-2-style byte-fallback model trained by spm_train) split the same way ({lang}_synthetic_text_part-NN,
the language from the document's script). Where our time goes comes from the rules' benchmark records
(results/benchmarks/): per stage (the first folder under benchmarks/, the pack-writing folders together as
``packs``) the jobs' summed wall seconds and the span from the first job's start to the last one's end (a
record's file is written when its job ends), and what no record covers (Snakemake's own work and the
unrecorded rules: dedup's filter, count, mixture, plan, report). Beside the wall-clock ratio (the goal:
>= 4x) each chain's CPU seconds (all its processes), the ratio a busy shared machine moves least, and the
load average around each run. Figures go to bench/results/end_to_end.json.
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import resource
import shutil
import sys
import unicodedata
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
GOAL = 4.0
RAW_FILE_MB = 32
LANG_DIRS = re.compile(r"^[a-z]{2}(?:[_-][A-Za-z]{2})?$")  # man/de/, fortunes/zh/, debian-reference/zh-cn/
# the languages of the packages' translations (other two-letter folders are sections or architectures)
LANGS = {*(lang[:2] for lang in bench_tokenize_fast.LANGS.split()), "ar", "ca", "id", "ko", "nb", "tr"}
SEQ_LENGTH, BATCH = 2048, 8
SCRIPT_LANGS = {"CYRILLIC": "ru", "GREEK": "el", "ARABIC": "ar", "DEVANAGARI": "hi", "HANGUL": "ko"}
PACK_STAGES = ("datapacks", "merged", "pack")  # benchmark folders of the rules that write the packs


def log(msg: str) -> None:
    bench_tokenize_fast.log(msg)


def lang_of(doc: dict[str, str]) -> str:
    """The language of a Debian document, from its path (a language folder), else en."""
    parts = doc["id"].split("#")[0].split("/")[:-1]
    return next((p[:2] for p in parts if LANG_DIRS.match(p) and p[:2] in LANGS), "en")


def script_of(doc: dict[str, str]) -> str:
    """The language of a synthetic document, from the script most of its first letters are in: ja where it
    writes kana, zh for other CJK ideographs, en for Latin."""
    names = [unicodedata.name(c, "") for c in doc["text"][:300] if c.isalpha()]
    if any(n.startswith(("HIRAGANA", "KATAKANA")) for n in names):
        return "ja"
    scripts = [n.split()[0] for n in names]
    top = max(set(scripts), key=scripts.count, default="LATIN")
    return "zh" if top == "CJK" else SCRIPT_LANGS.get(top, "en")


def raw_files(name: str, corpus: Path) -> Path:
    """The corpus as a delivery: per language, raw files of at most RAW_FILE_MB (built once)."""
    raw = WORK / name / "raw"
    if raw.exists():
        return raw
    language, kind = (lang_of, "docs_debian") if name == "debian" else (script_of, "synthetic_text")
    tmp = raw.with_suffix(".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    parts: dict[str, list[int]] = defaultdict(lambda: [0, 0])  # lang -> [file number, bytes in it]
    with open(corpus, "rb") as f, ExitStack() as stack:
        handles: dict[str, BinaryIO] = {}
        for line in f:
            lang = language(orjson.loads(line))
            part = parts[lang]
            if part[1] + len(line) > RAW_FILE_MB * harness.MB and part[1]:
                handles.pop(lang).close()
                part[0], part[1] = part[0] + 1, 0
            if lang not in handles:
                path = tmp / f"{lang}_{kind}_part-{part[0]:02d}.jsonl"
                handles[lang] = stack.enter_context(open(path, "wb"))
            handles[lang].write(line)
            part[1] += len(line)
    tmp.rename(raw)
    return raw


def hand_chain(work: Path, raw: Path, model: Path, workers: int) -> tuple[dict[str, float], Path]:
    """datatrove's MinHash dedup, then Megatron-LM's preprocess_data.py on the kept documents."""
    bands, rows = DedupSettings().lsh_shape()
    dedup = bench_dedup.run_datatrove(raw, workers, bands, rows)
    kept = dedup["out"] / "kept"
    merged = work / "hand" / "kept.jsonl"
    merged.parent.mkdir(parents=True, exist_ok=True)
    concat = harness.run_child(["sh", "-c", 'cat "$0"/*.jsonl > "$1"', str(kept), str(merged)])
    meg = trainers()
    prefix = work / "hand" / "megatron"
    cmd = [meg.python, "tools/preprocess_data.py", "--input", str(merged), "--output-prefix", str(prefix)]
    cmd += ["--tokenizer-type", "SentencePieceTokenizer", "--tokenizer-model", str(model), "--append-eod"]
    cmd += ["--workers", str(workers), "--json-keys", "text", "--log-interval", "100000000"]
    env = {**os.environ, "PYTHONPATH": str(meg.tree("megatron")), "PYTHONWARNINGS": "ignore"}
    pre = harness.run_child(cmd, cwd=meg.tree("megatron"), env=env)
    walls = {f"datatrove stage {k}": w for k, w in enumerate(dedup["stage_walls"], 1)}
    walls |= {"cat kept": concat.wall, "megatron preprocess_data": pre.wall}
    return walls, Path(f"{prefix}_text_document")


def workflow(work: Path, raw: Path, model: Path, tokens: int, shard_mb: int, workers: int) -> Path:
    """A fresh copy of the workflow whose config reads the raw files with the given model."""
    root = work / "snakepack"
    harness.copy_workflow(root)
    source = {
        "name": work.name,
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


def stage_of(folder: str) -> str:
    """The stage of a rule's benchmark folder: its first part, the pack-writing rules' as ``packs``."""
    first = folder.split("/")[0]
    return "packs" if first.startswith(PACK_STAGES) else first


def rule_seconds(root: Path, wall: float) -> dict[str, dict[str, float]]:
    """From the rules' benchmark records: per stage, the jobs' summed wall seconds (``jobs_s``) and the span
    from the first job's start to the last one's end (``span_s``; a record is written as its job ends); per
    benchmark folder the summed seconds; ``unrecorded_s``: the seconds of the run no job record covers."""
    bench = root / "results" / "benchmarks"
    jobs: dict[str, list[tuple[float, float]]] = defaultdict(list)
    folders: dict[str, float] = defaultdict(float)
    for tsv in bench.rglob("*.tsv"):
        folder = str(tsv.parent.relative_to(bench))
        end = tsv.stat().st_mtime
        with open(tsv) as f:
            seconds = sum(float(row["s"]) for row in csv.DictReader(f, delimiter="\t"))
        jobs[stage_of(folder)].append((end - seconds, end))
        folders[folder] += seconds
    stages = {
        stage: {
            "jobs_s": round(sum(b - a for a, b in spans), 2),
            "span_s": round(max(b for _, b in spans) - min(a for a, _ in spans), 2),
        }
        for stage, spans in sorted(jobs.items(), key=lambda kv: min(a for a, _ in kv[1]))
    }
    covered, reach = 0.0, float("-inf")  # the union of all jobs' intervals
    for a, b in sorted(span for spans in jobs.values() for span in spans):
        covered += max(0.0, b - max(a, reach))
        reach = max(reach, b)
    folders_s = {k: round(v, 2) for k, v in sorted(folders.items(), key=lambda kv: -kv[1])}
    return {"stages": stages, "folders_s": folders_s, "unrecorded_s": round(max(0.0, wall - covered), 2)}


def children_cpu() -> float:
    """CPU seconds (user + system) of this process's waited-for children so far (their own children
    included, as they waited for them)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def documents_and_tokens(prefix: Path) -> tuple[int, int]:
    ds = IndexedDataset(prefix)
    return ds.num_documents, ds.num_tokens


def run_corpus(name: str, args: argparse.Namespace) -> dict[str, object]:
    """Both chains on one corpus, ``args.repeats`` rounds; its figures."""
    corpus, model, _, what = bench_tokenize_fast.corpus_and_model(name, args.synthetic_mb)
    work = WORK / name
    raw = raw_files(name, corpus)
    files = sorted(raw.glob("*.jsonl"))
    raw_mb = sum(p.stat().st_size for p in files) / harness.MB
    log(f"{name}: {len(files)} raw files, {raw_mb:.1f} MB ({what})")
    hand_runs: list[float] = []
    ours_runs: list[float] = []
    hand_cpu: list[float] = []
    ours_cpu: list[float] = []
    loads: list[float] = [os.getloadavg()[0]]
    for r in range(args.repeats):
        log(f"{name} round {r + 1}: hand chain")
        cpu = children_cpu()
        walls, hand_prefix = hand_chain(work, raw, model, args.workers)
        hand_cpu.append(children_cpu() - cpu)
        hand_runs.append(sum(walls.values()))
        loads.append(os.getloadavg()[0])
        docs, tokens = documents_and_tokens(hand_prefix)
        per_iter = SEQ_LENGTH * BATCH
        target = int(tokens * 0.98) // per_iter * per_iter
        log(f"  {hand_runs[-1]:.1f} s: " + ", ".join(f"{k} {v:.1f}" for k, v in walls.items()))
        log(f"{name} round {r + 1}: snakepack (a phase of {target:,} tokens)")
        root = workflow(work, raw, model, target, args.shard_mb, args.workers)
        cmd = [*harness.SNAKEMAKE, "--configfile", "e2e.yaml", "--cores", str(args.workers), "--quiet"]
        ours = harness.run_child(cmd, cwd=root)
        ours_runs.append(ours.wall)
        ours_cpu.append(ours.cpu)
        loads.append(os.getloadavg()[0])
        log(
            f"  {ours.wall:.1f} s, x{hand_runs[-1] / ours.wall:.2f}; "
            f"CPU {ours.cpu:.1f} s against {hand_cpu[-1]:.1f}"
        )
    packs = sorted((root / "results" / "merged").glob("*/*.bin"))
    counts = [documents_and_tokens(p.with_suffix("")) for p in packs]
    ours_docs, ours_tokens = sum(c[0] for c in counts), sum(c[1] for c in counts)
    rules = rule_seconds(root, ours_runs[-1])
    hand, best = min(hand_runs), min(ours_runs)
    ratio = hand / best
    print(f"\n{name}: raw {raw_mb:.1f} MB in {len(files)} files, {args.workers} workers")
    print(f"hand chain (datatrove MinHash + Megatron-LM preprocess_data): {hand:.1f} s, ", end="")
    print(f"{docs:,} docs, {tokens:,} tokens")
    print(
        f"snakepack (snakemake --cores {args.workers}, raw to merged pack): {best:.1f} s, "
        f"{ours_docs:,} docs, {ours_tokens:,} tokens in {len(packs)} pack(s)"
    )
    stages = ", ".join(f"{k} {v['jobs_s']:.1f} (span {v['span_s']:.1f})" for k, v in rules["stages"].items())
    print(f"snakepack's stages (last run, benchmark records, s): {stages}")
    print(f"not in a job record: {rules['unrecorded_s']} s")
    cpu_ratio = min(hand_cpu) / min(ours_cpu)
    print(
        f"CPU seconds (all processes): hand chain {min(hand_cpu):.1f}, "
        f"snakepack {min(ours_cpu):.1f}: x{cpu_ratio:.2f}"
    )
    print(f"load average (1 min) before and after each run: {', '.join(f'{x:.1f}' for x in loads)}")
    print(f"{name}: ratio x{ratio:.2f} (goal >= {GOAL}): {'met' if ratio >= GOAL else 'NOT met'}")
    return {
        "corpus": what,
        "raw_mb": round(raw_mb, 1),
        "raw_files": len(files),
        "hand_s": [round(w, 2) for w in hand_runs],
        "hand_steps_s": {k: round(v, 2) for k, v in walls.items()},
        "ours_s": [round(w, 2) for w in ours_runs],
        "hand_cpu_s": [round(c, 2) for c in hand_cpu],
        "ours_cpu_s": [round(c, 2) for c in ours_cpu],
        "cpu_ratio": round(cpu_ratio, 2),
        "load_average_1min": [round(x, 2) for x in loads],
        "ours_rules": rules,
        "hand_docs_tokens": [docs, tokens],
        "ours_docs_tokens": [ours_docs, ours_tokens],
        "ratio": round(ratio, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", choices=("debian", "synthetic", "both"), default="both")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--shard-mb", type=int, default=50, help="ingest.shard_size in MB")
    parser.add_argument("--synthetic-mb", type=float, default=200.0, help="size of the synthetic corpus")
    args = parser.parse_args()
    bench_tokenize_fast.WORK.mkdir(parents=True, exist_ok=True)
    log("warming up the trainers' environment")
    trainers()
    names = ["debian", "synthetic"] if args.corpus == "both" else [args.corpus]
    results = {name: run_corpus(name, args) for name in names}
    for name, res in results.items():
        log(
            f"{name}: x{res['ratio']} (hand {min(res['hand_s'])} s, snakepack {min(res['ours_s'])} s; "
            f"CPU x{res['cpu_ratio']})"
        )
    harness.write_results("end_to_end", {"args": vars(args), **results})


if __name__ == "__main__":
    main()
