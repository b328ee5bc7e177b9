"""Check every invariant of a Megatron indexed dataset (``core.indexed_dataset`` describes the format).

Opening a dataset checks only its header and ``.idx`` size; ``verify`` checks the rest: the document index
starts at 0, never decreases and ends at S, lengths are not negative, pointers are the running sum of the
lengths times the itemsize, and the ``.bin`` holds exactly the tokens the index describes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from workflow_scripts.core.indexed_dataset import INDEX_CHUNK, IndexedDataset, IndexedDatasetError, PathLike


def verify(prefix: PathLike) -> dict[str, Any]:
    """Check every invariant of ``prefix``; return its summary or raise ``IndexedDatasetError``.

    Memory stays bounded: the index arrays are checked in chunks.
    """
    ds = IndexedDataset(prefix)
    where = ds.idx_path
    s, d, itemsize = ds.num_sequences, ds.header.doc_idx_len, ds.itemsize
    if d == 0:
        raise IndexedDatasetError(f"{where}: empty document index (D=0), expected at least [0]")
    if ds.doc_idx[0] != 0:
        raise IndexedDatasetError(f"{where}: doc_idx[0] = {ds.doc_idx[0]}, expected 0")
    for a in range(0, d - 1, INDEX_CHUNK):
        chunk = ds.doc_idx[a : a + INDEX_CHUNK + 1]
        bad = np.flatnonzero(np.diff(chunk) < 0)
        if bad.size:
            i = a + int(bad[0])
            raise IndexedDatasetError(
                f"{where}: doc_idx not monotone: doc_idx[{i}] = {ds.doc_idx[i]} > doc_idx[{i + 1}] = "
                f"{ds.doc_idx[i + 1]}"
            )
    if ds.doc_idx[-1] != s:
        raise IndexedDatasetError(f"{where}: doc_idx[-1] = {ds.doc_idx[-1]}, expected S = {s}")
    end = 0  # byte offset where the next sequence must start
    for a in range(0, s, INDEX_CHUNK):
        lengths = ds.lengths[a : a + INDEX_CHUNK].astype(np.int64)
        bad = np.flatnonzero(lengths < 0)
        if bad.size:
            i = a + int(bad[0])
            raise IndexedDatasetError(f"{where}: negative length: lengths[{i}] = {lengths[bad[0]]}")
        ends = np.cumsum(lengths) * itemsize + end
        expected = ends - lengths * itemsize
        bad = np.flatnonzero(ds.pointers[a : a + INDEX_CHUNK] != expected)
        if bad.size:
            i = a + int(bad[0])
            if i == 0:
                raise IndexedDatasetError(f"{where}: pointers[0] = {ds.pointers[0]}, expected 0")
            raise IndexedDatasetError(
                f"{where}: pointer arithmetic: pointers[{i}] - pointers[{i - 1}] = "
                f"{int(ds.pointers[i]) - int(ds.pointers[i - 1])}, expected lengths[{i - 1}] * {itemsize} = "
                f"{int(ds.lengths[i - 1]) * itemsize}"
            )
        end = int(ends[-1])
    if ds.bin_size != end:
        raise IndexedDatasetError(
            f"{ds.bin_path}: size {ds.bin_size} bytes, expected tokens * itemsize = "
            f"{end // itemsize} * {itemsize} = {end}"
        )
    return ds.summary()
