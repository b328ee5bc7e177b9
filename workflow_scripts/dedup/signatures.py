"""Dedup step 1, one job per shard: MinHash signatures, LSH band hashes, exact hashes and shingle sets.

MinHash follows datasketch's ``affine32`` scheme (its permutations for ``seed``, MurmurHash3 pre-mix, then
``a*h + b mod 2**32``): a document's signature equals ``datasketch.MinHash(num_perm, seed, scheme="affine32",
hashfunc=identity)`` updated with its 32-bit shingle hashes, but it is computed for many documents at once.

Output: one store (see dedup_store) with, per document, its id, scope hash, 128-bit exact hash, band hashes
and 32-bit shingle hashes (CSR, in text order; only with verification), plus every band and the exact hash
sorted with their rows, so the band/exact jobs can read a hash range of each shard without reading the rest.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import numpy as np
import orjson
import xxhash

from workflow_scripts.core import compiled, naming, settings
from workflow_scripts.core.fsio import temp_sibling
from workflow_scripts.core.progress import Progress
from workflow_scripts.dedup.params import DedupParams
from workflow_scripts.dedup.settings import DedupError, DedupSettings
from workflow_scripts.dedup.shards import iter_lines
from workflow_scripts.dedup.store import StoreWriter, write_store
from workflow_scripts.dedup.text import Shingler, exact_hashes, fmix64

if TYPE_CHECKING:
    from workflow_scripts.dedup import _shingle
else:
    _shingle = compiled.load("workflow_scripts.dedup._shingle")

U64 = np.uint64
BATCH_DOCS = 2048
BATCH_BYTES = 8 << 20  # text bytes per batch: its working memory is about 31 bytes per character
CHUNK_CHARS = 1 << 20  # a longer text is shingled in pieces of about this many characters (sign_long)
SPILL_ROWS = 1 << 17  # per-document rows read back from the spill files at once
SORT_ROWS = 1 << 18  # hashes sorted at once: a shard with more valid documents sorts them by hash ranges
MAX_RANGE_BITS = 8  # at most 256 ranges (512 files open at once)
VERSION = 1


def minhash(values: np.ndarray, off: np.ndarray, perms: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """Signatures (n, num_perm) uint32 of the CSR sets ``values[off[i]:off[i+1]]``; empty sets give 2**32-1
    (compiled: ``_shingle.minhash``)."""
    a, b = perms
    values = np.ascontiguousarray(values, dtype=np.uint32)
    sig = _shingle.minhash(values, np.ascontiguousarray(off, dtype=np.int64), a, b)
    return np.frombuffer(sig, dtype=np.uint32).reshape(off.size - 1, a.size)


def band_hashes(sig: np.ndarray, scope: np.ndarray, bands: int, rows: int) -> np.ndarray:
    """(n, bands) uint64: hash of each band's ``rows`` signature values, seeded by band index and scope."""
    values = sig[:, : bands * rows].reshape(sig.shape[0], bands, rows).astype(U64)
    h = fmix64(np.arange(1, bands + 1, dtype=U64))[None, :] ^ scope[:, None]
    for t in range(rows):
        h = fmix64(h * U64(0x9E3779B97F4A7C15) + values[:, :, t])
    return h


def scope_hash(record: dict[str, Any], scope: str) -> int:
    """64-bit hash of the document's scope key: 0 (global), its language, or its source group."""
    if scope == "global":
        return 0
    key = record["lang"] if scope == "lang" else naming.group_name(*(record[f] for f in naming.GROUP_FIELDS))
    return xxhash.xxh3_64_intdigest(f"{scope}\x1f{key}".encode())


def _batches(path: str | os.PathLike[str]) -> Iterator[list[dict[str, Any]]]:
    """Records in batches of at most ``BATCH_DOCS`` documents or about ``BATCH_BYTES`` of text (a batch
    holds at least one document), so that memory is bounded by bytes, not by the document count."""
    batch: list[dict[str, Any]] = []
    size = line_no = 0
    for line in iter_lines(path):
        line_no += 1  # noqa: SIM113 - enumerate would hold the last line while the next is read
        try:
            batch.append(orjson.loads(line))
        except orjson.JSONDecodeError as exc:
            raise DedupError(f"{path}: document {line_no}: invalid JSON ({exc})") from None
        size += len(line)
        del line  # not held while the batch is signed
        if len(batch) == BATCH_DOCS or size >= BATCH_BYTES:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def shingler(params: DedupSettings) -> Shingler:
    """The Shingler of the settings."""
    return Shingler(
        params.ngram, params.char_ngram, params.lowercase, params.nfkc, params.punctuation, params.digits
    )


