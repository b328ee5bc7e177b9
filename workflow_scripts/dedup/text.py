"""Text normalization and shingling over a batch of documents.

Normalization (each step optional): Unicode NFKC, lowercase, every number (decimal digits, with single
``.``/``,`` between digits as in ``3,000.5``) becomes ``0``, punctuation and symbols (Unicode categories P*,
S*) become spaces. A document is then a sequence of *units*: its words (maximal runs of non-space characters)
or, for the character-shingled languages, its non-space characters. A shingle is ``n`` consecutive units (the
whole document when it has fewer); documents without units have no shingles.

Everything after ``str.lower``/NFKC runs in C (``_shingle.c``), one pass over each text's code points: a
unit's hash is a polynomial in its code points (base 0x100000001B3, plus its length), a shingle's a
polynomial in its unit hashes (base 0x9E3779B97F4A7C15), both mod 2**64 and finished with the MurmurHash3
64-bit finalizer. NFKC runs only on the lines holding a code point it may change (``nfkc``).
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING
from unicodedata import normalize

import numpy as np
import xxhash

from workflow_scripts.core import cache, compiled

if TYPE_CHECKING:
    from workflow_scripts.dedup import _shingle
else:
    _shingle = compiled.load("workflow_scripts.dedup._shingle")

U64 = np.uint64


UNSTABLE_BELOW = 0x30000  # no code point above changes under NFKC or composes (a test checks)


@functools.cache
def unstable() -> np.ndarray:
    """Per code point: may a text in NFKC not hold it as it stands (a superset of NFKC_QC No and Maybe, and
    every combining mark): those NFKC changes, the combining marks, the second code point of each canonical
    pair decomposition, and the Hangul vowels and trailing consonants. Cached per Unicode version (building
    it takes 40 ms of every signature job)."""
    return cache.flags(f"nfkc-unstable-{unicodedata.unidata_version}.bits", 0x110000, _unstable)


def _unstable() -> np.ndarray:
    marked = np.zeros(0x110000, dtype=bool)
    marked[0x1161:0x1176] = marked[0x11A8:0x11C3] = True
    for c in range(0x80, UNSTABLE_BELOW):
        if 0xD800 <= c < 0xE000:
            continue
        char = chr(c)
        if unicodedata.combining(char) or normalize("NFKC", char) != char:
            marked[c] = True
        pair = unicodedata.decomposition(char).split()
        if len(pair) == 2 and not pair[0].startswith("<"):
            marked[int(pair[1], 16)] = True
    return marked


def nfkc(text: str) -> str:
    """Unicode NFKC of ``text``, normalizing only the lines that hold an ``unstable`` code point: a line
    without one is in NFKC already, and a line feed never composes or reorders with its neighbours, so the
    lines' forms joined are the text's."""
    if text.isascii() or (found := _shingle.find(text, unstable(), 0)) < 0:
        return text
    parts, pos = [], 0
    while found >= 0:
        start = text.rfind("\n", 0, found) + 1
        end = text.find("\n", found)
        end = len(text) if end < 0 else end
        parts += [text[pos:start], normalize("NFKC", text[start:end])]
        pos = end
        found = _shingle.find(text, unstable(), end)
    parts.append(text[pos:])
    return "".join(parts)


def fmix64(h: np.ndarray) -> np.ndarray:
    """MurmurHash3's 64-bit finalizer (a bijection), element-wise on a uint64 array."""
    h = h ^ (h >> U64(33))
    h = h * U64(0xFF51AFD7ED558CCD)
    h = h ^ (h >> U64(33))
    h = h * U64(0xC4CEB9FE1A85EC53)
    return h ^ (h >> U64(33))


@functools.cache
def char_tables(punctuation: bool) -> tuple[np.ndarray, np.ndarray]:
    """Per code point: is it a separator (space, and punctuation/symbol if asked); is it a decimal digit.

    Only code points below 0x30000 are examined: none above is a space, digit, punctuation or symbol.
    Cached per Unicode version (building them takes 50 ms of every signature job).
    """
    version = unicodedata.unidata_version
    name = f"separators-{int(punctuation)}-{version}.bits"
    sep = cache.flags(name, 0x110000, lambda: _separators(punctuation))
    return sep, cache.flags(f"digits-{version}.bits", 0x110000, _digits)


