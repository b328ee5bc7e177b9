"""Pairs of document keys: found as equal runs in sorted hash arrays, stored in pair files."""

from __future__ import annotations

import argparse
import os
from typing import Any

import numpy as np

from workflow_scripts.core.settings import schema_entry
from workflow_scripts.dedup.store import Store, write_store

U64 = np.uint64
MAX_HASH = (1 << 64) - 1


def hash_range(part: int, parts: int) -> tuple[int, int]:
    """Inclusive range of 64-bit hash values of partition ``part`` of ``parts``."""
    if not 0 <= part < parts:
        raise ValueError(f"partition {part} not in [0, {parts})")
    size = (MAX_HASH + 1) // parts
    return part * size, MAX_HASH if part == parts - 1 else (part + 1) * size - 1


def slice_range(sorted_values: np.ndarray, lo: int, hi: int) -> slice:
    """The slice of an ascending uint64 array with values in [lo, hi] (binary search: reads few pages)."""
    a = np.searchsorted(sorted_values, U64(lo), side="left")
    b = np.searchsorted(sorted_values, U64(hi), side="right")
    return slice(int(a), int(b))


def run_starts(*columns: np.ndarray) -> np.ndarray:
    """Start index of every run of equal rows in sorted ``columns``, followed by the total length."""
    n = columns[0].size
    change = np.zeros(n, dtype=bool)
    change[:1] = True
    for col in columns:
        change[1:] |= col[1:] != col[:-1]
    return np.append(np.flatnonzero(change), n)


def run_pairs(keys: np.ndarray, starts: np.ndarray, cap: int) -> np.ndarray:
    """Pairs (a, b), a < b, within the runs of ``keys`` (ascending inside each run), shape (pairs, 2) uint64.

    All pairs of a run of up to ``cap`` documents; the star (first, other) of a larger run.
    """
    sizes = np.diff(starts)
    run = np.repeat(np.arange(sizes.size), sizes)
    end = starts[1:][run]
    pos = np.arange(keys.size)
    first = starts[:-1][run]
    big = sizes[run] > cap
    out = [np.stack([keys[first[big & (pos > first)]], keys[big & (pos > first)]], axis=1)]
    small = np.flatnonzero(~big & (sizes[run] > 1))
    for d in range(1, int(sizes[sizes <= cap].max(initial=1))):
        small = small[small + d < end[small]]
        out.append(np.stack([keys[small], keys[small + d]], axis=1))
    return np.concatenate(out).astype(U64)


def sort_pairs(pairs: np.ndarray) -> np.ndarray:
    """Pairs in ascending (a, b) order."""
    return pairs[np.lexsort((pairs[:, 1], pairs[:, 0]))] if len(pairs) else pairs.reshape(0, 2)


def write_pairs(path: str | os.PathLike[str], pairs: np.ndarray, meta: dict[str, Any]) -> None:
    """Write a pair file: the sorted (pairs, 2) uint64 key array and ``meta``."""
    with write_store(path, {"kind": "pairs", **meta}) as store:
        store.add("pairs", sort_pairs(pairs.astype(U64).reshape(-1, 2)))


def read_pairs(path: str | os.PathLike[str]) -> tuple[np.ndarray, dict[str, Any]]:
    """The (pairs, 2) key array of a pair file (memory-mapped) and its metadata."""
    store = Store(path)
    if store.meta.get("kind") != "pairs":
        raise ValueError(f"{path}: not a pair file")
    return store["pairs"], store.meta


def pair_job_parser(description: str) -> argparse.ArgumentParser:
    """The options every pair-finding job shares: the signature files, its hash partition, the output."""
    parser = argparse.ArgumentParser(description=description, fromfile_prefix_chars="@")
    parser.add_argument("--signatures", nargs="+", required=True, help="all signature files (or @list.txt)")
    parser.add_argument("--partition", type=int, default=0, help="hash-range partition of this job")
    partitions = schema_entry("dedup", "partitions")["default"]
    parser.add_argument("--partitions", type=int, default=partitions, help="number of hash-range partitions")
    parser.add_argument("--output", required=True, help="pair file to write")
    return parser
