"""Benchmark the peak memory of every per-shard stage on inputs that stress it: memory must follow bytes.

    .venv/bin/python bench/bench_memory.py [--scale-mb 100 [1000 ...]] [--inputs books short bomb line]
        [--line-mb 200] [--threads 2] [--keep]

Inputs, generated (deterministically) in bench/_work/memory for each scale, run and deleted one at a time:

- ``books``: ``--scale-mb`` MB of 500 KB documents (.jsonl),
- ``short``: ``--scale-mb`` MB of 200-byte documents (.jsonl),
- ``bomb``: a .jsonl.zst that expands about 30,000 times to ``--scale-mb`` MB: 32 MiB documents of a few
  words around a run of spaces,
- ``line``: one JSON document of ``--line-mb`` MB (one line; the same at every scale).

Each input goes through the stage CLIs as the rules chain them, each its own process (default settings, so
one shard holds up to 1 GB): ingest -> dedup-signatures (per shard) -> dedup-exact and dedup-bands (over all
shards: 4 band groups, and a hash-range partition per 100 MB of input, as a config scales
``dedup.partitions``) -> dedup-cluster -> dedup-filter (per shard) -> tokenize (per shard, ``--threads``, with
a model trained once by train-tokenizer on a small corpus). The peak RSS of each process is its
``ru_maxrss`` under a small wrapper (harness.run_isolated).

Printed and written to bench/results/memory.json: the peak RSS (MiB) of every stage per input and scale (a
stage of several jobs: its largest), and for the stages of one job per input or shard (ingest, signatures,
filter, tokenize) the goals: every figure under 1 GiB, and the largest scale's figure at most 20 % above the
smallest's. ``--scale-mb 100 1000`` shows flatness (about 25 minutes on 2 cores; the default, 100, about 5).
"""

from __future__ import annotations

import argparse
import math
import random
import shutil
import time
from pathlib import Path
from typing import Any

import harness
import numpy as np
import orjson
import zstandard
from harness import MB

WORK = harness.WORK / "memory"
INPUTS = ("books", "short", "bomb", "line")
STAGES = (
    "ingest",
    "dedup-signatures",
    "dedup-exact",
    "dedup-bands",
    "dedup-cluster",
    "dedup-filter",
    "tokenize",
)
GOAL_STAGES = ("ingest", "dedup-signatures", "dedup-filter", "tokenize")  # one job per input or shard
GLOBAL = ("dedup-exact", "dedup-bands")  # jobs over all shards, one per hash-range partition (and band group)
PARTITION_MB = 100  # a partition per 100 MB of input, as a config would scale dedup.partitions
BAND_GROUPS = 4  # the workflow's default
GOAL_MIB = 1024
FLAT = 0.20
BOOK_BYTES = 500_000
SHORT_BYTES = 200
BOMB_DOC = 32 << 20
VOCAB_SIZE = 30_000
GROUP = ("en", "bench", "memory")


# ---------------------------------------------------------------- data


def _vocab(rng: random.Random) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    return ["".join(rng.choices(letters, k=rng.randint(2, 10))) for _ in range(VOCAB_SIZE)]


