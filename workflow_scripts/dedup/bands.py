"""Dedup step 2b: near-duplicate candidate pairs of a band group, by sorting band hashes of all shards.

A job takes the bands ``j`` with ``j % groups == group`` and, optionally, one hash-range partition of them
(each shard's band hashes are stored sorted, so a partition is read by binary search). Per band the hashes of
all shards are concatenated and stably sorted; runs of equal hashes are LSH buckets. Inside a bucket, exact
duplicates of an earlier document are dropped (the exact pass links them), then every pair of a bucket of up
to ``bucket_cap`` documents is a candidate (larger buckets give the star (first, other)). A pair is kept only
by the lowest band where the two documents collide, so no pair is produced, or verified, twice across all
jobs. Candidates are verified by exact Jaccard of their shingle sets (>= threshold, same scope) unless
``verify=none``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from workflow_scripts.dedup.pairs import (
    hash_range,
    pair_job_parser,
    run_pairs,
    run_starts,
    slice_range,
    write_pairs,
)
from workflow_scripts.dedup.sigset import SignatureSet, make_keys
from workflow_scripts.dedup.verify import jaccard_pairs

HIST_BINS = 20


def _multi(h: np.ndarray, *others: np.ndarray) -> tuple[np.ndarray, ...]:
    """Keep only the elements of runs (of equal ``h``) with at least two members."""
    starts = run_starts(h)
    sizes = np.diff(starts)
    keep = np.repeat(sizes > 1, sizes)
    return tuple(a[keep] for a in (h, *others))


def band_candidates(sigs: SignatureSet, band: int, part: int = 0, parts: int = 1) -> np.ndarray:
    """Candidate pairs (a, b), a < b, first found in ``band``, within hash partition ``part``."""
    lo, hi = hash_range(part, parts)
    hashes, keys = [], []
    for s, store in enumerate(sigs.stores):
        sorted_band = store["band_sorted"][band]
        sl = slice_range(sorted_band, lo, hi)
        hashes.append(sorted_band[sl].copy())  # a copy: the store's map may then be released
        keys.append(make_keys(s, store["band_row"][band][sl]))
    h, k = np.concatenate(hashes), np.concatenate(keys)
    order = np.argsort(h, kind="stable")  # shards in order, rows ascending: ties stay in key order
    h, k = _multi(h[order], k[order])
    if sigs.params.exact and h.size:
        exact = sigs.gather("exact", k)
        order = np.lexsort((k, exact[:, 1], exact[:, 0], h))
        first = run_starts(h[order], exact[order, 0], exact[order, 1])[:-1]
        kept = np.sort(order[first])  # (h, k) order again
        h, k = _multi(h[kept], k[kept])
    pairs = run_pairs(k, run_starts(h), sigs.params.bucket_cap)
    if len(pairs):
        same = sigs.gather("bands", pairs[:, 0]) == sigs.gather("bands", pairs[:, 1])
        pairs = pairs[np.argmax(same, axis=1) == band]
    return pairs


def verify(sigs: SignatureSet, pairs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(accepted mask, Jaccard) of candidate pairs: same scope and Jaccard >= threshold."""
    if sigs.params.verify == "none" or not len(pairs):
        return np.ones(len(pairs), dtype=bool), np.full(len(pairs), np.nan)
    docs, inverse = np.unique(pairs, return_inverse=True)
    values, off = sigs.gather_csr("shingles", "shingle_off", docs)
    inverse = inverse.reshape(pairs.shape)
    sim = jaccard_pairs(values, off, inverse[:, 0], inverse[:, 1])
    scope = sigs.gather("scope", docs)
    accepted = (sim >= sigs.params.threshold) & (scope[inverse[:, 0]] == scope[inverse[:, 1]])
    return accepted, sim


def group_pairs(
    sigs: SignatureSet, group: int, groups: int, part: int = 0, parts: int = 1
) -> tuple[np.ndarray, dict[str, Any]]:
    """Verified pairs of a band group and partition, and statistics for the report."""
    if not 0 <= group < groups:
        raise ValueError(f"group {group} not in [0, {groups})")
    bands = [j for j in range(sigs.params.bands) if j % groups == group]
    found = [band_candidates(sigs, j, part, parts) for j in bands]
    pairs = np.concatenate([*found, np.zeros((0, 2), dtype=np.uint64)])
    accepted, sim = verify(sigs, pairs)
    hist = np.histogram(sim[~np.isnan(sim)], bins=HIST_BINS, range=(0, 1))[0]
    stats = {
        "bands": bands,
        "candidates_per_band": [len(f) for f in found],
        "candidates": len(pairs),
        "verified": int(accepted.sum()),
        "rejected": int((~accepted).sum()),
        "candidate_jaccard_histogram": {f"{i / HIST_BINS:.2f}": int(c) for i, c in enumerate(hist)},
    }
    return pairs[accepted], stats


def write_band_group(
    signatures: Sequence[str | os.PathLike[str]],
    output: str | os.PathLike[str],
    group: int,
    groups: int,
    part: int = 0,
    parts: int = 1,
) -> dict[str, Any]:
    """Write the verified pairs of one band group and partition to a pair file; return the statistics."""
    sigs = SignatureSet(signatures)
    pairs, stats = group_pairs(sigs, group, groups, part, parts)
    write_pairs(
        output,
        pairs,
        {
            "source": "bands",
            "digest": sigs.digest,
            "group": [group, groups],
            "partition": [part, parts],
            **stats,
        },
    )
    return stats


def main(argv: list[str] | None = None) -> None:
    parser = pair_job_parser(__doc__.splitlines()[0])
    parser.add_argument("--band-group", type=int, required=True, help="this job's bands: j %% band-groups")
    parser.add_argument("--band-groups", type=int, required=True, help="number of band groups (<= bands)")
    args = parser.parse_args(argv)
    stats = write_band_group(
        args.signatures, args.output, args.band_group, args.band_groups, args.partition, args.partitions
    )
    print(
        f"dedup bands {stats['bands']}: {stats['candidates']} candidates, {stats['verified']} verified "
        f"-> {args.output}"
    )
