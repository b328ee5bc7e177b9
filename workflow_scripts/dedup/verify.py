"""Exact Jaccard similarity of many pairs of sorted, duplicate-free sets at once."""

from __future__ import annotations

import numpy as np

U64 = np.uint64
CHUNK_ELEMENTS = 1 << 22


def jaccard_pairs(values: np.ndarray, off: np.ndarray, left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """Jaccard of the sets ``left[k]`` and ``right[k]`` (indices into the uint32 CSR ``values``/``off``).

    Sets may list an element more than once. The elements of both sets of a pair are keyed (pair, element,
    side) and sorted together; repeats are dropped, then equal (pair, element) neighbours form the
    intersection. Two empty sets have similarity 0.
    """
    lengths = np.diff(off)
    done = np.concatenate([[0], np.cumsum(lengths[left] + lengths[right])])
    inter = np.zeros(left.size, dtype=np.int64)
    union = np.zeros(left.size, dtype=np.int64)
    k = 0
    while k < left.size:
        end = max(k + 1, int(np.searchsorted(done, done[k] + CHUNK_ELEMENTS, side="right")) - 1)
        docs = np.stack([left[k:end], right[k:end]], axis=1).ravel()  # left, right of pair k, then of k+1...
        owner = np.repeat(np.arange(docs.size), lengths[docs])
        first = np.concatenate([[0], np.cumsum(lengths[docs])[:-1]])
        elements = values[off[docs][owner] + np.arange(owner.size) - first[owner]].astype(U64)
        keys = np.sort(((owner // 2).astype(U64) << U64(33)) | (elements << U64(1)) | (owner % 2).astype(U64))
        keys = keys[np.concatenate([[True], keys[1:] != keys[:-1]])]
        pair = (keys >> U64(33)).astype(np.int64)
        both = (keys[1:] >> U64(1)) == (keys[:-1] >> U64(1))
        inter[k:end] = np.bincount(pair[1:][both], minlength=end - k)
        union[k:end] = np.bincount(pair, minlength=end - k) - inter[k:end]
        k = end
    return np.divide(inter, union, out=np.zeros(left.size), where=union > 0)
