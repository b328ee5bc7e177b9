"""Benchmark: ``indexed_dataset.merge`` against ``cat`` of the same ``.bin`` bytes into one file.

Writes N synthetic inputs (random tokens, documents of 300-3000 tokens) into a work directory, then
alternates ``cat IN1.bin ... INn.bin > out.bin`` and ``merge([IN1 ... INn], out)`` ``--repeats`` times and
keeps the best time of each. Both read from a warm page cache and write through it (``--fsync`` adds an
fsync of the output to both timings); dirty pages are flushed between runs, outside the timings. MB = 10^6
bytes of ``.bin`` data. Goal: merge throughput >= 0.8 x cat.

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
from collections.abc import Callable
from pathlib import Path

import numpy as np

from workflow_scripts.core.indexed_dataset import IndexedDatasetBuilder, bin_path, idx_path, merge

DOC_BATCH = 20_000  # documents per add_documents call while generating


def make_input(prefix: Path, nbytes: int, dtype: np.dtype, rng: np.random.Generator) -> int:
    """Write a dataset of about ``nbytes`` of tokens; return its document count."""
    n_tokens = nbytes // dtype.itemsize
    lengths = rng.integers(300, 3001, n_tokens // 300 + 1)
    ends = np.cumsum(lengths)
    n_docs = int(np.searchsorted(ends, n_tokens)) + 1
    lengths = lengths[:n_docs]
    lengths[-1] -= int(ends[n_docs - 1]) - n_tokens
    high = 65_000 if dtype == np.uint16 else 250_000
    with IndexedDatasetBuilder(prefix, dtype) as b:
        for a in range(0, n_docs, DOC_BATCH):
            lens = lengths[a : a + DOC_BATCH]
            b.add_documents(rng.integers(0, high, int(lens.sum()), dtype=dtype), lens)
    return n_docs


def timed(fn: Callable[[], None], out: Path, fsync: bool) -> float:
    """Seconds taken by ``fn`` (plus an fsync of ``out`` when asked)."""
    os.sync()
    start = time.perf_counter()
    fn()
    if fsync:
        fd = os.open(out, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    return time.perf_counter() - start


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
    parser.add_argument("--fsync", action="store_true", help="include an fsync of the output in both timings")
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
        per_input = args.size_mb * 10**6 // args.inputs
        docs = sum(make_input(p, per_input, dtype, rng) for p in prefixes)
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

        best = {"cat": float("inf"), "merge": float("inf")}
        for r in range(args.repeats):
            for name, fn, out in (("cat", run_cat, cat_out), ("merge", run_merge, Path(bin_path(merge_out)))):
                for stale in (cat_out, Path(bin_path(merge_out)), Path(idx_path(merge_out))):
                    stale.unlink(missing_ok=True)
                seconds = timed(fn, out, args.fsync)
                best[name] = min(best[name], seconds)
                print(f"run {r + 1} {name:5s} {seconds:7.3f} s  {total / seconds / 1e6:8.0f} MB/s")
                if name == "cat" and r == 0:
                    run_merge()  # check once that both produce the same bytes
                    assert filecmp.cmp(cat_out, bin_path(merge_out), shallow=False), "merge != cat"
        cat_rate, merge_rate = total / best["cat"] / 1e6, total / best["merge"] / 1e6
        ratio = merge_rate / cat_rate
        print(f"best: cat {cat_rate:.0f} MB/s, merge {merge_rate:.0f} MB/s, ratio merge/cat {ratio:.2f}")
        print(f"goal ratio >= 0.8: {'met' if ratio >= 0.8 else 'NOT met'}")
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
