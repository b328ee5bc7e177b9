"""Benchmark: planning at scale. How long `snakemake -n` takes over 1,000 / 10,000 / 100,000 shards, and
how long one Slurm job's own start takes, next to plain Snakemake on a fan-in workflow of the same job count.

For each size N, in a copy of the workflow under bench/_work/scale/N:

1. N raw files (one small document each) in 12 groups are ingested for real (``--until ingest``,
   ``ingest.shard_size: 1000``, so one shard per file): the tree is *fresh after ingest*; ``snakemake -n``
   is timed on it.
2. The per-shard outputs of dedup and tokenize (signatures, assignments, kept shards, tokenized
   ``.bin/.idx`` of one document each, stats) and the batch jobs' manifests and benchmark records are
   written directly, in pipeline order, instead of running the batch jobs; the gathers after them (count,
   plan, slicing, merging) run for real. The tree is *finished*; ``snakemake -n`` is timed on it, a dry run
   under ``profiles/lumi`` that forces the per-shard stages counts the Slurm jobs they would take, and the
   start of one Slurm job (the command the executor runs on the node: ``--target-jobs 'tokenize:...'
   --allowed-rules tokenize --mode remote``, as a dry run, which builds the job's DAG without running it).
3. Plain Snakemake: a workflow of three per-item rules and one gather over N items (3N + 1 jobs, the same
   order as ours), timed fresh (only the first inputs exist) and finished.
4. With ``--slurm N``: N one-document shards run end to end through the local Slurm
   (``profiles/slurm-local``, 400 shards a batch job) and locally; it counts the Slurm jobs submitted next
   to the DAG's jobs and compares the merged packs byte for byte.

Goal: 10,000 shards <= 30 s, 100,000 <= 5 minutes, within 2x plain Snakemake; <= 1,000 Slurm jobs for the
per-shard rules at 100,000 shards; a Slurm job's start <= 10 s beyond Snakemake's own import at 10,000
shards.

With ``--after-tokenize``, instead: the whole chain after the tokenize batch jobs (the tokenized list, count,
mixtures, plan, the packs, trainer configs, the report's data and plan pages), timed through ``snakemake
--cores 2`` on a tree finished up to tokenize (bench/_work/scale/after_N), whatever its rules are called:
per rule from Snakemake's log, per command (``snakepack CMD``) with its CPU seconds and peak RSS sampled
from /proc (``snakemake_jobs.py``). The tree is written directly in minutes (``ingest_directly``, then
``finish_per_shard_steps``): N raw files and shards of ``--docs-per-shard`` documents (about 100 tokens
each) in 12 groups. ``--keep`` keeps it; ``--reuse`` removes what came after tokenize and runs the chain
again with the workflow's current files. Goal (issue 56): 10,000 shards <= 30 s, 100,000 <= 120 s, the
biggest job's peak <= 2 GB (today 100 s and 1,116 s).

    .venv/bin/python bench/bench_scale.py                      # 1000, 10000 (about 10 minutes)
    .venv/bin/python bench/bench_scale.py --shards 1000 10000 100000
    .venv/bin/python bench/bench_scale.py --shards 1000 --slurm 2000   # and 2,000 shards through Slurm
    .venv/bin/python bench/bench_scale.py --shards 100000 --keep           # keep the tree (an hour to build)
    .venv/bin/python bench/bench_scale.py --shards 100000 --reuse          # measure it again (minutes)
    .venv/bin/python bench/bench_scale.py --after-tokenize --shards 10000 100000 --keep   # build 3 minutes
    .venv/bin/python bench/bench_scale.py --after-tokenize --shards 10000 100000 --keep --reuse
"""

from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import string
import subprocess
import time
from collections import Counter
from pathlib import Path

import harness
import numpy as np
import orjson
import snakemake_jobs
import yaml

from workflow_scripts.core.indexed_dataset import IndexedDatasetBuilder
from workflow_scripts.tokens import ledger

GROUPS = [
    ("en", "news"),
    ("en", "books"),
    ("en", "wiki"),
    ("en", "web"),
    ("de", "news"),
    ("de", "web"),
    ("fr", "web"),
    ("fr", "wiki"),
    ("ru", "news"),
    ("ru", "web"),
    ("zh", "web"),
    ("ja", "news"),
]
TOKENS_PER_DOC = 400
VOCAB = 8000  # the sample config's vocabulary
PER_BATCH = 400  # the schema's shards_per_job
SNAKEMAKE = harness.SNAKEMAKE


