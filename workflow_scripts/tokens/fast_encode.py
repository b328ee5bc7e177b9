"""Fast encoding: each distinct unit of text is encoded once; the rest of the work is dict lookups.

With ``split_by_whitespace`` a SentencePiece model never builds a piece across a word boundary (a ``▁``
after a non-``▁``), so a document's ids are the concatenation of its units' ids, a unit being a run of
spaces and the following non-spaces (``UNIT``; the first unit of a document as is). Each unit is encoded
once, with the model itself or a copy whose ``add_dummy_prefix`` equals ``remove_extra_whitespaces`` (so
that a unit alone normalizes as inside the text: with ``remove_extra_whitespaces`` its leading spaces
collapse into the one ``▁`` the dummy prefix adds, without it they are kept and nothing is added); the
first unit of a document, keyed apart, always with the model itself. Splitting, lookups and joining are C
loops (``re.findall``, ``map(dict.get)``, ``b"".join`` of int bytes); the missing units of a batch are
encoded in one SentencePiece call. Units longer than ``max_unit_chars`` (text without spaces) are encoded
but not kept. The memo holds at most ``max_entries`` units in two generations: when the young one is full
it becomes the old one (the previous old one is dropped) and old units found again move back.

``plan`` decides from the model proto whether this is exact, and falls back (with the reason) when it is
not: ``split_by_whitespace`` off, ``treat_whitespace_as_suffix``, unescaped whitespace, a unigram model
(its Viterbi breaks ties between equal-score segmentations by the float rounding of the score of the text
before, which a unit alone cannot reproduce), a piece with a space or an inner ``▁``, no ``▁`` piece, a
normalizer (character map) that can create or remove spaces next to whitespace-only pieces without
``remove_extra_whitespaces``, or a mismatch on the built-in probe texts. A document holding a literal
``▁`` (which SentencePiece reads as a space), or whose first unit normalizes to nothing when the two
models differ, is encoded whole.

``FastEncoder`` runs ``workers`` processes, each with its own memo, over parts of every batch (one memo
in this process for one worker).
"""

from __future__ import annotations

import itertools
import multiprocessing
import operator
import os
import re
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import sentencepiece as spm

from workflow_scripts.tokens.model_proto import read_options, with_dummy_prefix

UNIT = re.compile(r" *[^ ]+| +")
FIRST = "\x00"  # key prefix of a document's first unit (later units start with a space)
SPACE = "\u2581"
UNIGRAM = 1  # TrainerSpec.model_type
PARTS = 4  # parts of a batch per worker process
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
    probe = UnitEncoder(result, np.dtype(np.int32), 1 << 10, 64)
    flat, lengths = probe.encode(PROBES)
    expected = [np.asarray(ids, np.int32) for ids in sp.encode(list(PROBES))]
    for text, got, want in zip(PROBES, np.split(flat, np.cumsum(lengths)[:-1]), expected, strict=True):
        if not np.array_equal(got, want):
            return None, f"self-check failed on {text!r}"
    if units_model is None:
        return result, "units encoded with the model as it is"
    return result, f"later units with add_dummy_prefix {'on' if opts.remove_extra_whitespaces else 'off'}"


@dataclass
class Pending:
    """A batch between ``UnitEncoder.prepare`` and ``finish``: its units, those found, those to encode."""

    texts: Sequence[str]
    per_doc: list[list[str]]
    flat: list[str]
    vals: list[bytes | None]
    whole: list[int]  # documents encoded whole
    todo: list[str] = field(default_factory=list)  # units for SentencePiece
    found: dict[str, bytes] = field(default_factory=dict)  # units from the old generation
    encoded: list[bytes] = field(default_factory=list)  # ids of ``todo``
    whole_ids: list[bytes] = field(default_factory=list)  # ids of the ``whole`` documents


