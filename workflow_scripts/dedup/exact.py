"""Dedup step 2a: exact duplicates (same normalized text in the same scope), by sorting 128-bit hashes.

One job per hash-range partition. Each run of equal hashes gives the star pairs (earliest document, other):
the others are the exact duplicates. With ``--no-exact`` in the settings the pair file is empty.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

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


def exact_pairs(sigs: SignatureSet, part: int = 0, parts: int = 1) -> np.ndarray:
    """Star pairs of the exact-duplicate groups whose hash falls in partition ``part``."""
    if not sigs.params.exact:
        return np.zeros((0, 2), dtype=np.uint64)
    lo, hi = hash_range(part, parts)
    high, low, keys = [], [], []
    for s, store in enumerate(sigs.stores):
        hashes = store["exact_sorted"]
        sl = slice_range(hashes[0], lo, hi)
        high.append(hashes[0][sl].copy())  # copies: the store's map may then be released
        low.append(hashes[1][sl].copy())
        keys.append(make_keys(s, store["exact_row"][sl]))
    k, h, lw = np.concatenate(keys), np.concatenate(high), np.concatenate(low)
    order = np.lexsort((k, lw, h))
    return run_pairs(k[order], run_starts(h[order], lw[order]), cap=1)


def write_exact(
    signatures: Sequence[str | os.PathLike[str]],
    output: str | os.PathLike[str],
    part: int = 0,
    parts: int = 1,
) -> int:
    """Write the exact pairs of one partition to a pair file; return their number."""
    sigs = SignatureSet(signatures)
    pairs = exact_pairs(sigs, part, parts)
    write_pairs(
        output,
        pairs,
        {
            "source": "exact",
            "digest": sigs.digest,
            "partition": [part, parts],
            "pairs": len(pairs),
        },
    )
    return len(pairs)


def main(argv: list[str] | None = None) -> None:
    parser = pair_job_parser(__doc__.splitlines()[0])
    args = parser.parse_args(argv)
    n = write_exact(args.signatures, args.output, args.partition, args.partitions)
    print(f"dedup exact: {n} exact-duplicate pairs -> {args.output}")