def make_workflow(root: Path, n: int) -> None:
    """A copy of the workflow with N one-document raw files in 12 groups and its config."""
    harness.copy_workflow(root)
    raw = root / "raw"
    raw.mkdir()
    for i in range(n):
        lang, domain = GROUPS[i % len(GROUPS)]
        rng = random.Random(i)  # distinct letters (dedup maps digits to 0): dedup keeps every document
        text = " ".join("".join(rng.choices(string.ascii_lowercase, k=6)) for _ in range(120))
        (raw / f"{lang}_{domain}_s_part-{i:06d}.jsonl").write_bytes(
            orjson.dumps({"id": f"d{i}", "text": text}) + b"\n"
        )
    source = {
        "name": "raw",
        "paths": ["raw/*.jsonl"],
        "name_regex": r"^(?P<lang>[a-z]+)_(?P<domain>[a-z]+)_(?P<subdomain>[a-z]+)_part",
    }
    config = {
        "sample": {"enabled": False},
        "sources": [source],
        "ingest": {"shard_size": 1000},
        "datapacks": {"validation_tokens": 0},  # one-document sources hold nothing out
    }
    (root / "scale.yaml").write_text(yaml.safe_dump(config))


def snakemake(root: Path, *args: str) -> harness.Measured:
    cmd = [*SNAKEMAKE, "--configfile", "config/sample.yaml", "scale.yaml", "--cores", "2", *args]
    return harness.run_child(cmd, cwd=root, sample_rss=True)


def touch_all(paths: list[Path], when: float) -> None:
    for p in paths:
        os.utime(p, (when, when))


def write(path: Path, data: bytes = b"") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def batch_records(stage: Path, bench: Path | None, stems: list[str]) -> list[Path]:
    """The manifests (and benchmark records) of a per-shard stage's batch jobs over ``stems``."""
    batches: dict[str, list[str]] = {}
    for s in stems:
        group, split = s.split("_split_")
        batches.setdefault(f"{group}.{int(split) // PER_BATCH}", []).append(s)
    made = [write(stage / "_batches" / f"{b}.json", orjson.dumps({"members": m})) for b, m in batches.items()]
    return made + ([write(bench / f"{b}.tsv") for b in batches] if bench else [])


