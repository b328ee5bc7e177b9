"""The unit memo as the encoder of a SentencePiece model (``SpUnitMemo``): each distinct unit of text is
encoded once; the rest of the work is hash lookups.

With ``split_by_whitespace`` a SentencePiece model never builds a piece across a word boundary (a ``▁``
after a non-``▁``), so a document's ids are the concatenation of its units' ids, a unit being a run of
spaces and the following non-spaces (`` *[^ ]+| +``; the first unit of a document as is). Each unit is encoded
once, with the model itself or a copy whose ``add_dummy_prefix`` equals ``remove_extra_whitespaces`` (so
that a unit alone normalizes as inside the text: with ``remove_extra_whitespaces`` its leading spaces
collapse into the one ``▁`` the dummy prefix adds, without it they are kept and nothing is added); the
first unit of a document, keyed apart, always with the model itself. Splitting, hashing, lookups and
joining are compiled (``unit_memo``); the missing units of a batch are encoded in one SentencePiece call
with all threads.

``plan`` decides from the model proto whether this is exact, and falls back (with the reason) when it is
not: ``split_by_whitespace`` off, ``treat_whitespace_as_suffix``, unescaped whitespace, a unigram model
(its Viterbi breaks ties between equal-score segmentations by the float rounding of the score of the text
before, which a unit alone cannot reproduce), a piece with a space or an inner ``▁``, no ``▁`` piece, a
normalizer (character map) that can create or remove spaces next to whitespace-only pieces without
``remove_extra_whitespaces``, or a mismatch on the built-in probe texts. A
document holding a literal ``▁`` (which SentencePiece reads as a space), or whose first unit normalizes to
nothing when the two models differ, is encoded whole.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import sentencepiece as spm

from workflow_scripts.tokens.engines.base import Encoded, Encoder
from workflow_scripts.tokens.engines.ids import split
from workflow_scripts.tokens.engines.probes import SP_PROBES
from workflow_scripts.tokens.engines.sp_tokenizer import SentencePieceTokenizer
from workflow_scripts.tokens.engines.unit_memo import UnitMemo
from workflow_scripts.tokens.model_proto import read_options, with_dummy_prefix

SPACE = "\u2581"
UNIGRAM = 1  # TrainerSpec.model_type
INNER_SPACE = re.compile(f"[^{SPACE}]{SPACE}| ")


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
    if not opts.split_by_whitespace:
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
    flat, lengths = SpUnits(result, 1, 1 << 10, 64).encode(SP_PROBES)
    expected = [np.asarray(ids, np.int32) for ids in sp.encode(list(SP_PROBES))]
    for text, got, want in zip(SP_PROBES, split(flat, lengths), expected, strict=True):
        if not np.array_equal(got, want):
            return None, f"self-check failed on {text!r}"
    if units_model is None:
        return result, "units encoded with the model as it is"
    return result, f"later units with add_dummy_prefix {'on' if opts.remove_extra_whitespaces else 'off'}"


class SpUnits:
    """Encodes batches through one unit memo; the missing units of a batch go to SentencePiece in one call
    with ``threads`` threads. Ids come out as int32 (``framing.frame`` writes them in the file's dtype)."""

    def __init__(self, plan: Plan, threads: int, max_entries: int, max_unit_chars: int) -> None:
        self.sp = spm.SentencePieceProcessor(model_proto=plan.model)
        self.units_sp = spm.SentencePieceProcessor(model_proto=plan.units_model) if plan.units_model else None
        self.threads = threads
        self.memo = UnitMemo(max_entries, max_unit_chars, self.units_sp is not None)

    def encode(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """All ids of ``texts`` concatenated (int32) and the per-text lengths (int64)."""
        return self.memo.encode_texts(texts, self._first, self._later, self._first)

    def _first(self, texts: list[str]) -> list[list[int]]:
        return self.sp.encode(texts, num_threads=self.threads)

    def _later(self, texts: list[str]) -> list[list[int]]:
        return (self.units_sp or self.sp).encode(texts, num_threads=self.threads)


class SpUnitMemo(Encoder):
    """The unit memo as the encoder of a SentencePiece model (``why``: the plan's note)."""

    name = "unit memo"

    def __init__(
        self,
        tokenizer: SentencePieceTokenizer,
        plan: Plan,
        why: str,
        threads: int,
        entries: int,
        unit_chars: int,
    ) -> None:
        super().__init__(tokenizer, threads, why)
        self.units = SpUnits(plan, threads, entries, unit_chars)

    def _encode(self, texts: Sequence[str], utf8: object, specials: bool) -> Encoded:
        return Encoded(*self.units.encode(texts))

    def stats(self, routed: int) -> dict[str, Any]:
        stats = self.units.memo.stats()
        print(
            f"fast encoding: {stats['units']:,} units, memo hit rate {stats['hit_rate']:.1%}, "
            f"{stats['units_encoded']:,} encoded, memo {stats['memo_entries']:,} entries",
            file=sys.stderr,
            flush=True,
        )
        return {"enabled": True, "engine": self.name, "plan": self.why, **stats}