def sign_batch(
    records: list[dict[str, Any]], params: DedupSettings, perms: tuple[np.ndarray, np.ndarray]
) -> dict[str, np.ndarray]:
    """Per-document arrays of a batch of records: ids, scope, exact hash, band hashes, shingle CSR."""
    ids = [str(r["id"]).encode() for r in records]
    char_docs = np.array([r.get("lang") in params.char_langs for r in records], dtype=bool)
    scope = np.array([scope_hash(r, params.scope) for r in records], dtype=U64)
    sh = shingler(params)
    units, unit_off = sh.units([r["text"] for r in records], char_docs)
    shingles, off = sh.shingles(units, unit_off, char_docs)
    values = (shingles >> U64(32)).astype(np.uint32)
    return {
        "ids": np.frombuffer(b"".join(ids), dtype=np.uint8),
        "id_len": np.array([len(i) for i in ids], dtype=np.int64),
        "scope": scope,
        "exact": exact_hashes(units, unit_off, scope),
        "bands": band_hashes(minhash(values, off, perms), scope, params.bands, params.rows),
        "set_len": np.diff(off),
        "shingles": values,
    }


def sign_long(
    record: dict[str, Any],
    params: DedupSettings,
    perms: tuple[np.ndarray, np.ndarray],
    emit: Callable[[np.ndarray], object],
) -> dict[str, np.ndarray]:
    """``sign_batch([record])``, with the shingles passed to ``emit`` in order instead of returned, in memory
    bounded by ``CHUNK_CHARS`` characters whatever the document's length.

    The text is normalized and cut into units piece by piece (Shingler.pieces: the units are those of the
    whole text); each piece's shingles start from the last n - 1 units of the one before, so that every
    shingle is made once, and the signature is the elementwise minimum over the pieces' signatures.
    """
    sh = shingler(params)
    char_doc = np.array([record.get("lang") in params.char_langs])
    n = params.char_ngram if char_doc[0] else params.ngram
    scope = scope_hash(record, params.scope)
    exact = xxhash.xxh3_128(seed=scope)
    sig = np.full((1, params.num_perm), np.iinfo(np.uint32).max, dtype=np.uint32)
    tail = np.zeros(0, dtype=U64)
    set_len = 0

    def shingle(units: np.ndarray) -> None:
        nonlocal set_len, sig
        shingles, off = sh.shingles(units, np.array([0, units.size]), char_doc)
        values = (shingles >> U64(32)).astype(np.uint32)
        sig = np.minimum(sig, minhash(values, off, perms))
        set_len += values.size
        emit(values)

    seen = 0
    for piece in sh.pieces(record["text"], bool(char_doc[0]), CHUNK_CHARS):
        units, _ = sh.units([piece], char_doc)
        del piece
        exact.update(units.tobytes())
        seen += units.size
        units = np.concatenate([tail, units])
        if units.size >= n:
            shingle(units)
            units = units[units.size - (n - 1) :]
        tail = units
    if 0 < seen < n:  # fewer units than a shingle: the whole text is its one shingle
        shingle(tail)
    ident = str(record["id"]).encode()
    digest = exact.intdigest()
    scopes = np.array([scope], dtype=U64)
    return {
        "ids": np.frombuffer(ident, dtype=np.uint8),
        "id_len": np.array([len(ident)], dtype=np.int64),
        "scope": scopes,
        "exact": np.array([[digest >> 64, digest & ((1 << 64) - 1)]], dtype=U64),
        "bands": band_hashes(sig, scopes, params.bands, params.rows),
        "set_len": np.array([set_len], dtype=np.int64),
    }


def _runs(records: list[dict[str, Any]]) -> Iterator[tuple[list[dict[str, Any]], bool]]:
    """The records in order, as runs of short ones and single long ones (text over ``CHUNK_CHARS``)."""
    run: list[dict[str, Any]] = []
    for record in records:
        text = record.get("text")
        if isinstance(text, str) and len(text) > CHUNK_CHARS:
            if run:
                yield run, False
                run = []
            yield [record], True
        else:
            run.append(record)
    if run:
        yield run, False