def finish_per_shard_steps(root: Path, lengths: np.ndarray | None = None) -> None:
    """Write what dedup and tokenize would, shard by shard, with increasing modification times: the
    tokenized source of the k-th shard (in name order) holds documents of ``lengths[k]`` tokens (one of
    ``TOKENS_PER_DOC`` without ``lengths``)."""
    res = root / "results"
    shards = sorted(res.glob("shards/*/*_split_*.jsonl"))
    if lengths is None:
        lengths = np.full((len(shards), 1), TOKENS_PER_DOC)
    stems = [p.name.removesuffix(".jsonl") for p in shards]
    groups = sorted({p.parent.name for p in shards})
    now = time.time() - 600  # in the past: the real jobs after these must be newer
    work, bench = res / "dedup" / "_work", res / "benchmarks"
    touch_all([write(work / "params.json", b"{}")], now - 5)
    stage = [write(work / "sig" / f"{s}.sig") for s in stems]
    touch_all([*stage, *batch_records(work / "sig", bench / "dedup" / "signatures", stems)], now)
    stage = [write(work / "pairs" / "exact_0.pairs"), write(bench / "dedup" / "exact_0.tsv")]
    for g in range(4):
        stage += [write(work / "pairs" / f"bands_{g}_0.pairs"), write(bench / "dedup" / f"bands_{g}_0.tsv")]
    touch_all(stage, now + 10)
    docs = int(lengths.size)
    summary = {"shards": len(stems), "docs": docs, "removed": {"exact": 0, "near": 0}}
    stage = [
        write(res / "dedup" / "clusters.tsv"),
        write(work / "cluster_summary.json", orjson.dumps(summary)),
    ]
    stage += [write(bench / "dedup" / "cluster.tsv")]
    stage += [write(work / "assign" / f"{s}.assign.json", b'{"rows":[]}') for s in stems]
    touch_all(stage, now + 20)
    stage, per_group = [], Counter[str]()
    for shard, s, lens in zip(shards, stems, lengths, strict=True):
        group = shard.parent.name
        per_group[group] += len(lens)
        kept = res / "dedup" / group / shard.name
        kept.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shard, kept)
        stats = {"docs_in": len(lens), "docs_out": len(lens), "removed": {"exact": 0, "near": 0}}
        stage += [kept, write(res / "dedup" / group / "removed" / shard.name)]
        stage += [write(work / "stats" / f"{s}.stats.json", orjson.dumps(stats))]
    stage += batch_records(res / "dedup", None, stems)
    counts = {g: {"in": k, "exact": 0, "near": 0} for g, k in per_group.items()}
    report = {"docs_in": docs, "removed": {"total": 0}, "cluster_size_histogram": {}}
    stage += [write(res / "dedup" / "stats.json", b"{}")]
    stage += [write(res / "dedup" / "report.json", orjson.dumps(report | {"by_group": counts}))]
    touch_all(stage, now + 30)
    stage = [write(res / "tokenizer" / "spm.model"), write(res / "tokenizer" / "spm.vocab")]
    touch_all([*stage, write(bench / "tokenizer" / "train.tsv")], now + 40)
    tok = res / "tokenized"
    tok.mkdir(parents=True, exist_ok=True)
    stage = []
    identity = {"rejected": {}, "tokenizer_sha256": "x", "vocab_size": VOCAB}
    tokens = np.random.default_rng(0).integers(1, VOCAB, int(lengths.sum(axis=1).max()), dtype=np.uint16)
    for s, lens in zip(stems, lengths, strict=True):
        prefix = tok / f"{s}_text_document"
        with IndexedDatasetBuilder(prefix, "uint16", durable=False) as b:
            b.add_documents(tokens[: int(lens.sum())], lens)
        stats = {"docs_in": len(lens), "docs_out": len(lens), **identity}
        stage += [Path(f"{prefix}.bin"), Path(f"{prefix}.idx")]
        stage += [write(Path(f"{prefix}.stats.json"), orjson.dumps(stats))]
        stage += [write(Path(f"{prefix}.quarantine.jsonl"))]
        ledger.write_unknown(str(prefix), len(lens))  # lineage's: no raw file written here to point to
        stage += [Path(f"{prefix}.ledger.npz")]
    touch_all([*stage, *batch_records(tok, bench / "tokenize", stems)], now + 50)
    touch_all(shards, now - 10)
    print(f"  wrote the per-shard outputs of {len(stems)} shards in {len(groups)} groups", flush=True)


def plain_workflow(root: Path, n: int) -> None:
    """Three per-item rules and a gather over N items; first inputs exist."""
    shutil.rmtree(root, ignore_errors=True)
    (root / "in").mkdir(parents=True)
    (root / "Snakefile").write_text(
        f"ITEMS = [f'i{{k:06d}}' for k in range({n})]\n\n"
        "rule all:\n    input: 'gather.txt'\n\n"
        "rule a:\n    input: 'in/{i}.txt'\n    output: 'a/{i}.txt'\n    shell: 'cp {input} {output}'\n\n"
        "rule b:\n    input: 'a/{i}.txt'\n    output: 'b/{i}.txt'\n    shell: 'cp {input} {output}'\n\n"
        "rule c:\n    input: 'b/{i}.txt'\n    output: 'c/{i}.txt'\n    shell: 'cp {input} {output}'\n\n"
        "rule gather:\n    input: expand('c/{i}.txt', i=ITEMS)\n    output: 'gather.txt'\n"
        "    shell: 'cat {input} > {output}'\n"
    )
    for k in range(n):
        write(root / "in" / f"i{k:06d}.txt", b"x")


def finish_plain(root: Path, n: int) -> None:
    now = time.time() - 600
    for step, dt in (("a", 10), ("b", 20), ("c", 30)):
        touch_all([write(root / step / f"i{k:06d}.txt", b"x") for k in range(n)], now + dt)
    touch_all([write(root / "gather.txt", b"x")], now + 40)


def dry_run(root: Path, *extra: str) -> harness.Measured:
    return harness.run_child([*SNAKEMAKE, "-n", "--quiet", "--cores", "2", *extra], cwd=root, sample_rss=True)


