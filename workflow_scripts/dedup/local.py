"""MinHash near-duplicate (and exact-duplicate) removal of jsonl shards, all steps locally.

Runs the steps the workflow runs as separate jobs: signatures (per shard) -> exact pairs and band-group pairs
-> clusters -> filter (per shard) -> report, with a process pool of ``--workers``. Output directory layout:

    {output-dir}/{shard name}          kept documents, lines byte-identical to the input
    {output-dir}/removed/{shard name}  removed documents + duplicate_of, cluster, dedup_reason
    {output-dir}/clusters.tsv          id<TAB>cluster, every document of a duplicate cluster (kept ones too)
    {output-dir}/dedup_stats.json      counts in/out/removed (exact, near), totals and per shard, checked
    {output-dir}/dedup_report.json     per language/source/group, cluster sizes, examples, pairs, S-curve
    {output-dir}/_work/                intermediate files, removed at the end unless --keep-work
"""

from __future__ import annotations

import argparse
import shutil
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from workflow_scripts.core import settings
from workflow_scripts.dedup.bands import write_band_group
from workflow_scripts.dedup.cluster import write_clusters
from workflow_scripts.dedup.exact import write_exact
from workflow_scripts.dedup.filter import filter_shard
from workflow_scripts.dedup.params import DedupParams
from workflow_scripts.dedup.report import reasons, summary_line, write_report
from workflow_scripts.dedup.settings import DedupSettings
from workflow_scripts.dedup.shards import stem
from workflow_scripts.dedup.signatures import write_signatures
from workflow_scripts.dedup.text import char_tables


def _run(
    pool: ProcessPoolExecutor | None, fn: Callable[..., Any], jobs: Iterable[tuple[Any, ...]]
) -> list[Any]:
    """Run ``fn(*job)`` for every job, in the pool when there is one; results in job order."""
    jobs = list(jobs)
    if pool is None:
        return [fn(*job) for job in jobs]
    return [f.result() for f in [pool.submit(fn, *job) for job in jobs]]


def run(
    inputs: list[Path], output_dir: Path, params: DedupSettings, workers: int = 1, keep_work: bool = False
) -> dict[str, Any]:
    """Deduplicate ``inputs`` into ``output_dir``; return the statistics and the seconds of every step."""
    if len({stem(p.name) for p in inputs}) != len(inputs):
        raise ValueError("input shards must have distinct names (without .jsonl[.gz|.zst])")
    if any((output_dir / p.name).resolve() == p.resolve() for p in inputs):
        raise ValueError("--output-dir would overwrite the input shards")
    work = output_dir / "_work"
    sigs = [work / "signatures" / f"{stem(p.name)}.sig" for p in inputs]
    groups = max(1, min(workers, params.bands))
    pairs = [work / "pairs" / "exact.pairs", *(work / "pairs" / f"bands_{g}.pairs" for g in range(groups))]
    stats = [work / "stats" / f"{stem(p.name)}.json" for p in inputs]
    filter_jobs = [
        (
            p,
            work / "assign" / f"{stem(p.name)}.assign.json",
            output_dir / p.name,
            output_dir / "removed" / p.name,
            s,
        )
        for p, s in zip(inputs, stats, strict=True)
    ]
    seconds: dict[str, float] = {}
    char_tables(params.punctuation)  # built once here, inherited by the forked workers
    signing = DedupParams.resolve(params)
    pool = ProcessPoolExecutor(workers) if workers > 1 else None
    try:
        t = time.perf_counter()
        _run(pool, write_signatures, [(p, s, signing) for p, s in zip(inputs, sigs, strict=True)])
        seconds["signatures"] = time.perf_counter() - t
        t = time.perf_counter()
        _run(pool, _pairs_job, [(sigs, p, g, groups) for g, p in enumerate(pairs, start=-1)])
        seconds["pairs"] = time.perf_counter() - t
        t = time.perf_counter()
        write_clusters(sigs, pairs, work / "assign", output_dir / "clusters.tsv", work / "summary.json")
        seconds["cluster"] = time.perf_counter() - t
        t = time.perf_counter()
        _run(pool, filter_shard, filter_jobs)
        seconds["filter"] = time.perf_counter() - t
    finally:
        if pool is not None:
            pool.shutdown()
    out = write_report(
        stats, work / "summary.json", output_dir / "dedup_stats.json", output_dir / "dedup_report.json"
    )
    if not keep_work:
        shutil.rmtree(work)
    return {**out, "seconds": seconds}


def _pairs_job(sigs: list[Path], output: Path, group: int, groups: int) -> None:
    """Group -1 is the exact pass, the others band groups."""
    if group < 0:
        write_exact(sigs, output)
    else:
        write_band_group(sigs, output, group, groups)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], fromfile_prefix_chars="@")
    parser.add_argument("--input", nargs="+", required=True, type=Path, help="input shards (or @list.txt)")
    parser.add_argument("--output-dir", required=True, type=Path)
    parser.add_argument("--workers", type=int, default=1, help="processes for the per-shard and pair steps")
    parser.add_argument("--keep-work", action="store_true", help="keep {output-dir}/_work")
    settings.add_arguments(parser, DedupSettings, "dedup settings")
    args = parser.parse_args(argv)
    params = settings.from_args(DedupSettings, args).resolved()
    s = run(args.input, args.output_dir, params, args.workers, args.keep_work)
    steps = ", ".join(f"{k} {v:.1f}s" for k, v in s["seconds"].items())
    counts = f"{summary_line(s)} ({reasons(params)['exact']})"
    print(f"dedup: {counts} ({params.bands}x{params.rows} LSH; {steps}) -> {args.output_dir}")