class UnitEncoder:
    """Encodes texts through a memo of unit ids (``dtype`` bytes); counts units and those encoded.

    ``encode`` is ``prepare`` (split and look up), ``encode_missing`` (SentencePiece alone) and ``finish``
    (memo update, ids joined)."""

    def __init__(self, plan: Plan, dtype: np.dtype, max_entries: int, max_unit_chars: int) -> None:
        self.sp = spm.SentencePieceProcessor(model_proto=plan.model)
        self.units_sp = spm.SentencePieceProcessor(model_proto=plan.units_model) if plan.units_model else None
        self.dtype = np.dtype(dtype)
        self.generation = max(1, max_entries // 2)
        self.max_unit_chars = max_unit_chars
        self.memo: dict[str, bytes] = {}
        self.old: dict[str, bytes] = {}
        self.units = self.encoded = self.direct = 0

    def counters(self) -> dict[str, int]:
        """Units looked up, units encoded by SentencePiece, documents encoded whole, and memo entries."""
        return {
            "units": self.units,
            "units_encoded": self.encoded,
            "docs_encoded_whole": self.direct,
            "memo_entries": len(self.memo) + len(self.old),
        }

    def encode(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """All ids of ``texts`` concatenated (``dtype``) and the per-text lengths (int64)."""
        pending = self.prepare(texts)
        self.encode_missing(pending)
        return self.finish(pending)

    def prepare(self, texts: Sequence[str]) -> Pending:
        """Split ``texts`` into units and look them up."""
        whole = [i for i, text in enumerate(texts) if SPACE in text]  # SentencePiece reads a ``▁`` as a space
        per_doc = list(map(UNIT.findall, texts))
        for i in whole:
            per_doc[i] = []
        if self.units_sp is not None:
            for units in per_doc:
                if units:
                    units[0] = FIRST + units[0]
        flat = list(itertools.chain.from_iterable(per_doc))
        vals = list(map(self.memo.get, flat))
        self.units += len(flat)
        pending = Pending(texts, per_doc, flat, vals, whole)
        if None in vals:
            missing = set(itertools.compress(flat, map(operator.is_, vals, itertools.repeat(None))))
            if self.old:
                pending.found = {k: v for k in missing if (v := self.old.get(k)) is not None}
                missing.difference_update(pending.found)
            pending.todo = list(missing)
            self.encoded += len(pending.todo)
        return pending

    def encode_missing(self, pending: Pending) -> None:
        """Encode the batch's missing units and whole documents."""
        todo = pending.todo
        if self.units_sp is None:
            pending.encoded = self._encode(self.sp, todo)
        else:
            firsts = [k[1:] for k in todo if k[0] == FIRST]
            later = [k for k in todo if k[0] != FIRST]
            first_ids, later_ids = (
                iter(self._encode(self.sp, firsts)),
                iter(self._encode(self.units_sp, later)),
            )
            pending.encoded = [next(first_ids) if k[0] == FIRST else next(later_ids) for k in todo]
        pending.whole_ids = self._encode(self.sp, [pending.texts[i] for i in pending.whole])

    def finish(self, pending: Pending) -> tuple[np.ndarray, np.ndarray]:
        """Remember the batch's new units and join its ids."""
        new = pending.found
        new.update(zip(pending.todo, pending.encoded, strict=True))
        vals = pending.vals
        if new:
            vals = list(map(new.get, pending.flat, vals))
            self._remember(new)
        counts = list(map(len, pending.per_doc))
        rest = iter(vals)
        docs = [b"".join(itertools.islice(rest, n)) for n in counts]  # type: ignore[arg-type]
        whole = dict(zip(pending.whole, pending.whole_ids, strict=True))
        if self.units_sp is not None:
            for d in self._first_units_empty(counts, vals):  # type: ignore[arg-type]
                whole[d] = np.asarray(self.sp.encode(pending.texts[d]), self.dtype).tobytes()
        for d, ids in whole.items():
            docs[d] = ids
        self.direct += len(whole)
        lengths = np.fromiter(map(len, docs), np.int64, len(docs)) // self.dtype.itemsize
        return np.frombuffer(b"".join(docs), self.dtype), lengths

    @staticmethod
    def _first_units_empty(counts: list[int], vals: list[bytes]) -> list[int]:
        """The documents whose first unit normalizes to nothing: the model then adds or strips the next
        unit's space, which that unit alone cannot know; they are encoded whole."""
        found = []
        pos = 0
        for d, n in enumerate(counts):
            if n > 1 and not vals[pos]:
                found.append(d)
            pos += n
        return found

    def _remember(self, new: dict[str, bytes]) -> None:
        """Keep the new units not over ``max_unit_chars``; a full young generation becomes the old one."""
        keep = {k: v for k, v in new.items() if len(k) <= self.max_unit_chars}
        if len(self.memo) + len(keep) > self.generation:
            self.old, self.memo = self.memo, {}
            if len(keep) > self.generation:
                keep = dict(itertools.islice(keep.items(), self.generation))
        self.memo.update(keep)

    def _encode(self, sp: spm.SentencePieceProcessor, texts: list[str]) -> list[bytes]:
        """The ids of each text as ``dtype`` bytes (one SentencePiece call)."""
        if not texts:
            return []
        ids = sp.encode(texts, num_threads=1)
        lengths = list(map(len, ids))
        buf = np.fromiter(itertools.chain.from_iterable(ids), self.dtype, sum(lengths)).tobytes()
        ends = list(itertools.accumulate(n * self.dtype.itemsize for n in lengths))
        return list(map(buf.__getitem__, map(slice, [0, *ends[:-1]], ends)))


_WORKER: UnitEncoder | None = None


def _start_worker(plan: Plan, dtype: str, max_entries: int, max_unit_chars: int) -> None:
    global _WORKER
    _WORKER = UnitEncoder(plan, np.dtype(dtype), max_entries, max_unit_chars)


def _encode_in_worker(texts: list[str]) -> tuple[np.ndarray, np.ndarray, int, dict[str, int]]:
    assert _WORKER is not None
    flat, lengths = _WORKER.encode(texts)
    return flat, lengths, os.getpid(), _WORKER.counters()


class FastEncoder:
    """Encodes batches with ``workers`` processes, each with its own memo, over ``PARTS_PER_WORKER`` parts
    of every batch per worker (so that a slow part does not leave the others idle); in this process for
    one worker."""

    def __init__(
        self, plan: Plan, dtype: np.dtype, workers: int, max_entries: int, max_unit_chars: int
    ) -> None:
        self.workers = workers
        self.pool: ProcessPoolExecutor | None = None
        self.local: UnitEncoder | None = None
        if workers > 1:
            args = (plan, np.dtype(dtype).str, max_entries, max_unit_chars)
            context = multiprocessing.get_context("spawn")  # the reader thread is running: no fork
            self.pool = ProcessPoolExecutor(workers, context, initializer=_start_worker, initargs=args)
        else:
            self.local = UnitEncoder(plan, np.dtype(dtype), max_entries, max_unit_chars)
        self._counters: dict[int, dict[str, int]] = {}

    def encode_flat(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Like ``Tokenizer.encode_flat``: all ids concatenated and the per-text lengths."""
        if self.local is not None:
            result = self.local.encode(texts)
            self._counters[0] = self.local.counters()
            return result
        assert self.pool is not None
        flats, lengths = [], []
        for flat, lens, pid, counters in self.pool.map(
            _encode_in_worker, _parts(texts, self.workers * PARTS)
        ):
            flats.append(flat)
            lengths.append(lens)
            self._counters[pid] = counters
        if not flats:
            return np.empty(0, np.int32), np.empty(0, np.int64)
        return np.concatenate(flats), np.concatenate(lengths)

    def stats(self) -> dict[str, Any]:
        """``UnitEncoder.counters`` summed over the workers, and the hit rate: the share of units found in
        the memo (each distinct unit is encoded once while the memo keeps it, whatever the batches)."""
        total = dict.fromkeys(("units", "units_encoded", "docs_encoded_whole", "memo_entries"), 0)
        for counters in self._counters.values():
            for key, value in counters.items():
                total[key] += value
        return {**total, "hit_rate": round(1 - total["units_encoded"] / max(total["units"], 1), 4)}

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(cancel_futures=True)


def _parts(texts: Sequence[str], n: int) -> list[list[str]]:
    """``texts`` cut into at most ``n`` runs of about equal characters (in order, none empty)."""
    ends = np.cumsum(np.fromiter(map(len, texts), np.int64, len(texts)))
    if not len(ends):
        return []
    cuts = np.searchsorted(ends, ends[-1] * np.arange(1, n) / n, side="right")
    bounds = [0, *sorted(set(cuts.tolist())), len(texts)]
    return [list(texts[a:b]) for a, b in itertools.pairwise(bounds) if b > a]
