"""Benchmark the ingest stage against a plain read + orjson.loads baseline on the same generated jsonl.

    .venv/bin/python bench/bench_ingest.py [--size-mb 250] [--files 4] [--compress zst] [--keep]

Generates (deterministically) multilingual-looking jsonl in bench/_work, times the baseline in-process and
the ingest CLI as a subprocess (one process, one core), prints MB/s of both, their ratio, the goal and the
ingest process's peak RSS, and writes them to bench/results/ingest.json. bench/_work/ingest is removed at
the end unless --keep.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import shutil
import time
import unicodedata
from pathlib import Path

import harness
import orjson
from harness import MB

WORK = harness.WORK / "ingest"
GOAL_MB_S = 80.0

# Letters per script: (alphabet, join words with spaces?). Latin includes accents, some docs are made NFD.
SCRIPTS = {
    "en": ("abcdefghijklmnoprstuvwy", True),
    "fr": ("abcdeéèfghilmnopqrstuvàçê", True),
    "de": ("abcdefghiklmnoprstuwzäöüß", True),
    "ru": ("абвгдежзиклмнопрстуфхцчшыэюя", True),
    "el": ("αβγδεζηθικλμνξοπρστυφχψω", True),
    "ar": ("ابتثجحخدذرزسشصضطظعغفقكلمنهوي", True),
    "zh": ("的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年", False),
}
PARAGRAPHS_PER_SCRIPT = 400
NFD_SHARE = 0.02
BAD_EVERY = 5000
NAME_REGEX = r"^(?P<lang>[a-z]+)_(?P<domain>[a-z]+)_(?P<subdomain>[a-z]+)_part-"


def _paragraph(rng: random.Random, letters: str, spaced: bool) -> str:
    sentences = []
    for _ in range(rng.randint(3, 8)):
        words = ["".join(rng.choices(letters, k=rng.randint(1 if not spaced else 2, 9))) for _ in range(12)]
        sentence = (" " if spaced else "").join(words[: rng.randint(5, 12)])
        sentences.append(sentence[0].upper() + sentence[1:] + rng.choice(".!?"))
    return " ".join(sentences)


def generate(out_dir: Path, size_mb: float, files: int, seed: int = 0) -> list[Path]:
    """Write ``files`` jsonl files of about ``size_mb`` MB in all; deterministic for a seed."""
    rng = random.Random(seed)
    pools = {
        lang: [_paragraph(rng, letters, spaced) for _ in range(PARAGRAPHS_PER_SCRIPT)]
        for lang, (letters, spaced) in SCRIPTS.items()
    }
    langs = list(pools)
    target = size_mb * MB / files
    paths, doc = [], 0
    out_dir.mkdir(parents=True, exist_ok=True)
    for part in range(files):
        path = out_dir / f"xx_web_bench_part-{part:03d}.jsonl"
        written = 0
        with open(path, "wb", buffering=1 << 20) as fh:
            while written < target:
                doc += 1
                lang = rng.choice(langs)
                text = "\n\n".join(rng.choices(pools[lang], k=rng.randint(3, 8)))
                if rng.random() < NFD_SHARE:
                    text = unicodedata.normalize("NFD", text)
                record = {"id": f"bench-{doc:09d}", "text": text, "url": f"https://example.org/{lang}/{doc}"}
                line = orjson.dumps(record) + b"\n" if doc % BAD_EVERY else b'{"id": "cut", "text": "cut of\n'
                fh.write(line)
                written += len(line)
        paths.append(path)
    return paths


def baseline(paths: list[Path]) -> float:
    """Seconds to read every line and orjson.loads it (malformed lines are counted, not parsed)."""
    start = time.perf_counter()
    for path in paths:
        with open(path, "rb", buffering=1 << 20) as fh:
            for line in fh:
                with contextlib.suppress(orjson.JSONDecodeError):
                    orjson.loads(line)
    return time.perf_counter() - start


def run_ingest(paths: list[Path], out_dir: Path, shard_mb: int, compress: str | None) -> harness.Measured:
    """Wall seconds, CPU seconds (user + sys) and peak RSS of the ingest CLI on ``paths``."""
    args = ["--input", *paths, "--output-dir", out_dir, "--name-regex", NAME_REGEX]
    args += ["--shard-size", shard_mb * MB]
    args += ["--compress"] if compress else []
    return harness.run_child(harness.cli("ingest", *args), capture=False, cwd=harness.ROOT)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=float, default=250.0, help="total generated jsonl (default 250)")
    parser.add_argument("--files", type=int, default=4, help="number of input files (default 4)")
    parser.add_argument("--shard-mb", type=int, default=64, help="target shard size (default 64 MB)")
    parser.add_argument("--compress", choices=["zst"], help="compress the output shards")
    parser.add_argument("--keep", action="store_true", help="keep bench/_work/ingest")
    args = parser.parse_args(argv)
    try:
        start = time.perf_counter()
        paths = generate(WORK / "raw", args.size_mb, args.files)
        size, gen_s = sum(p.stat().st_size for p in paths) / MB, time.perf_counter() - start
        print(f"generated {size:.1f} MB of jsonl in {len(paths)} files in {gen_s:.1f}s", flush=True)
        base_s = baseline(paths)
        ingest = run_ingest(paths, WORK / "out", args.shard_mb, args.compress)
        stats = orjson.loads((WORK / "out" / "stats.json").read_bytes())
        ours, base = size / ingest.wall, size / base_s
        ratio = harness.compare("ingest CLI end to end", ours, "read + orjson.loads", base)
        print(f"ingest CLI {ingest.wall:.2f}s wall, {size / ingest.cpu:.1f} MB/CPU-s; baseline {base_s:.2f}s")
        met = ours >= GOAL_MB_S
        print(f"goal >= {GOAL_MB_S:.0f} MB/s per core: {'met' if met else 'NOT met'}")
        rejected = sum(stats["rejected"].values())
        print(f"ingest: {stats['docs_in']} docs in, {stats['docs_out']} out, {rejected} rejected, ", end="")
        print(f"{len(stats['shards'])} shards; ingest peak RSS {ingest.rss_mib:.0f} MiB")
        harness.write_results(
            "ingest",
            {
                "args": vars(args),
                "input_mb": round(size, 1),
                "baseline": {"seconds": round(base_s, 3), "mb_s": round(base, 1)},
                "ingest": {
                    "wall_s": round(ingest.wall, 3),
                    "cpu_s": round(ingest.cpu, 3),
                    "mb_s": round(ours, 1),
                    "mb_per_cpu_s": round(size / ingest.cpu, 1),
                    "peak_rss_mib": round(ingest.rss_mib, 1),
                },
                "ratio_ingest_vs_baseline": round(ratio, 3),
                "goal_mb_s": GOAL_MB_S,
                "goal_met": met,
                "docs": {"in": stats["docs_in"], "out": stats["docs_out"], "rejected": rejected},
                "shards": len(stats["shards"]),
            },
        )
    finally:
        if not args.keep:
            shutil.rmtree(WORK, ignore_errors=True)


if __name__ == "__main__":
    main()
