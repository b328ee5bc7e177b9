"""Exact Jaccard similarity of many pairs of sets at once."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from workflow_scripts.core import compiled

if TYPE_CHECKING:
    from workflow_scripts.dedup import _shingle
else:
    _shingle = compiled.load("workflow_scripts.dedup._shingle")


U64 = np.uint64


def jaccard_pairs(values: np.ndarray, off: np.ndarray, left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """Jaccard of the sets ``left[k]`` and ``right[k]`` (indices into the uint32 CSR ``values``/``off``).

    Sets may list an element more than once. Every set is sorted and its repeats dropped once (one sort of
    (set, element) keys, however many pairs a set is in); each pair's intersection is then a merge of two
    sorted sets (compiled: ``_shingle.intersections``). Two empty sets have similarity 0.
    """
    lengths = np.diff(off)
    keys = np.repeat(np.arange(lengths.size, dtype=U64), lengths) << U64(32)
    keys |= np.asarray(values, dtype=np.uint32).astype(U64)
    keys.sort()
    if keys.size:
        keys = keys[np.concatenate([[True], keys[1:] != keys[:-1]])]
    sizes = np.bincount((keys >> U64(32)).astype(np.int64), minlength=lengths.size)
    sets_off = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    sets = keys.astype(np.uint32)  # the low 32 bits: the elements
    left, right = np.ascontiguousarray(left, dtype=np.int64), np.ascontiguousarray(right, dtype=np.int64)
    inter = np.frombuffer(_shingle.intersections(sets, sets_off, left, right), dtype=np.int64)
    union = sizes[left] + sizes[right] - inter
    return np.divide(inter, union, out=np.zeros(left.size), where=union > 0)