def slurm_jobs(root: Path) -> tuple[dict[str, dict[str, int]], list[dict[str, object]]]:
    """Per per-shard stage, the Slurm jobs `snakemake -n --profile profiles/lumi` would submit were they all
    to rerun (``--forcerun``; twice: a rerun clustering hides the jobs after it until it ran): the table
    that ends its output; and per dry run, its Slurm jobs next to its DAG's jobs."""
    env = {**os.environ, "SNAKEPACK_SLURM_ACCOUNT": "bench"}
    rows: dict[str, list[str]] = {}
    plans: list[dict[str, object]] = []
    for forced in (["dedup_signatures"], ["dedup_filter", "tokenize"]):
        args = ("-n", "--quiet", "rules", "--profile", "profiles/lumi", "--forcerun", *forced)
        cmd = [*SNAKEMAKE, "--configfile", "config/sample.yaml", "scale.yaml", *args]
        out = harness.run_child(cmd, cwd=root, env=env).output
        lines = out[out.index("Slurm jobs this run would submit") :].splitlines()[2:]
        rows |= {cells[0]: cells[1:] for cells in map(str.split, lines) if cells and cells[0] in forced}
        jobs = re.search(r"(\d+) Slurm jobs and (\d+) local jobs: the plan's (\d+) jobs", out)
        plans.append({"forced": forced, "slurm_jobs": int(jobs[1]), "dag_jobs": int(jobs[3])})
    return {rule: {"slurm_jobs": int(row[0])} for rule, row in rows.items()}, plans


def fresh_again(root: Path) -> harness.Measured:
    """The dry run fresh after ingest, again: in a new copy of the workflow beside a kept finished tree, with
    its raw files and ingested shards (hard links)."""
    fresh = root.with_name(f"{root.name}_fresh")
    harness.copy_workflow(fresh)
    for part in ("raw", "results/shards"):
        (fresh / part).parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["cp", "-al", str(root / part), str(fresh / part)], check=True)
    shutil.copy2(root / "scale.yaml", fresh)
    measured = snakemake(fresh, "-n", "--quiet")
    shutil.rmtree(fresh)
    return measured


def measure(n: int, keep: bool, reuse: bool) -> dict[str, float]:
    print(f"== {n} shards", flush=True)
    root = harness.WORK / "scale" / str(n)
    if reuse and (root / "results" / "plan.json").is_file():
        print("  a kept finished tree, with the workflow's current files", flush=True)
        harness.refresh_workflow(root)
        fresh = fresh_again(root)
    else:
        make_workflow(root, n)
        ingest = snakemake(root, "--until", "ingest", "--quiet")
        print(f"  ingest (12 jobs, real): {ingest.wall:.1f} s", flush=True)
        fresh = snakemake(root, "-n", "--quiet")
    print(f"  snakemake -n, fresh after ingest: {fresh.wall:.1f} s, {fresh.rss_mib:.0f} MiB", flush=True)
    if not (root / "results" / "plan.json").is_file():
        finish_per_shard_steps(root)
        rest = snakemake(root, "--quiet")
        print(f"  count, plan, slicing, merging (real): {rest.wall:.1f} s", flush=True)
    finished = snakemake(root, "-n")
    assert "Nothing to be done" in finished.output, finished.output[-2000:]
    print(f"  snakemake -n, finished: {finished.wall:.1f} s, {finished.rss_mib:.0f} MiB", flush=True)
    slurm, plans = slurm_jobs(root)
    print(
        f"  Slurm jobs of the per-shard stages under profiles/lumi (a forced rerun of them): {slurm}",
        flush=True,
    )
    for p in plans:
        print(
            f"    --forcerun {' '.join(p['forced'])}: {p['slurm_jobs']} Slurm jobs, {p['dag_jobs']} DAG jobs"
        )
    group = sorted((root / "results" / "shards").glob("*/*_split_*.jsonl"))[0].parent.name
    job = f"tokenize:group={group},batch=0"
    remote = ("--target-jobs", job, "--allowed-rules", "tokenize", "--mode", "remote", "--nolock", "-n")
    slurm_job = snakemake(root, *remote, "--max-inventory-time", "0", "--ignore-incomplete")
    version = harness.run_child([*SNAKEMAKE, "--version"], cwd=root)
    print(
        f"  one Slurm job's start: {slurm_job.wall:.1f} s (Snakemake's import: {version.wall:.1f} s)",
        flush=True,
    )
    plain = harness.WORK / "scale" / f"plain_{n}"
    plain_workflow(plain, n)
    plain_fresh = dry_run(plain)
    finish_plain(plain, n)
    plain_finished = dry_run(plain)
    print(f"  plain Snakemake ({3 * n + 1} jobs) next to ours:")
    for what, ours, base in (("fresh", fresh, plain_fresh), ("finished", finished, plain_finished)):
        print(f"  {what:>8}: ours {ours.wall:6.1f} s, plain {base.wall:6.1f} s: x{ours.wall / base.wall:.2f}")
    if not keep:
        shutil.rmtree(root)
    shutil.rmtree(plain)
    return {
        "shards": n,
        "fresh_s": round(fresh.wall, 2),
        "fresh_rss_mib": round(fresh.rss_mib),
        "finished_s": round(finished.wall, 2),
        "finished_rss_mib": round(finished.rss_mib),
        "slurm_job_start_s": round(slurm_job.wall, 2),
        "slurm_jobs": slurm,
        "slurm_jobs_total": sum(r["slurm_jobs"] for r in slurm.values()),
        "forced_dry_runs": plans,
        "snakemake_import_s": round(version.wall, 2),
        "plain_jobs": 3 * n + 1,
        "plain_fresh_s": round(plain_fresh.wall, 2),
        "plain_finished_s": round(plain_finished.wall, 2),
        "ratio_fresh": round(fresh.wall / plain_fresh.wall, 2),
        "ratio_finished": round(finished.wall / plain_finished.wall, 2),
    }


