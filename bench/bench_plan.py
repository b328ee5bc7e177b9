"""Benchmark: ``snakepack plan`` over many tokenized sources: wall time, peak memory, the plan's file sizes.

For each N, N small tokenized sources (a few documents each, in bench_scale's 12 groups) are written once
under bench/_work/plan/N with a signature like the count step's; then ``snakepack plan`` runs on them in a
child process with config/sample.yaml's training, datapacks and mixtures (``--tokens`` scales the main
phase and ``--pack-iters`` the packs, so that they read more of the sources). ``--profile`` prints the
child's top functions (cProfile);
``--code DIR`` runs another checkout's ``workflow_scripts`` (the plan before a change: ``git archive``).

Goal: 100,000 sources <= 10 s and <= 2 GB peak memory on 2 cores.

    .venv/bin/python bench/bench_plan.py --sources 10000 100000
    .venv/bin/python bench/bench_plan.py --sources 100000 --profile
    git archive HEAD workflow_scripts | tar -x -C /tmp/before
    .venv/bin/python bench/bench_plan.py --sources 10000 100000 --code /tmp/before
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

import harness
import numpy as np
import orjson
import yaml

from workflow_scripts.core.indexed_dataset import IndexedDatasetBuilder

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
DOCS = 3  # documents per source
TOKENS_PER_DOC = 400


def make_sources(root: Path, n: int) -> Path:
    """N tokenized sources and their signature under ``root`` (made once); the signature's path."""
    signature = root / "signature.json"
    if signature.is_file():
        return signature
    rng = np.random.default_rng(n)
    entries = []
    for i in range(n):
        lang, domain = GROUPS[i % len(GROUPS)]
        stem = f"{lang}_{domain}_s_split_{i:06d}_text_document"
        lengths = rng.integers(TOKENS_PER_DOC // 2, TOKENS_PER_DOC * 2, size=DOCS)
        prefix = root / "tokenized" / stem
        with IndexedDatasetBuilder(prefix, np.uint16, durable=False) as builder:
            for length in lengths:
                builder.add_document(np.ones(int(length), dtype=np.uint16))
        name = f"{stem}_dc={DOCS}_sc={DOCS}_tc={int(lengths.sum())}"
        entries.append(
            {
                "prefix": str(prefix),
                "name": name,
                "source": str(prefix),
                "lang": lang,
                "domain": domain,
                "documents": DOCS,
                "tokens": int(lengths.sum()),
                "identity": {
                    "idx_sha256": f"{i:064x}",
                    "bin_bytes": int(lengths.sum()) * 2,
                    "tokenizer": None,
                },
            }
        )
    signature.write_bytes(orjson.dumps({"prefixes": sorted(entries, key=lambda e: e["name"])}))
    return signature


def plan_config(tokens: int, pack_iters: int | None) -> dict:
    """config/sample.yaml's plan settings, the main phase given ``tokens`` (and the packs ``pack_iters``)."""
    sample = yaml.safe_load((harness.ROOT / "config" / "sample.yaml").read_text())
    config = {"seed": 1, **{k: sample[k] for k in ("training", "datapacks", "mixtures")}}
    config["datapacks"]["phases"][1]["tokens"] = tokens
    if pack_iters:
        config["datapacks"]["max_iters_per_pack"] = pack_iters
    return config


def run_plan(root: Path, signature: Path, config: dict, profile: bool, code: Path) -> harness.Measured:
    out = root / "out"
    shutil.rmtree(out, ignore_errors=True)
    args = [
        *("--config-json", orjson.dumps(config).decode(), "--signature", str(signature)),
        *("--json", str(out / "plan.json"), "--csv", str(out / "plan.csv"), "--md", str(out / "plan.md")),
        *("--merged-dir", str(out / "merged"), "--specs-dir", str(out / "specs")),
    ]
    cmd = harness.cli("plan", *args)
    if profile:
        cmd = [sys.executable, "-m", "cProfile", "-s", "cumulative", "-m", "workflow_scripts", "plan", *args]
    return harness.run_child(cmd, cwd=code, sample_rss=True)


def sizes(out: Path) -> dict[str, int]:
    files = [p for p in out.rglob("*") if p.is_file()]
    specs = [p for p in files if "specs" in p.parts]
    return {
        **{p.name: p.stat().st_size for p in files if "specs" not in p.parts},
        "specs": sum(p.stat().st_size for p in specs),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sources", type=int, nargs="+", default=[10_000])
    parser.add_argument("--tokens", type=int, default=400_000, help="the main phase's tokens")
    parser.add_argument("--pack-iters", type=int, help="max_iters_per_pack (default: the sample's 30)")
    parser.add_argument("--profile", action="store_true", help="print the child's cProfile (top 40)")
    parser.add_argument("--code", type=Path, default=harness.ROOT, help="the checkout whose plan runs")
    args = parser.parse_args()
    for n in args.sources:
        root = harness.WORK / "plan" / str(n)
        os.makedirs(root, exist_ok=True)
        signature = make_sources(root, n)
        config = plan_config(args.tokens, args.pack_iters)
        run = run_plan(root, signature, config, args.profile, args.code.resolve())
        if args.profile:
            head = run.output.split("Ordered by")[-1].splitlines()[:48]
            print("\n".join(head))
        print(f"{n} sources: plan {run.wall:.2f} s, peak {run.rss_mib:.0f} MiB, files {sizes(root / 'out')}")


if __name__ == "__main__":
    main()