def _separators(punctuation: bool) -> np.ndarray:
    sep = np.zeros(0x110000, dtype=bool)
    sep[:0x30000] = [
        c.isspace() or (punctuation and unicodedata.category(c)[0] in "PS") for c in map(chr, range(0x30000))
    ]
    return sep


def _digits() -> np.ndarray:
    digit = np.zeros(0x110000, dtype=bool)
    digit[:0x30000] = [c.isdecimal() for c in map(chr, range(0x30000))]
    return digit


# Characters a text may be cut before without changing its units (see Shingler.pieces): each is a starter
# that never composes with the character before it and is its own NFKC form, is neither cased nor
# case-ignorable (so str.lower's final-sigma rule looks no further on either side), and is neither a digit nor
# "." or "," (the number rule looks one character to each side). Whitespace always; ASCII punctuation and
# symbols when they are separators (or every character is a unit, as in character-shingled documents); CJK
# ideographs only in character-shingled documents.
CUT_SPACE = " \t\n\r\x0b\x0c"
CUT_PUNCT = '!"#$%&()*+-/;<=>?@[\\]_{|}~'
CUT_CJK = "\u3400-\u4dbf\u4e00-\u9fff"


@functools.cache
def _cut_pattern(char_doc: bool, punctuation: bool) -> re.Pattern[str]:
    chars = (
        CUT_SPACE + (re.escape(CUT_PUNCT) if punctuation or char_doc else "") + (CUT_CJK if char_doc else "")
    )
    return re.compile(f"[{chars}]")


@dataclass(frozen=True)
class Shingler:
    """Normalization and shingle settings."""

    ngram: int = 5
    char_ngram: int = 5
    lowercase: bool = True
    nfkc: bool = True
    punctuation: bool = True
    digits: bool = True

    def units(self, texts: list[str], char_docs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Unit hashes (uint64) of all documents and their CSR offsets (len(texts) + 1)."""
        if self.nfkc:
            texts = [nfkc(t) for t in texts]
        if self.lowercase:
            texts = [t.lower() for t in texts]
        sep, digit = char_tables(self.punctuation)
        flags = np.ascontiguousarray(char_docs, dtype=bool)
        hashes, counts = _shingle.units(texts, flags, sep, digit, self.digits)
        off = np.concatenate([[0], np.cumsum(np.frombuffer(counts, dtype=np.int64))])
        return np.frombuffer(hashes, dtype=U64), off

    def pieces(self, text: str, char_doc: bool, size: int) -> Iterator[str]:
        """``text`` cut into consecutive pieces whose units, in order, are the units of ``text``.

        Cuts are made only before a character of the cut set (see ``CUT_SPACE``); pieces have ``size // 2`` to
        ``size`` characters where the text has such a character there, more where it has none (the whole text
        in the worst case)."""
        pattern = _cut_pattern(char_doc, self.punctuation)
        start = 0
        while len(text) - start > size:
            cut = pattern.search(text, start + size // 2, start + size) or pattern.search(text, start + size)
            if cut is None:
                break
            yield text[start : cut.start()]
            start = cut.start()
        yield text[start:]

    def shingles(
        self, unit_hash: np.ndarray, unit_off: np.ndarray, char_docs: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Shingle hashes (uint64, in order, repeats kept) per document and their CSR offsets."""
        m = np.diff(unit_off)
        width = np.where(char_docs, self.char_ngram, self.ngram).astype(np.int64)
        count = np.where(m > 0, m - np.minimum(m, width) + 1, 0)
        hashes = _shingle.shingles(
            np.ascontiguousarray(unit_hash, dtype=U64), np.ascontiguousarray(unit_off, dtype=np.int64), width
        )
        return np.frombuffer(hashes, dtype=U64), np.concatenate([[0], np.cumsum(count)])


def exact_hashes(unit_hash: np.ndarray, unit_off: np.ndarray, seeds: np.ndarray) -> np.ndarray:
    """128-bit hash (n, 2) uint64 of each document's unit sequence (its normalized text), seeded per doc."""
    raw = unit_hash.tobytes()
    bounds = zip(unit_off[:-1].tolist(), unit_off[1:].tolist(), seeds.tolist(), strict=True)
    digests = [xxhash.xxh3_128_intdigest(raw[8 * a : 8 * b], seed) for a, b, seed in bounds]
    return np.array([(h >> 64, h & ((1 << 64) - 1)) for h in digests], dtype=U64).reshape(-1, 2)
