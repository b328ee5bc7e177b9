"""A batch's ids and texts as the engines pass them: the compiled pass that finds flagged ids (``_ids.c``),
texts as UTF-8 back to back, and gigatoken's results as flat arrays (of one call a batch, or a text)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from workflow_scripts.core import compiled

if TYPE_CHECKING:
    from workflow_scripts.tokens import _ids
else:
    _ids = compiled.load("workflow_scripts.tokens._ids")


def flagged(table: np.ndarray, ids: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The texts (indices) whose ids hold an id the bool ``table`` flags (one compiled pass); an id outside
    the table is an error."""
    ids, lengths = np.ascontiguousarray(ids, np.int32), np.ascontiguousarray(lengths, np.int64)
    return np.frombuffer(_ids.flagged(table, ids, lengths), np.int64)


def holds_flagged(table: np.ndarray, text: str) -> bool:
    """Whether ``text`` holds a code point the bool ``table`` flags (one compiled pass)."""
    return _ids.holds_flagged(table, text)


def split(ids: np.ndarray, lengths: np.ndarray) -> list[np.ndarray]:
    """Each text's ids (views)."""
    return np.split(ids, np.cumsum(lengths)[:-1])


def utf8_batch(texts: Sequence[str]) -> tuple[bytes, np.ndarray]:
    """The texts' UTF-8 bytes back to back and each one's size."""
    data = [t.encode() for t in texts]
    return b"".join(data), np.fromiter(map(len, data), np.int64, len(data))


def flat(batch: Any) -> tuple[np.ndarray, np.ndarray]:
    """The ids of gigatoken's ``encode_batch`` result (an awkward array of lists) back to back, and each
    text's count; no copy of the ids."""
    layout = batch.layout
    offsets = np.asarray(layout.offsets.data, np.int64)
    return np.asarray(layout.content.data)[offsets[0] : offsets[-1]], np.diff(offsets)


def one_by_one(impl: Any, blob: bytes, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The ids of the texts whose UTF-8 ``blob`` holds back to back, one gigatoken ``encode`` call a text (no
    awkward array, whose import takes about 0.15 CPU seconds; each call holds the GIL), back to back, and
    each text's count."""
    ends = np.cumsum(sizes).tolist()
    parts = [impl.encode(blob[start:end]) for start, end in zip([0, *ends[:-1]], ends, strict=True)]
    lengths = np.fromiter(map(len, parts), np.int64, len(parts))
    return (np.concatenate(parts) if parts else np.zeros(0, np.uint32)), lengths


def strings(blob: bytes, sizes: np.ndarray) -> Any:
    """The texts whose UTF-8 ``blob`` holds back to back, as an awkward array of strings over ``blob``
    (no copy): what gigatoken's ``encode_batch`` reads without a Python object per text."""
    import awkward as ak  # as gigatoken's results: imported on first use

    offsets = np.zeros(len(sizes) + 1, np.int64)
    np.cumsum(sizes, out=offsets[1:])
    chars = ak.contents.NumpyArray(np.frombuffer(blob, np.uint8), parameters={"__array__": "char"})
    return ak.Array(
        ak.contents.ListOffsetArray(ak.index.Index64(offsets), chars, parameters={"__array__": "string"})
    )


def holding(pattern: re.Pattern[bytes], blob: bytes, sizes: np.ndarray) -> list[int]:
    """The texts (indices) whose UTF-8, held back to back in ``blob``, holds a match of ``pattern``: one
    search a text at most, a match across two texts counts for neither."""
    ends = np.cumsum(sizes)
    found, pos = [], 0
    while match := pattern.search(blob, pos):
        text = int(np.searchsorted(ends, match.start(), side="right"))
        if match.end() <= ends[text]:
            found.append(text)
            pos = int(ends[text])
        else:
            pos = match.start() + 1
    return found
