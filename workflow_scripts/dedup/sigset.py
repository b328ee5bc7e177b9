"""All signature stores of a run, ordered by shard name, with per-document look-ups by key."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence

import numpy as np

from workflow_scripts.dedup.settings import DedupSettings
from workflow_scripts.dedup.shards import ROW_BITS, names_digest, stem
from workflow_scripts.dedup.store import Store

U64 = np.uint64
ROW_MASK = U64((1 << ROW_BITS) - 1)


def split_keys(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(shard index, row) of document keys."""
    return (keys >> U64(ROW_BITS)).astype(np.int64), (keys & ROW_MASK).astype(np.int64)


def make_keys(shard: int, rows: np.ndarray) -> np.ndarray:
    """Document keys of ``rows`` of shard index ``shard``."""
    return (U64(shard) << U64(ROW_BITS)) | rows.astype(U64)


def _ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenation of ``arange(starts[i], starts[i] + lengths[i])`` for all i."""
    return np.repeat(starts - np.cumsum(lengths) + lengths, lengths) + np.arange(lengths.sum())


class SignatureSet:
    """The signature stores of every shard; all must have been made with the same settings."""

    def __init__(self, paths: Sequence[str | os.PathLike[str]]) -> None:
        stores = sorted((Store(p) for p in paths), key=lambda s: s.meta["shard"])
        if not stores:
            raise ValueError("no signature files given")
        names = [s.meta["shard"] for s in stores]
        if len({stem(n) for n in names}) != len(names):
            raise ValueError("two signature files of shards with the same name (without .jsonl[.gz|.zst])")
        first = stores[0].meta["params"]
        for s in stores:
            if s.meta.get("kind") != "signatures" or s.meta["params"] != first:
                raise ValueError(f"{s.path}: not a signature file made with the settings of {stores[0].path}")
        self.stores = stores
        self.names = names
        self.params = DedupSettings.from_json(first)
        self.digest = names_digest(names)

    def _by_shard(self, keys: np.ndarray) -> Iterator[tuple[Store, np.ndarray, np.ndarray]]:
        """(store, positions in ``keys``, rows) for every shard that ``keys`` touch."""
        shard, row = split_keys(keys)
        order = np.argsort(shard, kind="stable")
        for at in np.split(order, np.flatnonzero(np.diff(shard[order])) + 1):
            if at.size:
                yield self.stores[shard[at[0]]], at, row[at]

    def gather(self, name: str, keys: np.ndarray) -> np.ndarray:
        """Rows of the per-document array ``name`` for ``keys`` (any order)."""
        sample = self.stores[0][name]
        out = np.empty((keys.size, *sample.shape[1:]), dtype=sample.dtype)
        for store, at, rows in self._by_shard(keys):
            out[at] = store[name][rows]
        return out

    def gather_csr(self, values: str, offsets: str, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The CSR segments ``values[offsets[r]:offsets[r+1]]`` of ``keys``, as a CSR in ``keys`` order."""
        start = np.empty(keys.size, dtype=np.int64)
        length = np.empty(keys.size, dtype=np.int64)
        for store, at, rows in self._by_shard(keys):
            start[at] = store[offsets][rows]
            length[at] = store[offsets][rows + 1] - start[at]
        off = np.concatenate([[0], np.cumsum(length)])
        out = np.empty(off[-1], dtype=self.stores[0][values].dtype)
        for store, at, _ in self._by_shard(keys):
            out[_ranges(off[at], length[at])] = store[values][_ranges(start[at], length[at])]
        return out, off

    def ids(self, keys: np.ndarray) -> list[str]:
        """The ``id`` field of each document."""
        blob, off = self.gather_csr("ids", "id_off", keys)
        raw = blob.tobytes()
        return [raw[a:b].decode() for a, b in zip(off[:-1].tolist(), off[1:].tolist(), strict=True)]
