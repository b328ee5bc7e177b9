"""The lists of every shard that barrier rules write, in chunks: Snakemake prepares a job in time quadratic in
the number of jobs it depends on, so no job depends on more than ``CHUNK`` others (docs/scale.md)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

CHUNK = 1000
T = TypeVar("T")


def chunk_count(items: int) -> int:
    """How many chunks ``items`` entries take."""
    return -(-items // CHUNK)


def chunk_of(items: Sequence[T], chunk: int | str) -> Sequence[T]:
    """The entries of chunk number ``chunk``."""
    return items[int(chunk) * CHUNK : (int(chunk) + 1) * CHUNK]
