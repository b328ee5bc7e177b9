"""Fast encoding: each distinct unit of text is encoded once; the rest of the work is hash lookups.

With ``split_by_whitespace`` a SentencePiece model never builds a piece across a word boundary (a ``▁``
after a non-``▁``), so a document's ids are the concatenation of its units' ids, a unit being a run of
spaces and the following non-spaces (`` *[^ ]+| +``; the first unit of a document as is). Each unit is encoded
once, with the model itself or a copy whose ``add_dummy_prefix`` equals ``remove_extra_whitespaces`` (so
that a unit alone normalizes as inside the text: with ``remove_extra_whitespaces`` its leading spaces
collapse into the one ``▁`` the dummy prefix adds, without it they are kept and nothing is added); the
first unit of a document, keyed apart, always with the model itself. Splitting, hashing, lookups and
joining are compiled (``_unitmemo.c``, built by ``pip install``): no Python object per unit; the missing
units of a batch are encoded in one SentencePiece call with all threads. Units longer than
``max_unit_chars`` (text without spaces) are encoded but not kept. The memo holds at most ``max_entries``
units in two generations: when the young one is full it becomes the old one (the previous old one is
dropped) and old units found again move back.

``plan`` decides from the model proto whether this is exact, and falls back (with the reason) when it is
not: ``split_by_whitespace`` off, ``treat_whitespace_as_suffix``, unescaped whitespace, a unigram model
(its Viterbi breaks ties between equal-score segmentations by the float rounding of the score of the text
before, which a unit alone cannot reproduce), a piece with a space or an inner ``▁``, no ``▁`` piece, a
normalizer (character map) that can create or remove spaces next to whitespace-only pieces without
``remove_extra_whitespaces``, a mismatch on the built-in probe texts, or the compiled memo not built. A
document holding a literal ``▁`` (which SentencePiece reads as a space), or whose first unit normalizes to
nothing when the two models differ, is encoded whole.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import sentencepiece as spm

from workflow_scripts.tokens.model_proto import read_options, with_dummy_prefix

try:
    from workflow_scripts.tokens._unitmemo import UnitMemo
except ImportError:  # a checkout used without `pip install -e .` (or by another Python)
    UnitMemo = None

SPACE = "\u2581"
UNIGRAM = 1  # TrainerSpec.model_type
BUILD_NOTE = "the compiled unit memo (workflow_scripts/tokens/_unitmemo.c) is not built: pip install -e ."
INNER_SPACE = re.compile(f"[^{SPACE}]{SPACE}| ")
PROBES = (
    "Hello world",
    "  leading and trailing  ",
    "a  b   c    d",
    "tabs\tand\nnewlines\n\n  indented\n",
    "nbsp\u00a0here \u00a0 and\u3000ideographic \u3000space",
    "zero\u200bwidth \u200b joiner\u200d \ufeffbom",
    "combining e\u0301 \u0301acute  \u0308x",
    "日本語の文章です。 中文文本 ภาษาไทยไม่มีช่องว่าง",
    "\uff26\uff55\uff4c\uff4c\u3000\uff54\uff58\uff54 \u2460 \ufb01 \u338f",
    "\u3000 lead",
    "\u200b start",
    " ",
    "x \u200b",
    "emoji 🙂🙂 and \U0001f9ea rare \U000e0041 chars",
)


@dataclass(frozen=True)
class Plan:
    """How to encode units exactly: the model, and the model for later units when it differs."""

    model: bytes
    units_model: bytes | None


def plan(model: bytes) -> tuple[Plan | None, str]:
    """The plan for ``model`` and a note, or ``(None, why the fast path is not exact for it)``."""
    opts = read_options(model)
    sp = spm.SentencePieceProcessor(model_proto=model)
    why = ""
    if UnitMemo is None:
        why = BUILD_NOTE
    elif not opts.split_by_whitespace:
        why = "split_by_whitespace is off"
    elif opts.treat_whitespace_as_suffix:
        why = "treat_whitespace_as_suffix is on"
    elif not opts.escape_whitespaces:
        why = "escape_whitespaces is off"
    elif opts.model_type == UNIGRAM:
        why = "a unigram model: its Viterbi ties depend on the rounding of the text's score before a unit"
    elif sp.is_unknown(sp.piece_to_id(SPACE)):
        why = f"no {SPACE!r} piece"
    elif opts.charsmap and opts.allow_whitespace_only_pieces and not opts.remove_extra_whitespaces:
        why = "a normalizer that may create or remove spaces, with whitespace-only pieces kept as they are"
    else:
        for i in range(sp.get_piece_size()):
            if not (sp.is_control(i) or sp.is_unknown(i)) and INNER_SPACE.search(sp.id_to_piece(i)):
                why = f"piece {i} {sp.id_to_piece(i)!r} crosses a word boundary"
                break
    if why:
        return None, why
    units_model = None
    if opts.add_dummy_prefix != opts.remove_extra_whitespaces:
        units_model = with_dummy_prefix(model, opts.remove_extra_whitespaces)
    result = Plan(model, units_model)
    flat, lengths = FastEncoder(result, 1, 1 << 10, 64).encode_flat(PROBES)
    expected = [np.asarray(ids, np.int32) for ids in sp.encode(list(PROBES))]
    for text, got, want in zip(PROBES, np.split(flat, np.cumsum(lengths)[:-1]), expected, strict=True):
        if not np.array_equal(got, want):
            return None, f"self-check failed on {text!r}"
    if units_model is None:
        return result, "units encoded with the model as it is"
    return result, f"later units with add_dummy_prefix {'on' if opts.remove_extra_whitespaces else 'off'}"


class FastEncoder:
    """Encodes batches through one unit memo (``_unitmemo.UnitMemo``); the missing units of a batch go to
    SentencePiece in one call with ``threads`` threads. Ids come out as int32 (``framing.frame`` writes
    them in the file's dtype)."""

    def __init__(self, plan: Plan, threads: int, max_entries: int, max_unit_chars: int) -> None:
        assert UnitMemo is not None, BUILD_NOTE
        self.sp = spm.SentencePieceProcessor(model_proto=plan.model)
        self.units_sp = spm.SentencePieceProcessor(model_proto=plan.units_model) if plan.units_model else None
        self.threads = threads
        self.memo = UnitMemo(max_entries, max_unit_chars, self.units_sp is not None)

    def encode_flat(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """All ids of ``texts`` concatenated (int32) and the per-text lengths (int64)."""
        batch = self.memo.scan(texts)
        batch.fill(self._encode(self.sp, batch.firsts), self._encode(self.units_sp or self.sp, batch.laters))
        ids, lengths, whole = self.memo.emit(batch)
        flat, lens = np.frombuffer(ids, np.int32), np.frombuffer(lengths, np.int64)
        if whole:
            docs = np.split(flat, np.cumsum(lens)[:-1])
            for d, doc in zip(whole, self._encode(self.sp, [texts[d] for d in whole]), strict=True):
                docs[d] = np.asarray(doc, np.int32)
            lens = np.fromiter(map(len, docs), np.int64, len(docs))
            flat = np.concatenate(docs) if docs else flat
        return flat, lens

    def stats(self) -> dict[str, Any]:
        """Units looked up, units encoded by SentencePiece, documents encoded whole, memo entries, and the
        hit rate: the share of units found in the memo (each distinct unit is encoded once while the memo
        keeps it, whatever the batches)."""
        total = self.memo.counters()
        return {**total, "hit_rate": round(1 - total["units_encoded"] / max(total["units"], 1), 4)}

    def _encode(self, sp: spm.SentencePieceProcessor, texts: list[str]) -> list[list[int]]:
        return sp.encode(texts, num_threads=self.threads) if texts else []