def through_slurm(n: int) -> dict[str, object]:
    """N one-document shards end to end through the local Slurm (profiles/slurm-local, batches of 400) and
    locally: the Slurm jobs submitted next to the DAG's jobs, and the merged packs compared byte for byte."""
    print(f"== {n} shards through the local Slurm and locally", flush=True)
    per_job = ("--config", "shards_per_job=400")
    runs: dict[str, harness.Measured] = {}
    for name, profile in (("local", "profiles/local"), ("slurm", "profiles/slurm-local")):
        root = harness.WORK / "scale" / f"{name}_{n}"
        make_workflow(root, n)
        cmd = [*SNAKEMAKE, "--configfile", "config/sample.yaml", "scale.yaml", "--profile", profile, *per_job]
        runs[name] = harness.run_child([*cmd, *(["--cores", "2"] if name == "local" else [])], cwd=root)
        print(f"  {name}: {runs[name].wall:.0f} s", flush=True)
    digests = [
        {
            p.relative_to(root).as_posix(): p.read_bytes()
            for p in sorted((root / "results/merged").glob("*/*.*"))
        }
        for root in (harness.WORK / "scale" / f"{name}_{n}" for name in runs)
    ]
    identical = all(k.endswith(".log") or digests[0][k] == digests[1].get(k) for k in digests[0])
    slurm_root = harness.WORK / "scale" / f"slurm_{n}"
    out = max((slurm_root / ".snakemake" / "log").glob("*.snakemake.log")).read_text()  # stderr's copy
    submitted = len(set(re.findall(r"submitted with SLURM jobid (\d+)", out)))
    dag_jobs = int(re.findall(r"(\d+) of (\d+) steps", out)[-1][1])
    local_jobs = len(re.findall(r"^local(?:rule|checkpoint) \w+:$", out, re.M))
    print(
        f"  {submitted} Slurm jobs for {dag_jobs} DAG jobs ({local_jobs} local); packs identical: {identical}"
    )
    for name in runs:
        shutil.rmtree(harness.WORK / "scale" / f"{name}_{n}")
    return {
        "shards": n,
        "slurm_jobs": submitted,
        "dag_jobs": dag_jobs,
        "local_rule_jobs": local_jobs,
        "packs_identical": identical,
        "slurm_s": round(runs["slurm"].wall, 1),
        "local_s": round(runs["local"].wall, 1),
    }


# ---------------------------------------------------------------- the chain after tokenize

