"""The lineage hash index: every tokenized source's content hashes (``tokens.ledger``), bucketed and sorted,
so that ``snakepack lineage --hash/--text`` reads a few pages of one bucket instead of every ledger.

Usage::

    snakepack lineage-index --signature results/tokenized/signature.json --output results/tokenized/hash_index

(the workflow's ``snakemake lineage_index``). The index is a folder:

- ``sources.json``: ``bits`` (B), ``counts`` (the entries of each bucket) and ``sources``, the signature's
  sources in its order, each with its ``name`` (as the plan names it), ``prefix``, ``ledger`` (the file
  read) and that file's ``bytes`` and ``mtime_ns`` when it was read;
- ``bucket_{k:04x}.npy`` for each ``k`` below ``2**B``: a (2, n) uint64 array, row 0 the hashes whose top B
  bits are ``k``, ascending, row 1 where each is, ``source << 32 | document`` (``source``: its number in
  ``sources``); equal hashes in the sources' order, then the documents'. ``np.load(..., mmap_mode="r")`` and
  a binary search read a few pages of it.

B is the least that leaves at most ``bucket_entries`` documents a bucket on average (at 2**23, 128 MB
files). Bounded memory: the ledgers are read one at a time and their entries spilled to one file a bucket
every ``buffer_entries``; each bucket is then sorted alone. The same ledgers give the same bytes.

A lookup (``find``) trusts the index for a source only while its ledger is the file the index read (same
path, size and modification time); the ledgers of the other sources (changed since, or newer than the
index) are read whole, as without an index, and each document the index names is checked against its
ledger. So a stale index is slower, never wrong; ``find`` says on standard error which sources it read.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from workflow_scripts.core import naming
from workflow_scripts.core.cli import UserError
from workflow_scripts.core.fsio import atomic_dir, dumps_json, fsync_path, read_json
from workflow_scripts.tokens.ledger import Ledger, ledger_path

SOURCES = "sources.json"
BESIDE_PLAN = ("tokenized", "hash_index")  # where lineage looks, from the plan's folder (the workflow's)
MAX_BITS = 16
DOC_BITS = 32


def bits_for(entries: int, bucket_entries: int) -> int:
    """The least B with at most ``bucket_entries`` entries a bucket on average (at most ``MAX_BITS``)."""
    return min(MAX_BITS, max(0, math.ceil(math.log2(max(entries, 1) / bucket_entries))))


class _Spill:
    """Entries (hash, where) gathered in memory, then appended to one raw file a bucket."""

    def __init__(self, folder: Path, bits: int, limit: int) -> None:
        self.folder, self.bits, self.limit = folder, bits, limit
        self.parts: list[np.ndarray] = []
        self.held = 0

    def path(self, bucket: int) -> Path:
        return self.folder / f"{bucket:04x}.raw"

    def add(self, hashes: np.ndarray, where: np.ndarray) -> None:
        self.parts.append(np.column_stack([hashes, where]))
        self.held += len(hashes)
        if self.held >= self.limit:
            self.flush()

    def flush(self) -> None:
        if not self.parts:
            return
        pairs = np.concatenate(self.parts)
        self.parts, self.held = [], 0
        buckets = pairs[:, 0] >> np.uint64(64 - self.bits) if self.bits else np.zeros(len(pairs), np.uint64)
        order = np.argsort(buckets)  # sort_bucket orders each bucket whole
        pairs, buckets = pairs[order], buckets[order]
        bounds = np.searchsorted(buckets, np.arange((1 << self.bits) + 1, dtype=np.uint64))
        for k in np.flatnonzero(np.diff(bounds)).tolist():
            with open(self.path(k), "ab") as f:
                pairs[bounds[k] : bounds[k + 1]].tofile(f)


def sort_bucket(pairs: np.ndarray) -> np.ndarray:
    """(n, 2) entries as a (2, n) table by hash, equal hashes by ``where`` (ascending)."""
    order = np.argsort(pairs[:, 0])
    hashes, where = pairs[order, 0], pairs[order, 1]
    tied = np.flatnonzero(hashes[1:] == hashes[:-1])
    if len(tied):  # runs of equal hashes are contiguous: sort each by where
        at = np.union1d(tied, tied + 1)
        where[at] = where[at][np.lexsort((where[at], hashes[at]))]
    return np.stack([hashes, where])


def build(
    signature: Sequence[dict[str, Any]],
    output: str | os.PathLike[str],
    bucket_entries: int = 1 << 23,
    buffer_entries: int = 1 << 23,
) -> dict[str, Any]:
    """Write the index of the sources ``signature`` lists (``name``, ``prefix``, ``documents``) to the folder
    ``output`` (replaced as a whole); return its ``sources.json``."""
    bits = bits_for(sum(int(s["documents"]) for s in signature), bucket_entries)
    listed = []
    with atomic_dir(output) as tmp:
        spill = _Spill(tmp, bits, buffer_entries)
        for number, source in enumerate(signature):
            ledger = Ledger.read(source["prefix"])  # an error names a prefix without one
            stat = os.stat(ledger.path)  # before the hashes: a ledger rewritten meanwhile reads as changed
            path, hashes = ledger.path, ledger.hashes
            if len(hashes) not in (0, int(source["documents"])):
                raise UserError(
                    f"{path}: {len(hashes)} hashes for {source['documents']} documents of {source['prefix']} "
                    "(the signature's count): the ledger and its .idx disagree; run the workflow again"
                )
            if len(hashes) >> DOC_BITS:
                raise UserError(f"{path}: more than 2**{DOC_BITS} documents")
            spill.add(hashes, np.uint64(number << DOC_BITS) | np.arange(len(hashes), dtype=np.uint64))
            entry = {"name": naming.source_name(source["name"]), "prefix": source["prefix"], "ledger": path}
            listed.append({**entry, "bytes": stat.st_size, "mtime_ns": stat.st_mtime_ns})
        spill.flush()
        counts = []
        for k in range(1 << bits):
            raw = spill.path(k)
            pairs = (
                np.fromfile(raw, np.uint64).reshape(-1, 2) if raw.exists() else np.empty((0, 2), np.uint64)
            )
            raw.unlink(missing_ok=True)
            table = tmp / HashIndex.bucket_name(k)
            np.save(table, sort_bucket(pairs))
            fsync_path(table)
            counts.append(len(pairs))
        meta = {"bits": bits, "counts": counts, "sources": listed}
        (tmp / SOURCES).write_bytes(dumps_json(meta))
        fsync_path(tmp / SOURCES)
    return meta


class HashIndex:
    """An index folder, read: its sources, and a hash's entries from one bucket (memory-mapped)."""

    def __init__(self, folder: Path, meta: dict[str, Any]) -> None:
        self.folder, self.bits = folder, int(meta["bits"])
        self.counts: list[int] = meta["counts"]
        self.sources: list[dict[str, Any]] = meta["sources"]

    @classmethod
    def open(cls, folder: str | os.PathLike[str]) -> HashIndex | None:
        """The index in ``folder``; None when there is none."""
        path = Path(folder)
        if not (path / SOURCES).is_file():
            return None
        return cls(path, read_json(path / SOURCES))

    @staticmethod
    def bucket_name(bucket: int) -> str:
        return f"bucket_{bucket:04x}.npy"

    def lookup(self, value: int) -> list[tuple[int, int]]:
        """The (source number, document) pairs whose hash is ``value``, in the index's order."""
        bucket = value >> (64 - self.bits) if self.bits else 0
        table = np.load(self.folder / self.bucket_name(bucket), mmap_mode="r")
        key = np.uint64(value)
        lo, hi = np.searchsorted(table[0], key, "left"), np.searchsorted(table[0], key, "right")
        where = np.asarray(table[1, lo:hi])
        sources, docs = where >> np.uint64(DOC_BITS), where & np.uint64((1 << DOC_BITS) - 1)
        return list(zip(sources.tolist(), docs.tolist(), strict=True))

    def current(self, prefixes: dict[str, str]) -> dict[str, int]:
        """Of ``prefixes`` (source name -> prefix), those the index holds as their ledgers are now: name ->
        the source's number."""
        numbers = {(s["name"], s["prefix"]): k for k, s in enumerate(self.sources)}
        held = {}
        for name, prefix in prefixes.items():
            k = numbers.get((name, prefix))
            if k is None:
                continue
            source, path = self.sources[k], ledger_path(prefix)
            if path == source["ledger"] and unchanged(path, source):
                held[name] = k
        return held