class _Spill:
    """Per-document arrays of a shard, appended to files (in ``directory``) as batches come and read back by
    row ranges, so that a shard's memory does not grow with its number of documents."""

    def __init__(self, directory: Path) -> None:
        self._dir = directory
        self._open: dict[str, IO[bytes]] = {}
        self._layout: dict[str, tuple[np.dtype, tuple[int, ...]]] = {}
        self.rows: dict[str, int] = {}

    def append(self, name: str, array: np.ndarray) -> None:
        if name not in self._open:
            self._open[name] = open(self._dir / name, "ab")  # noqa: SIM115 - closed by read() or close()
            self._layout.setdefault(name, (array.dtype, array.shape[1:]))
            self.rows.setdefault(name, 0)
        self._open[name].write(np.ascontiguousarray(array).tobytes())
        self.rows[name] += len(array)

    def read(self, name: str, start: int = 0, count: int = -1) -> np.ndarray:
        """Rows ``start`` to ``start + count`` (to the end with -1)."""
        if name in self._open:
            self._open.pop(name).close()
        dtype, row = self._layout[name]
        cells = math.prod(row)
        data = np.fromfile(
            self._dir / name,
            dtype=dtype,
            count=count * cells if count >= 0 else -1,
            offset=start * cells * dtype.itemsize,
        )
        return data.reshape(-1, *row)

    def chunks(self, name: str) -> Iterator[np.ndarray]:
        """All rows, in chunks of ``SPILL_ROWS`` (one empty chunk when there are none)."""
        for start in range(0, max(self.rows[name], 1), SPILL_ROWS):
            yield self.read(name, start, SPILL_ROWS)

    def take(self, name: str) -> np.ndarray:
        """All rows, and the file is removed."""
        data = self.read(name)
        (self._dir / name).unlink()
        return data

    def close(self) -> None:
        for fh in self._open.values():
            fh.close()
        self._open.clear()