class Text:
    """Random prose: words of a fixed vocabulary, sentences, paragraphs (about 6.5 bytes per word)."""

    def __init__(self, seed: int) -> None:
        self.vocab = _vocab(random.Random(seed))
        self.rng = np.random.default_rng(seed)

    def words(self, nbytes: int) -> str:
        words = [self.vocab[i] for i in self.rng.integers(0, VOCAB_SIZE, max(1, nbytes // 7)).tolist()]
        for i in range(12, len(words), 12):
            words[i] += "." if i % 96 else ".\n\n"
        return " ".join(words)


def _jsonl(path: Path, docs: Any) -> int:
    """Write the records of ``docs`` as jsonl; return the bytes written."""
    size = 0
    with open(path, "wb", buffering=1 << 20) as fh:
        for record in docs:
            line = orjson.dumps(record) + b"\n"
            fh.write(line)
            size += len(line)
    return size


def make_input(kind: str, out_dir: Path, scale_mb: float, line_mb: float) -> Path:
    """Generate the input ``kind``; returns its path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    text = Text({"books": 1, "short": 2, "bomb": 3, "line": 4}[kind])
    target = int(scale_mb * MB)
    if kind in ("books", "short"):
        doc_bytes = BOOK_BYTES if kind == "books" else SHORT_BYTES
        path = out_dir / f"{kind}.jsonl"
        count = max(1, target // (doc_bytes + 30))
        _jsonl(path, ({"id": f"{kind}-{i}", "text": text.words(doc_bytes)} for i in range(count)))
        return path
    if kind == "line":
        path = out_dir / "line.jsonl"
        _jsonl(path, [{"id": "line-0", "text": text.words(int(line_mb * MB))}])
        return path
    path = out_dir / "bomb.jsonl.zst"
    spaces = b" " * (1 << 20)
    with open(path, "wb") as raw, zstandard.ZstdCompressor(level=3).stream_writer(raw) as out:
        for i in range(max(1, round(target / BOMB_DOC))):
            head = orjson.dumps({"id": f"bomb-{i}", "text": text.words(100)})[:-2]  # without '"}'
            out.write(head + b" ")
            for _ in range((BOMB_DOC - 2 * len(head)) >> 20):
                out.write(spaces)
            out.write(b" " + text.words(100).encode() + b'"}\n')
    return path


def expanded_size(path: Path) -> int:
    """Uncompressed bytes of an input."""
    if path.suffix != ".zst":
        return path.stat().st_size
    from workflow_scripts.core.fsio import open_binary

    with open_binary(path) as f:
        return sum(len(chunk) for chunk in iter(lambda: f.read(1 << 20), b""))


def train_model(out_dir: Path) -> Path:
    """A SentencePiece model trained on 4 MB of the benchmark's prose (as the workflow trains one)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    text = Text(9)
    corpus = out_dir / "corpus.jsonl"
    _jsonl(corpus, ({"text": text.words(2000)} for _ in range(2000)))
    prefix = out_dir / "spm"
    args = ["--model-prefix", prefix, "--vocab-size", 8000, "--max-sentences", 50_000, corpus]
    harness.run_child(harness.cli("train-tokenizer", *args), cwd=harness.ROOT)
    return prefix.with_suffix(".model")


# ---------------------------------------------------------------- stages


def run_stages(raw: Path, work: Path, model: Path, threads: int, partitions: int) -> dict[str, Any]:
    """Run every stage on ``raw``; returns the peak RSS (MiB) and seconds of each (several jobs of a stage:
    the largest peak, the sum of seconds), and counts."""
    rss: dict[str, float] = {}
    wall: dict[str, float] = {}

    def stage(name: str, **options: Any) -> None:
        args = [a for k, v in options.items() for a in (f"--{k.replace('_', '-')}", *_listed(v))]
        m = harness.run_isolated(harness.cli(name, *args), cwd=harness.ROOT)
        rss[name] = max(rss.get(name, 0.0), round(m.rss_mib, 1))
        wall[name] = round(wall.get(name, 0.0) + m.wall, 2)
        if name not in GLOBAL:
            print(f"  {name:<17} {m.rss_mib:7.0f} MiB  {m.wall:7.1f} s", flush=True)

    lang, domain, subdomain = GROUP
    shards_dir = work / "shards"
    stage("ingest", input=raw, output_dir=shards_dir, lang=lang, domain=domain, subdomain=subdomain)
    ingest = orjson.loads((shards_dir / "stats.json").read_bytes())
    shards = [shards_dir / s["name"] for s in ingest["shards"]]
    stems = [s.name.split(".")[0] for s in shards]
    sigs = [work / "sig" / f"{stem}.sig" for stem in stems]
    for shard, sig in zip(shards, sigs, strict=True):
        stage("dedup-signatures", input=shard, output=sig)
    sig_list = work / "signatures.txt"
    sig_list.write_text("".join(f"{s}\n" for s in sigs))
    (work / "pairs").mkdir(parents=True, exist_ok=True)
    pairs = []
    for part in range(partitions):
        common = {"signatures": f"@{sig_list}", "partition": part, "partitions": partitions}
        pairs.append(work / "pairs" / f"exact_{part}.pairs")
        stage("dedup-exact", **common, output=pairs[-1])
        for group in range(BAND_GROUPS):
            pairs.append(work / "pairs" / f"bands_{group}_{part}.pairs")
            stage("dedup-bands", **common, band_group=group, band_groups=BAND_GROUPS, output=pairs[-1])
    for name in GLOBAL:
        print(
            f"  {name:<17} {rss[name]:7.0f} MiB  {wall[name]:7.1f} s (largest job; {partitions} partitions)"
        )
    assign = work / "assign"
    stage("dedup-cluster", signatures=f"@{sig_list}", pairs=pairs, assign_dir=assign,
          clusters=work / "clusters.tsv", summary=work / "summary.json")  # fmt: skip
    kept, docs_out = [], 0
    for shard, stem in zip(shards, stems, strict=True):
        out, stats = work / "dedup" / shard.name, work / "dedup" / f"{stem}.stats.json"
        stage("dedup-filter", input=shard, assign=assign / f"{stem}.assign.json", output=out,
              removed=work / "dedup" / "removed" / shard.name, stats=stats)  # fmt: skip
        kept.append(out)
        docs_out += orjson.loads(stats.read_bytes())["docs_out"]
        shard.unlink()  # the kept copy is enough from here on
    tokens = 0
    for shard, stem in zip(kept, stems, strict=True):
        prefix = work / "tok" / stem
        stage("tokenize", input=shard, output_prefix=prefix, tokenizer_model=model, threads=threads)
        tokens += orjson.loads(Path(f"{prefix}_text_document.stats.json").read_bytes())["tokens"]
        shard.unlink()
    return {
        "peak_rss_mib": rss,
        "wall_s": wall,
        "shards": len(shards),
        "partitions": partitions,
        "docs_in": ingest["docs_in"],
        "docs_ingested": ingest["docs_out"],
        "docs_kept": docs_out,
        "tokens": tokens,
    }


def _listed(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list) else [value]


# ---------------------------------------------------------------- report


def summarize(results: dict[str, dict[str, Any]], scales: list[str]) -> dict[str, Any]:
    """Per input and stage: the largest peak RSS, and its growth from the smallest to the largest scale."""
    worst, growth = 0.0, {}
    for kind in INPUTS:
        runs = [results[s][kind] for s in scales if kind in results[s]]
        if not runs:
            continue
        for name in GOAL_STAGES:
            figures = [r["peak_rss_mib"][name] for r in runs]
            worst = max(worst, *figures)
            if len(figures) > 1:
                growth[f"{kind} {name}"] = round(figures[-1] / figures[0] - 1, 3)
    flat = all(g <= FLAT for g in growth.values())
    return {
        "largest_peak_rss_mib": worst,
        "under_goal": worst < GOAL_MIB,
        "growth_smallest_to_largest_scale": growth,
        "flat": flat if growth else None,
    }


def print_table(results: dict[str, dict[str, Any]], scales: list[str]) -> None:
    goal = ", ".join(n.removeprefix("dedup-") for n in GOAL_STAGES)
    print(f"\npeak RSS (MiB) per stage (several jobs: the largest); goal < {GOAL_MIB} MiB for {goal}")
    print(f"{'input':<7}{'scale':>8}  " + "".join(f"{n.removeprefix('dedup-'):>12}" for n in STAGES))
    for kind in INPUTS:
        for scale in scales:
            if kind in results[scale]:
                rss = results[scale][kind]["peak_rss_mib"]
                print(f"{kind:<7}{scale:>8}  " + "".join(f"{rss[n]:>12.0f}" for n in STAGES))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--scale-mb",
        type=float,
        nargs="+",
        default=[100.0],
        help="input sizes, MB (default 100; 100 1000 shows flatness)",
    )
    parser.add_argument("--inputs", nargs="+", choices=INPUTS, default=list(INPUTS), help="inputs to run")
    parser.add_argument("--line-mb", type=float, default=200.0, help="the one line of 'line' (default 200)")
    parser.add_argument("--threads", type=int, default=2, help="tokenize threads (default 2)")
    parser.add_argument("--keep", action="store_true", help="keep bench/_work/memory")
    args = parser.parse_args(argv)
    shutil.rmtree(WORK, ignore_errors=True)
    results: dict[str, dict[str, Any]] = {}
    scales = [f"{s:g}MB" for s in sorted(args.scale_mb)]
    try:
        model = train_model(WORK / "tokenizer")
        for scale_mb, scale in zip(sorted(args.scale_mb), scales, strict=True):
            results[scale] = {}
            for kind in args.inputs:
                work = WORK / scale / kind
                start = time.perf_counter()
                raw = make_input(kind, work / "raw", scale_mb, args.line_mb)
                on_disk, size = raw.stat().st_size, expanded_size(raw)
                print(
                    f"{kind} at {scale}: {size / MB:.0f} MB ({on_disk / MB:.3f} MB on disk, expands"
                    f" {size / on_disk:,.0f}x), generated in {time.perf_counter() - start:.0f} s",
                    flush=True,
                )
                partitions = max(1, math.ceil(size / MB / PARTITION_MB))
                result = run_stages(raw, work, model, args.threads, partitions)
                results[scale][kind] = {
                    "input_mb": round(size / MB, 1),
                    "on_disk_mb": round(on_disk / MB, 3),
                    **result,
                }
                if not args.keep:
                    shutil.rmtree(work)
        print_table(results, scales)
        summary = summarize(results, scales)
        print(
            f"largest peak RSS {summary['largest_peak_rss_mib']:.0f} MiB: goal < {GOAL_MIB} MiB "
            f"{'met' if summary['under_goal'] else 'NOT met'}"
        )
        if summary["flat"] is not None:
            growth = summary["growth_smallest_to_largest_scale"]
            over = ", ".join(f"{k} {g:+.0%}" for k, g in growth.items() if g > FLAT) or "none"
            print(
                f"growth {scales[0]} -> {scales[-1]}: at most {max(growth.values()):+.0%}; goal <= "
                f"{FLAT:.0%} {'met' if summary['flat'] else 'NOT met'} (above it: {over})"
            )
        harness.write_results(
            "memory",
            {
                "args": vars(args),
                "goal_mib": GOAL_MIB,
                "flat_goal": FLAT,
                "summary": summary,
                "results": results,
            },
        )
    finally:
        if not args.keep:
            shutil.rmtree(WORK, ignore_errors=True)


if __name__ == "__main__":
    main()