def unchanged(path: str, source: dict[str, Any]) -> bool:
    """Whether the file ``path`` has the size and modification time the index read it with."""
    try:
        stat = os.stat(path)
    except FileNotFoundError:
        return False
    return (stat.st_size, stat.st_mtime_ns) == (source["bytes"], source["mtime_ns"])


def find(
    value: int, prefixes: dict[str, str], ledger: Callable[[str], Ledger], folder: str | os.PathLike[str]
) -> dict[str, list[int]]:
    """Source name -> its documents (ascending) whose hash is ``value``, of the sources ``prefixes`` names
    (name -> prefix): from the index in ``folder`` for those it holds as they are, each checked against its
    ledger (``ledger(prefix)``); from their ledgers for the others (all of them without an index)."""
    index = HashIndex.open(folder)
    held = index.current(prefixes) if index else {}
    read = sorted(set(prefixes) - set(held))
    if index is None:
        print(
            f"no hash index in {folder}: read every source's ledger (snakemake lineage_index)",
            file=sys.stderr,
        )
    elif read:
        print(
            f"the hash index in {folder} lacks {len(read)} of the {len(prefixes)} sources as they are"
            f" (changed since it was built, or new; e.g. {read[0]}): read their ledgers"
            " (snakemake lineage_index)",
            file=sys.stderr,
        )
    found = {name: ledger(prefixes[name]).with_hash(value) for name in read}
    if index is not None and held:
        names = {k: name for name, k in held.items()}
        for number, doc in index.lookup(value):
            name = names.get(number)
            if name is not None and int(ledger(prefixes[name]).hashes[doc]) == value:
                found.setdefault(name, []).append(doc)
    return {name: sorted(docs) for name, docs in sorted(found.items()) if docs}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--signature", required=True, help="the data signature (tokenized/signature.json)")
    parser.add_argument("--output", required=True, help="the index folder to write (replaced)")
    parser.add_argument("--bucket-entries", type=int, default=1 << 23, help="entries a bucket, on average")
    args = parser.parse_args(argv)
    meta = build(read_json(args.signature)["prefixes"], args.output, args.bucket_entries)
    hashes, buckets = sum(meta["counts"]), len(meta["counts"])
    print(f"indexed {hashes} hashes of {len(meta['sources'])} sources in {buckets} buckets: {args.output}")
    return 0