AFTER_TODAY_S = {10000: 100.0, 100000: 1116.0}  # issue 56, from docs/scale.md (2 cores)
AFTER_GOAL_S = {10000: 30.0, 100000: 120.0}
PEAK_GOAL_MIB = 2048.0
# What a tree finished up to tokenize holds: results/ (its benchmarks/) entries and tokenized files.
UP_TO_TOKENIZE = {"shards", "dedup", "tokenizer", "tokenized", "benchmarks"}
UP_TO_TOKENIZE_BENCH = {"ingest", "dedup", "tokenizer", "tokenize"}
TOKENIZED_EXTS = (".bin", ".idx", ".stats.json", ".quarantine.jsonl", ".ledger.npz")
# The rules up to tokenize: none of them may run in the timed chain.
BEFORE = re.compile(
    r"ingest|ingest_stats|dedup_\w+|corpus_list|train_(hf_)?tokenizer|tokenize|import_tokenized"
)
WORDS_PER_DOC = 30  # about 100 tokens


def ingest_directly(root: Path, n: int, docs: int) -> None:
    """N raw files of ``docs`` documents each, in 12 groups, and what ingest makes of them, written
    directly: one shard a raw file, each group's stats, quarantine and timestamp, and ``shards/stats.json``
    (by the workflow's own ``snakepack stats``)."""
    then = time.time() - 900
    letters = np.random.default_rng(n).integers(97, 123, (n * docs, WORDS_PER_DOC * 7), dtype=np.uint8)
    letters[:, 6::7] = 32  # distinct words of six letters (dedup would keep every document)
    texts = [row.tobytes()[:-1].decode() for row in letters]
    stats: dict[str, dict] = {}
    for i in range(n):
        lang, domain = GROUPS[i % len(GROUPS)]
        group, raw_name = f"{lang}_{domain}_s", f"{lang}_{domain}_s_part-{i:06d}.jsonl"
        own = texts[i * docs : (i + 1) * docs]
        raw = [orjson.dumps({"id": f"d{i}.{d}", "text": t}) + b"\n" for d, t in enumerate(own)]
        fields = {"lang": lang, "domain": domain, "subdomain": "s", "source": raw_name, "meta": {}}
        lines = [
            orjson.dumps({"id": f"d{i}.{d}", "text": t, **fields, "line": d + 1}) + b"\n"
            for d, t in enumerate(own)
        ]
        shard = f"{group}_split_{i // len(GROUPS):04d}.jsonl"
        touch_all([write(root / "raw" / raw_name, b"".join(raw))], then)
        write(root / "results" / "shards" / group / shard, b"".join(lines))
        g = stats.setdefault(group, {"group": group, "lang": lang, "domain": domain, "subdomain": "s"})
        g.setdefault("inputs", []).append(
            {"path": f"raw/{raw_name}", "bytes": sum(map(len, raw)), "docs_in": docs, "docs_out": docs}
        )
        g.setdefault("shards", []).append({"name": shard, "bytes": sum(map(len, lines)), "docs": docs})
    for group, g in stats.items():
        folder = root / "results" / "shards" / group
        g |= {
            "files": len(g["inputs"]),
            "docs_in": docs * len(g["inputs"]),
            "docs_out": docs * len(g["inputs"]),
        }
        g |= {"bytes_in": sum(f["bytes"] for f in g["inputs"]), "rejected": {}}
        made = [write(folder / "stats.json", orjson.dumps(g)), write(folder / "quarantine.jsonl")]
        touch_all([*made, write(folder / ".snakemake_timestamp")], then + 100)
    folders = sorted(str(p) for p in (root / "results" / "shards").iterdir())
    cmd = harness.cli("stats", "--stage", "ingest", "--output", "results/shards/stats.json", *folders)
    harness.run_child(cmd, cwd=root)
    print(f"  wrote {n} raw files of {docs} documents and their shards in {len(stats)} groups", flush=True)


def build_up_to_tokenize(root: Path, n: int, docs: int) -> None:
    """A workflow copy with the outputs of every stage up to tokenize written directly: N shards of
    ``docs`` documents of about 100 tokens each (uniform from 50 to 150) in 12 groups."""
    make_workflow(root, 0)
    config = yaml.safe_load((root / "scale.yaml").read_text())
    config["ingest"]["shard_size"] = 1000 * docs
    (root / "scale.yaml").write_text(yaml.safe_dump(config))
    ingest_directly(root, n, docs)
    finish_per_shard_steps(root, np.random.default_rng(0).integers(50, 151, (n, docs)))


