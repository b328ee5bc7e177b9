"""The lists of every shard that barrier rules write, in chunks: Snakemake prepares a job in time quadratic in
the number of jobs it depends on, so no job depends on more than ``CHUNK`` others (docs/scale.md).

Three lists: the dedup signatures, the shards the tokenizer reads (the corpus) and the tokenized prefixes.
Each line comes with what a chunk holding it waits for: the batch job that makes its file (core/batches.py),
or the import of a tokenized source.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import TypeVar

from workflow_scripts.core import batches, naming

CHUNK = 1000
T = TypeVar("T")

# The rules that read a list's entries: a cluster job of another rule needs none of them.
READERS = {
    "signatures": ("list_chunk", "signatures_list"),
    "corpus": ("list_chunk", "corpus_list", "tokenized_list"),
    "tokenized": ("list_chunk", "corpus_list", "tokenized_list"),
}


def chunk_count(items: int) -> int:
    """How many chunks ``items`` entries take."""
    return -(-items // CHUNK)


def chunk_of(items: Sequence[T], chunk: int | str) -> Sequence[T]:
    """The entries of chunk number ``chunk``."""
    return items[int(chunk) * CHUNK : (int(chunk) + 1) * CHUNK]


def chunk_files(folder: str, items: int) -> list[str]:
    """The chunk files of a list of ``items`` entries that lives in ``folder`` (beside what it lists)."""
    return [f"{folder}/_lists/{i}.txt" for i in range(chunk_count(items))]


def chunk_waits(waits: Sequence[str], chunk: int | str) -> list[str]:
    """What chunk number ``chunk`` waits for, given each entry's wait: each batch job or import once."""
    return list(dict.fromkeys(chunk_of(waits, chunk)))


def needed(kind: str, cluster_rules: Collection[str] | None) -> bool:
    """Whether a job needs the entries of list ``kind``: always where Snakemake plans the run
    (``cluster_rules`` None); in a cluster job (running ``cluster_rules``) only for the rules that list
    them, since upstream gathers are done there and 100,000 shards would cost every job."""
    return cluster_rules is None or any(rule in READERS[kind] for rule in cluster_rules)


@dataclass(frozen=True)
class Lists:
    """Where a results tree's lists and the files they list are. With ``dedup`` the corpus is the dedup
    filter's folder (its batch jobs make it), else the ingested shards; ``imports`` are the names of the
    tokenized sources brought in, listed after the tokenized shards."""

    signatures: str
    corpus: str
    tokenized: str
    dedup: bool
    per_batch: int
    imports: tuple[str, ...] = ()

    @property
    def folders(self) -> dict[str, str]:
        """Each list's folder: its chunks live beside what it lists (deleting a stage's directory deletes its
        lists, docs/reruns.md)."""
        return {"signatures": self.signatures, "corpus": self.corpus, "tokenized": self.tokenized}

    def entries(self, kind: str, groups: tuple[tuple[str, ...], ...]) -> tuple[list[str], list[str]]:
        """(what each line waits for, the lines) of list ``kind``, for the ingested shard files of each group
        (a batch's manifest is repeated for each of its shards). Built once per ``groups``: every chunk asks
        for it, and a group's files are a new tuple only when its folder changed (core/versioned.py)."""
        return _entries(self, kind, groups)


@functools.cache
def _entries(lists: Lists, kind: str, groups: tuple[tuple[str, ...], ...]) -> tuple[list[str], list[str]]:
    shards = [shard for group in groups for shard in group]
    if kind == "signatures":
        signatures = [f"{lists.signatures}/{naming.shard_stem(s)}.sig" for s in shards]
        return [batches.manifest_of(lists.signatures, s, lists.per_batch) for s in shards], signatures
    corpus = [f"{lists.corpus}/{naming.shard_group(s)}/{os.path.basename(s)}" for s in shards]
    if kind == "corpus":
        if not lists.dedup:
            return corpus, corpus
        return [batches.manifest_of(lists.corpus, s, lists.per_batch) for s in shards], corpus
    names = [*map(naming.shard_stem, corpus), *lists.imports]
    prefixes = [f"{lists.tokenized}/{naming.tokenized_prefix(n)}" for n in names]
    imported = [f"{p}.stats.json" for p in prefixes[len(shards) :]]
    return [*(batches.manifest_of(lists.tokenized, s, lists.per_batch) for s in shards), *imported], prefixes