def _ranges(
    spill: _Spill, name: str, valid: np.ndarray, key: Callable[[np.ndarray], np.ndarray]
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The valid rows of spill array ``name`` and their row numbers, by ranges of ``key``'s top bits: ranges
    in ascending order, rows in row order within each.

    A column of more than ``SORT_ROWS`` rows is cut into as many ranges as keep each about that long (hashes
    are uniform): one pass spills each range to its own file, then they are read back one by one.
    """
    m = int(valid.sum())
    bits = min(MAX_RANGE_BITS, math.ceil(math.log2(m / SORT_ROWS))) if m > SORT_ROWS else 0
    values, rows = [], []
    for start, chunk in zip(range(0, max(valid.size, 1), SPILL_ROWS), spill.chunks(name), strict=True):
        take = valid[start : start + SPILL_ROWS]
        values.append(chunk[take])
        rows.append((start + np.flatnonzero(take)).astype(np.uint32))
        if bits:
            top = (key(values[0]) >> U64(64 - bits)).astype(np.intp)
            order = np.argsort(top, kind="stable")
            bounds = np.searchsorted(top[order], np.arange((1 << bits) + 1))
            for r in np.flatnonzero(np.diff(bounds)):
                part = order[bounds[r] : bounds[r + 1]]
                spill.append(f"{name}.{r}", values[0][part])
                spill.append(f"{name}.{r}.rows", rows[0][part])
            values, rows = [], []
    if not bits:
        yield np.concatenate(values), np.concatenate(rows)
    for r in range(1 << bits if bits else 0):
        if f"{name}.{r}" in spill.rows:
            yield spill.take(f"{name}.{r}"), spill.take(f"{name}.{r}.rows")


def _write_sorted(store: StoreWriter, spill: _Spill, bands: int) -> int:
    """Write the exact hash and every band hash of the documents that have shingles, each sorted (ties in
    row order), with their rows; return the number of such documents.

    One column at a time, and a long column by ranges of its hashes' top bits, sorted one after the other
    (hashes are uniform): memory is bounded by ``SORT_ROWS``, not by the shard's documents.
    """
    valid = np.concatenate([chunk > 0 for chunk in spill.chunks("set_len")])
    m = int(valid.sum())
    for exact, rows in _ranges(spill, "exact", valid, lambda chunk: chunk[:, 0]):
        order = np.lexsort((exact[:, 1], exact[:, 0]))
        store.extend("exact_sorted", exact[order, 0], (2, m))
        spill.append("exact_1", exact[order, 1])
        spill.append("exact_row", rows[order])
    for chunk in spill.chunks("exact_1"):
        store.extend("exact_sorted", chunk, (2, m))
    for chunk in spill.chunks("exact_row"):
        store.append("exact_row", chunk)
    for band in range(bands):
        for values, rows in _ranges(spill, f"band_{band}", valid, lambda chunk: chunk):
            order = np.argsort(values, kind="stable")
            store.extend("band_sorted", values[order], (bands, m))
            spill.append("band_row", rows[order])
    for chunk in spill.chunks("band_row"):
        store.extend("band_row", chunk, (bands, m))
    return m


def _write_per_document(store: StoreWriter, spill: _Spill, bands: int) -> None:
    """Write the per-document arrays (bands, exact, scope, shingle offsets, ids, id offsets) in chunks."""
    step = max(1, SPILL_ROWS // bands)  # SPILL_ROWS band hashes at a time
    for start in range(0, max(spill.rows["scope"], 1), step):
        store.append("bands", np.stack([spill.read(f"band_{b}", start, step) for b in range(bands)], 1))
    for name, lengths in (("exact", None), ("scope", None), ("shingle_off", "set_len"), ("id_off", "id_len")):
        if name == "id_off":
            for chunk in spill.chunks("ids"):
                store.append("ids", chunk)
        if lengths is None:
            for chunk in spill.chunks(name):
                store.append(name, chunk)
            continue
        total = 0
        store.append(name, np.zeros(1, np.int64))
        for chunk in spill.chunks(lengths):
            ends = np.cumsum(chunk, dtype=np.int64) + total
            store.append(name, ends)
            total = int(ends[-1]) if ends.size else total


def write_signatures(
    shard: str | os.PathLike[str], output: str | os.PathLike[str], resolved: DedupParams
) -> int:
    """Compute and write the signature store of ``shard``; return its number of documents.

    Documents whose normalized text is empty have no shingles: they take part in neither pass. Memory is
    bounded by bytes, not by the shard's documents: the shingles go to the store and the per-document arrays
    to spill files (next to the output, removed at the end) as each batch is signed; the sorted columns are
    then made one at a time.
    """
    params, perms = resolved.settings, resolved.perms
    meta = {"kind": "signatures", "version": VERSION, "shard": Path(shard).name, "params": params.to_json()}
    spill_dir = temp_sibling(Path(f"{output}.spill"))
    shutil.rmtree(spill_dir, ignore_errors=True)
    spill_dir.mkdir(parents=True)
    spill = _Spill(spill_dir)
    plain = not str(shard).endswith((".gz", ".zst"))
    progress = Progress(f"dedup signatures {Path(shard).name}", os.path.getsize(shard) if plain else None)
    try:
        with progress, write_store(output, meta) as store:

            def emit(shingles: np.ndarray) -> None:
                if params.verify == "jaccard":
                    store.append("shingles", shingles)

            def keep(batch: dict[str, np.ndarray]) -> None:
                for band in range(params.bands):
                    spill.append(f"band_{band}", batch["bands"][:, band])
                for name in ("exact", "scope", "set_len", "id_len", "ids"):
                    spill.append(name, batch[name])

            empty = sign_batch([], params, perms)
            emit(empty.pop("shingles"))
            keep(empty)
            for records in _batches(shard):
                progress.advance(sum(len(r.get("text") or "") for r in records), len(records))
                for run, long in _runs(records):
                    if long:
                        batch = sign_long(run[0], params, perms, emit)
                    else:
                        batch = sign_batch(run, params, perms)
                        emit(batch.pop("shingles"))
                    keep(batch)
            n = spill.rows["scope"]
            if n >= 1 << 32:
                raise ValueError(f"{shard}: more than 2**32 documents; split it")
            valid = _write_sorted(store, spill, params.bands)
            _write_per_document(store, spill, params.bands)
            store.meta.update(docs=n, valid=valid)
            progress.summary(n, n, 0)  # every document gets a signature (empty ones an empty set)
    finally:
        spill.close()
        shutil.rmtree(spill_dir, ignore_errors=True)
    return n


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input", required=True, help="input shard (.jsonl, .jsonl.gz, .jsonl.zst)")
    parser.add_argument("--output", required=True, help="signature store to write")
    parser.add_argument("--params", help="resolved parameters (dedup-params' JSON); else the settings below")
    settings.add_arguments(parser, DedupSettings, "dedup settings")
    args = parser.parse_args(argv)
    if args.params:
        resolved = DedupParams.read(args.params)
    else:
        resolved = DedupParams.resolve(settings.from_args(DedupSettings, args))
    write_signatures(args.input, args.output, resolved)
