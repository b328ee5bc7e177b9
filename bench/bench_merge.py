"""Benchmark: ``dataset_merge.merge`` against ``cat`` of the same ``.bin`` bytes into one file.

Writes N synthetic inputs (random tokens, documents of 300-3000 tokens) into a work directory, then
alternates ``cat IN1.bin ... INn.bin > out.bin``, the same ``cat`` followed by an ``fsync`` of its output,
and ``merge([IN1 ... INn], out)`` (durable: it fsyncs its files before renaming them and the directory
after) ``--repeats`` times and keeps the best time of each. All read from a warm page cache; dirty pages
are flushed between runs, outside the timings. MB = 10^6 bytes of ``.bin`` data. Goal: merge throughput
>= 0.8 x cat with fsync (the same durability); the fsync cost is cat with fsync against cat without.
Figures also go to bench/results/merge.json.

    .venv/bin/python bench/bench_merge.py                # 8 x 128 MB int32, bench/_work, ~1 minute
    .venv/bin/python bench/bench_merge.py --size-mb 128  # quicker
"""

from __future__ import annotations

import argparse
import contextlib
import filecmp
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import harness
import numpy as np

from workflow_scripts.core.dataset_merge import merge
from workflow_scripts.core.indexed_dataset import bin_path, idx_path

GOAL_RATIO = 0.8


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--workdir",
        type=Path,
        default=Path(__file__).resolve().parent / "_work",
        help="files go to a fresh subdirectory here, removed at the end unless --keep",
    )
    parser.add_argument("--size-mb", type=int, default=1024, help="total .bin size of all inputs (MB)")
    parser.add_argument("--inputs", type=int, default=8, help="number of inputs")
    parser.add_argument("--dtype", choices=["int32", "uint16"], default="int32")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs of each, alternating")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    args.workdir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="bench_merge_", dir=args.workdir))
    dtype = np.dtype(args.dtype)
    rng = np.random.default_rng(args.seed)
    try:
        t0 = time.perf_counter()
        prefixes = [work / f"in{i}" for i in range(args.inputs)]
        per_input = args.size_mb * harness.MB // args.inputs
        docs = sum(harness.make_input(p, per_input, dtype, rng) for p in prefixes)
        total = sum(os.path.getsize(bin_path(p)) for p in prefixes)
        print(
            f"inputs: {args.inputs} x {per_input / 1e6:.0f} MB {dtype.name}, {docs} documents, "
            f"{total / 1e6:.0f} MB total (generated in {time.perf_counter() - t0:.1f} s)"
        )
        cat_out, merge_out = work / "cat.bin", work / "merged"
        bins = [bin_path(p) for p in prefixes]

        def run_cat() -> None:
            with open(cat_out, "wb") as f:
                subprocess.run(["cat", *bins], stdout=f, check=True)

        def run_merge() -> None:
            merge(prefixes, merge_out)

        steps = {"cat": run_cat, "cat_fsync": run_cat, "merge": run_merge}
        fsynced = {"cat": None, "cat_fsync": cat_out, "merge": None}  # merge fsyncs by itself
        times: dict[str, list[float]] = {name: [] for name in steps}
        for r, name in harness.rounds(list(steps), args.repeats):
            for stale in (cat_out, Path(bin_path(merge_out)), Path(idx_path(merge_out))):
                stale.unlink(missing_ok=True)
            seconds = harness.timed(steps[name], fsynced[name])
            times[name].append(seconds)
            harness.run_line(r, name, seconds, total)
            if name == "cat" and r == 0:
                run_merge()  # check once that both produce the same bytes
                assert filecmp.cmp(cat_out, bin_path(merge_out), shallow=False), "merge != cat"
        best = harness.best(times)
        rates = {name: total / seconds / harness.MB for name, seconds in best.items()}
        fsync_cost = harness.compare("cat with fsync", rates["cat_fsync"], "cat", rates["cat"])
        ratio = harness.compare("merge (durable)", rates["merge"], "cat with fsync", rates["cat_fsync"])
        harness.compare("merge (durable)", rates["merge"], "cat without fsync", rates["cat"])
        met = ratio >= GOAL_RATIO
        print(f"goal ratio >= {GOAL_RATIO}: {'met' if met else 'NOT met'}")
        harness.write_results(
            "merge",
            {
                "args": vars(args),
                "inputs_mb": round(total / harness.MB, 1),
                "documents": docs,
                "runs_s": {name: [round(t, 4) for t in ts] for name, ts in times.items()},
                "best_mb_s": {name: round(rate, 1) for name, rate in rates.items()},
                "ratio_merge_vs_cat_fsync": round(ratio, 3),
                "ratio_merge_vs_cat": round(rates["merge"] / rates["cat"], 3),
                "fsync_cost_ratio": round(fsync_cost, 3),
                "goal_ratio": GOAL_RATIO,
                "goal_met": met,
            },
        )
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
            with contextlib.suppress(OSError):
                args.workdir.rmdir()  # only if now empty
    return 0


if __name__ == "__main__":
    sys.exit(main())
