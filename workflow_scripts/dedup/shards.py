"""Shard naming and reading shared by the dedup steps.

A shard is a jsonl file (optionally .gz/.zst) named ``{lang}_{domain}_{subdomain}_split_{NNNN}.jsonl``; its
documents are its non-blank lines, numbered from 0 in file order (the *row*). Across steps a document is the
key ``shard_index << 32 | row`` where shard_index is the position of the shard's file name in the sorted list
of all shard names of the run, so the smallest key is the earliest document by (shard name, row).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator

import xxhash

from workflow_scripts.core import naming
from workflow_scripts.core.fsio import open_binary

ROW_BITS = 32
stem = naming.shard_stem
group = naming.shard_group


def iter_lines(path: str | os.PathLike[str]) -> Iterator[bytes]:
    """The documents (non-blank lines, newline kept) of a shard, in order.

    Once handed out, a line is not held here (builtin iterators, no local variable): the caller can let go
    of it as soon as it is parsed, before the next one is read, however long it is."""
    with open_binary(path) as fh:
        yield from map(_with_newline, itertools.filterfalse(bytes.isspace, fh))


def _with_newline(line: bytes) -> bytes:
    return line if line.endswith(b"\n") else line + b"\n"


def names_digest(names: list[str]) -> str:
    """Fingerprint of the sorted shard list: every step checks it to agree on shard indices."""
    return xxhash.xxh3_64_hexdigest("\n".join(sorted(names)).encode())
