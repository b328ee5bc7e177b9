"""The compiled unit memo (``_unitmemo.c``), wrapped once: each distinct unit of text is encoded once, by a
callback of the caller's, and every later one is a hash lookup. Splitting, hashing, lookups and joining are
compiled: no Python object per unit. The memo holds at most ``entries`` units in two generations: when the
young one is full it becomes the old one (the previous old one is dropped) and old units found again move
back; a unit longer than ``unit_chars`` is encoded but not kept.

Two modes: SentencePiece's (``encode_texts``: the strings, a document's first unit keyed apart when
``first_apart``; ``sp_memo``) and the byte-level one (``encode_utf8``: the texts' UTF-8; ``byte_memo``).
Either way a document the memo cannot vouch for is encoded whole by the caller's ``encode_whole``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from workflow_scripts.core import compiled
from workflow_scripts.tokens.engines.ids import split

if TYPE_CHECKING:
    from workflow_scripts.tokens import _unitmemo
else:
    _unitmemo = compiled.load("workflow_scripts.tokens._unitmemo")

EncodeTexts = Callable[[list[str]], Sequence[Sequence[int]]]
EncodeUtf8 = Callable[[bytes, np.ndarray], tuple[np.ndarray, np.ndarray]]


class UnitMemo:
    """One compiled unit memo and its figures."""

    def __init__(
        self, entries: int, unit_chars: int, first_apart: bool = False, byte_level: bool = False
    ) -> None:
        self.memo = _unitmemo.UnitMemo(entries, unit_chars, first_apart, byte_level)

    def encode_texts(
        self, texts: Sequence[str], firsts: EncodeTexts, laters: EncodeTexts, whole: EncodeTexts
    ) -> tuple[np.ndarray, np.ndarray]:
        """The ids (int32) and lengths (int64) of ``texts``: the missing units encoded by ``firsts`` (a
        document's first) and ``laters``, each in one call; a document the memo leaves whole by ``whole``."""
        batch = self.memo.scan(texts)
        batch.fill(firsts(batch.firsts) if batch.firsts else [], laters(batch.laters) if batch.laters else [])
        ids, lengths, left = self.memo.emit(batch)
        flat, lens = np.frombuffer(ids, np.int32), np.frombuffer(lengths, np.int64)
        if left:
            docs = split(flat, lens)
            for d, doc in zip(left, whole([texts[d] for d in left]), strict=True):
                docs[d] = np.asarray(doc, np.int32)
            lens = np.fromiter(map(len, docs), np.int64, len(docs))
            flat = np.concatenate(docs) if docs else flat
        return flat, lens

    def encode_utf8(
        self, blob: bytes, sizes: np.ndarray, units: EncodeUtf8, whole: EncodeUtf8, added: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """The ids (int32) and lengths (int64) of the texts whose UTF-8 ``blob`` holds back to back: the
        missing units encoded by ``units`` in one call; a document with a unit whose ids hold an ``added``
        token, by ``whole``."""
        batch = self.memo.scan_utf8(blob, np.ascontiguousarray(sizes, np.int64))
        missing, unit_sizes = batch.missing
        ids, lengths = np.empty(0, np.int32), np.frombuffer(unit_sizes, np.int64)
        if len(lengths):
            ids, lengths = units(missing, lengths)
            ids = np.ascontiguousarray(ids, np.int32)
        marked = np.zeros(len(lengths), np.uint8)
        hits = np.flatnonzero(np.isin(ids, added))
        if len(hits):
            marked[np.searchsorted(np.cumsum(lengths), hits, side="right")] = 1
        batch.fill_flat(ids, np.ascontiguousarray(lengths, np.int64), marked)
        out, lens, left = self.memo.emit(batch)
        flat, lens = np.frombuffer(out, np.int32), np.frombuffer(lens, np.int64)
        if not left:
            return flat, lens
        ends = np.cumsum(sizes)
        texts = [blob[ends[d] - sizes[d] : ends[d]] for d in left]
        whole_ids, whole_lens = whole(b"".join(texts), np.fromiter(map(len, texts), np.int64))
        docs = split(flat, lens)
        for d, doc in zip(left, split(whole_ids, whole_lens), strict=True):
            docs[d] = doc
        lens = np.fromiter(map(len, docs), np.int64, len(docs))
        return np.concatenate(docs).astype(np.int32, copy=False), lens

    def stats(self) -> dict[str, Any]:
        """Units looked up, units encoded, documents encoded whole, memo entries, and the hit rate: the share
        of units found in the memo (each distinct unit is encoded once while the memo keeps it, whatever the
        batches)."""
        total = self.memo.counters()
        return {**total, "hit_rate": round(1 - total["units_encoded"] / max(total["units"], 1), 4)}