def clear_after_tokenize(root: Path) -> None:
    """Move what came after tokenize in a kept tree (whatever made it) out of the tree, into
    ``_cleared/{time}`` beside it, and refresh its workflow files.

    Moved, not deleted: on this machine's file system (ext4 without a journal), creating files soon after
    200,000 were deleted costs 0.45 ms each in the kernel (``recently_deleted`` scanning the freed inodes,
    under ``perf``) where it costs 0.03 ms otherwise, so the count links of a run measured after a deletion
    would time the deletion. ``--clear-moved`` deletes the moved folders (then wait before measuring)."""
    harness.refresh_workflow(root)
    res = root / "results"
    gone = [p for p in res.iterdir() if p.name not in UP_TO_TOKENIZE]
    gone += [p for p in (res / "benchmarks").iterdir() if p.name not in UP_TO_TOKENIZE_BENCH]
    tokenized = (res / "tokenized").iterdir()
    gone += [p for p in tokenized if p.name != "_batches" and not p.name.endswith(TOKENIZED_EXTS)]
    moved = root.parent / "_cleared" / f"{root.name}_{time.time_ns()}"
    for p in gone:
        target = moved / p.relative_to(root)
        target.parent.mkdir(parents=True, exist_ok=True)
        p.rename(target)


def files_under(folder: Path) -> int:
    return sum(len(files) for _, _, files in os.walk(folder))


def measure_after_tokenize(n: int, docs: int, keep: bool, reuse: bool) -> dict[str, object]:
    """Time `snakemake --cores 2` on a tree finished up to tokenize: the whole chain after the tokenize batch
    jobs, per rule (from Snakemake's log) and per command, with the peak memory of each."""
    print(f"== {n} shards, the chain after tokenize", flush=True)
    root = harness.WORK / "scale" / f"after_{n}"
    built = root / "built.json"
    if reuse and built.is_file() and orjson.loads(built.read_bytes()) == {"shards": n, "docs": docs}:
        print("  a kept tree, with the workflow's current files", flush=True)
        clear_after_tokenize(root)
        build_s = None
    else:
        start = time.perf_counter()
        build_up_to_tokenize(root, n, docs)
        built.write_bytes(orjson.dumps({"shards": n, "docs": docs}))
        build_s = round(time.perf_counter() - start, 1)
        print(f"  built up to tokenize in {build_s:.0f} s", flush=True)
    logs = set((root / ".snakemake" / "log").glob("*.snakemake.log"))
    load, started = os.getloadavg()[0], time.time()
    cmd = [
        *SNAKEMAKE,
        "--configfile",
        "config/sample.yaml",
        "scale.yaml",
        "--cores",
        "2",
        "--rerun-incomplete",
    ]
    # The tree's package, also where Snakemake imports it before reading the Snakefile (the editable
    # install's startup hook for --configfile would take the checkout's).
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])),
    }
    run = snakemake_jobs.sampled_run(cmd, root, env)
    (log,) = set((root / ".snakemake" / "log").glob("*.snakemake.log")) - logs
    rules, idle, first_job = snakemake_jobs.rule_times(log)
    early = sorted(r for r in rules if BEFORE.fullmatch(r))
    assert not early, f"the tree was not finished up to tokenize: {early} ran"
    commands = snakemake_jobs.by_label(run)
    jobs = {k: v for k, v in commands.items() if k.startswith("snakepack")}
    biggest = max(jobs, key=lambda k: jobs[k]["peak_mib"])
    row: dict[str, object] = {
        "shards": n,
        "docs_per_shard": docs,
        "build_s": build_s,
        "load_before": round(load, 2),
        "load_after": round(os.getloadavg()[0], 2),
        "chain_s": round(run.wall, 1),
        "today_s": AFTER_TODAY_S.get(n),
        "goal_s": AFTER_GOAL_S.get(n),
        "biggest_job": biggest,
        "biggest_job_peak_mib": jobs[biggest]["peak_mib"],
        "snakemake_peak_mib": commands["snakemake"]["peak_mib"],
        "tree_peak_mib": round(run.tree_peak_kb / 1024),
        "first_job_s": round(first_job - started),
        "snakemake_idle_s": idle,
        "rules": rules,
        "commands": commands,
        "plan_mb": round(sum(p.stat().st_size for p in (root / "results").glob("plan.*")) / 1e6, 1),
        "pack_files": files_under(root / "results" / "datapacks") + files_under(root / "results" / "merged"),
    }
    print(f"  snakemake --cores 2: {run.wall:.1f} s (load {load:.2f} before, {row['load_after']} after)")
    print(f"  the first job started after {row['first_job_s']} s (Snakemake's start: workflow, DAG)")
    print(f"  {'rule':<18} {'jobs':>5} {'job s':>7} {'from s':>7} {'to s':>7}")
    for r, v in rules.items():
        print(f"  {r:<18} {v['jobs']:>5} {v['job_s']:>7.0f} {v['from_s']:>7.0f} {v['to_s']:>7.0f}")
    print(f"  no job running (Snakemake's own work): {idle:.0f} s (the log's times: one second's resolution)")
    print(f"  {'command':<24} {'procs':>5} {'seconds':>8} {'CPU s':>7} {'peak MiB':>9}")
    for c, v in commands.items():
        print(f"  {c:<24} {v['processes']:>5} {v['seconds']:>8.1f} {v['cpu_s']:>7.1f} {v['peak_mib']:>9.0f}")
    print(f"  plan files {row['plan_mb']} MB; {row['pack_files']} files under datapacks/ and merged/")
    if not keep:
        shutil.rmtree(root)
    return row


