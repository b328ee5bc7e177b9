"""What the workflow's input functions read from files and folders, computed once per version of each.

Snakemake evaluates an input function for every job that uses it, and again after each checkpoint: at
100,000 shards, the 100 chunks of a list and the 250 batch jobs of a stage all ask for the same shard
folders, so listing or parsing them each time grows with the square of the shards. A result is kept for as
long as its file or folder keeps its modification time.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

T = TypeVar("T")


def per_version(path: str, read: Callable[..., T], *args: Hashable) -> T:
    """``read(*args)``, computed once per version (modification time) of ``path``; the result is shared
    between callers, so treat it as read-only."""
    return _call(path, os.stat(path).st_mtime_ns, read, args)


@functools.cache
def _call(path: str, version: int, read: Callable[..., Any], args: tuple[Hashable, ...]) -> Any:
    return read(*args)