def verdicts_after_tokenize(rows: list[dict]) -> None:
    """Each size's chain and peak beside today's figures and the goals."""
    for r in rows:
        goal, today = r["goal_s"], r["today_s"]
        met = "-" if goal is None else ("met" if r["chain_s"] <= goal else "NOT met")
        peak = max(r["biggest_job_peak_mib"], r["snakemake_peak_mib"])
        print(
            f"{r['shards']:>7} shards: chain after tokenize {r['chain_s']:.1f} s"
            f" (today {today or '-'} s; goal <= {goal or '-'} s: {met});"
            f" biggest job {r['biggest_job']} {r['biggest_job_peak_mib']:.0f} MiB, Snakemake"
            f" {r['snakemake_peak_mib']:.0f} MiB (goal <= {PEAK_GOAL_MIB:.0f} MiB:"
            f" {'met' if peak <= PEAK_GOAL_MIB else 'NOT met'})"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--keep", action="store_true", help="keep the workflow trees (bench/_work/scale/N)")
    parser.add_argument(
        "--reuse", action="store_true", help="measure a kept finished tree again instead of building it"
    )
    parser.add_argument(
        "--slurm", type=int, metavar="N", help="also run N shards through the local Slurm and locally"
    )
    parser.add_argument(
        "--after-tokenize",
        action="store_true",
        help="time the chain after tokenize (count to report) on trees finished up to tokenize instead",
    )
    parser.add_argument("--docs-per-shard", type=int, default=4, help="with --after-tokenize (default 4)")
    parser.add_argument(
        "--clear-moved", action="store_true", help="delete what --reuse moved out of the kept trees, and exit"
    )
    args = parser.parse_args()
    if args.clear_moved:
        shutil.rmtree(harness.WORK / "scale" / "_cleared", ignore_errors=True)
        return
    rows: list[dict] = []
    if args.after_tokenize:
        for n in args.shards:
            rows.append(measure_after_tokenize(n, args.docs_per_shard, args.keep, args.reuse))
            harness.write_results("scale_after_tokenize", {"args": vars(args), "rows": rows})
        verdicts_after_tokenize(rows)
        return
    slurm = None
    for n in args.shards:  # written after each size: a long run's finished sizes are kept
        rows.append(measure(n, args.keep, args.reuse))
        harness.write_results("scale", {"args": vars(args), "rows": rows, "through_slurm": slurm})
    if args.slurm:
        slurm = through_slurm(args.slurm)
    goals = {1000: 30, 10000: 30, 100000: 300}
    for r in rows:
        worst = max(r["fresh_s"], r["finished_s"])
        ratio = max(r["ratio_fresh"], r["ratio_finished"])
        ok = worst <= goals.get(r["shards"], 300) and ratio <= 2
        verdict = "met" if ok else "NOT met"
        print(f"{r['shards']:>7} shards: worst dry run {worst:.1f} s, x{ratio:.2f} plain: {verdict}")
        jobs = r["slurm_jobs_total"]
        verdict = "met" if jobs <= 1000 else "NOT met"
        print(f"{'':>7} per-shard stages: {jobs} Slurm jobs: {verdict}")
    harness.write_results("scale", {"args": vars(args), "rows": rows, "through_slurm": slurm})


if __name__ == "__main__":
    main()
