"""Text normalization and shingling, vectorized over a batch of documents.

Normalization (each step optional): Unicode NFKC, lowercase, every number (decimal digits, with single
``.``/``,`` between digits as in ``3,000.5``) becomes ``0``, punctuation and symbols (Unicode categories P*,
S*) become spaces. A document is then a sequence of *units*: its words (maximal runs of non-space characters)
or, for the character-shingled languages, its non-space characters. A shingle is ``n`` consecutive units (the
whole document when it has fewer); documents without units have no shingles.

Everything after ``str.lower``/NFKC runs in numpy over the concatenated code points of the batch: a unit's
hash is a polynomial in its code points (plus its length), a shingle's a polynomial in its unit hashes, both
mod 2**64 and finished with the MurmurHash3 64-bit finalizer.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import xxhash

U64 = np.uint64
_BASE = 0x100000001B3
_GRAM = 0x9E3779B97F4A7C15
_ZERO = ord("0")


def fmix64(h: np.ndarray) -> np.ndarray:
    """MurmurHash3's 64-bit finalizer (a bijection), element-wise on a uint64 array."""
    h = h ^ (h >> U64(33))
    h = h * U64(0xFF51AFD7ED558CCD)
    h = h ^ (h >> U64(33))
    h = h * U64(0xC4CEB9FE1A85EC53)
    return h ^ (h >> U64(33))


U32 = np.uint32


def fmix32(h: np.ndarray) -> np.ndarray:
    """MurmurHash3's 32-bit finalizer (a bijection), element-wise on a uint32 array (datasketch's pre-mix
    before its affine permutations)."""
    h = h ^ (h >> U32(16))
    h = h * U32(0x85EBCA6B)
    h = h ^ (h >> U32(13))
    h = h * U32(0xC2B2AE35)
    return h ^ (h >> U32(16))


@functools.cache
def char_tables(punctuation: bool) -> tuple[np.ndarray, np.ndarray]:
    """Per code point: is it a separator (space, and punctuation/symbol if asked); is it a decimal digit.

    Only code points below 0x30000 are examined: none above is a space, digit, punctuation or symbol.
    """
    chars = [chr(c) for c in range(0x30000)]
    sep = np.zeros(0x110000, dtype=bool)
    digit = np.zeros(0x110000, dtype=bool)
    sep[: len(chars)] = [c.isspace() or (punctuation and unicodedata.category(c)[0] in "PS") for c in chars]
    digit[: len(chars)] = [c.isdecimal() for c in chars]
    return sep, digit


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


@functools.cache
def _powers(n: int) -> np.ndarray:
    """_BASE**i mod 2**64 for i < n (n: a power of two)."""
    return np.concatenate([np.ones(1, dtype=U64), np.cumprod(np.full(n - 1, _BASE, dtype=U64))])


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
            texts = [unicodedata.normalize("NFKC", t) for t in texts]
        if self.lowercase:
            texts = [t.lower() for t in texts]
        lens = np.fromiter(map(len, texts), dtype=np.int64, count=len(texts))
        cp = np.frombuffer("".join(texts).encode("utf-32-le", "surrogatepass"), dtype=np.uint32).copy()
        sep_table, digit_table = char_tables(self.punctuation)
        doc_first = np.zeros(cp.size, dtype=bool)
        doc_first[(np.cumsum(lens) - lens)[lens > 0]] = True
        if self.digits and cp.size:
            keep = _number_chars_kept(cp, doc_first, digit_table)
            cp, doc_first = np.where(digit_table[cp], np.uint32(_ZERO), cp)[keep], doc_first[keep]
            dropped = np.searchsorted(np.cumsum(lens), np.flatnonzero(~keep), side="right")
            lens = lens - np.bincount(dropped, minlength=lens.size)
        sep = sep_table[cp]
        # brk: no unit continues from the previous character into this one
        brk = doc_first | np.repeat(char_docs, lens)
        brk[1:] |= sep[:-1]
        is_start = brk & ~sep
        starts = np.flatnonzero(is_start)
        is_end = np.ones(cp.size, dtype=bool)
        is_end[:-1] = brk[1:] | sep[1:]
        ends = np.flatnonzero(is_end & ~sep) + 1
        # polynomial hash of each unit: sum of code point * _BASE**(position in unit); separators count 0
        index = np.arange(cp.size, dtype=np.int32)
        pos = index - np.maximum.accumulate(np.where(is_start, index, 0))
        pos[sep] = 0
        cp[sep] = 0
        h = _powers(1 << int((ends - starts).max(initial=1)).bit_length())[pos]
        h *= cp
        h = np.add.reduceat(h, starts) if starts.size else h[:0]
        h += (ends - starts).astype(U64)
        doc_of_unit = np.searchsorted(np.cumsum(lens), starts, side="right")
        return fmix64(h), np.concatenate([[0], np.cumsum(np.bincount(doc_of_unit, minlength=lens.size))])

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
        n_docs = unit_off.size - 1
        m = np.diff(unit_off)
        n = np.where(char_docs, self.char_ngram, self.ngram)
        width = np.minimum(m, n)  # shingle width: n, or the whole document when shorter
        count = np.where(m > 0, m - width + 1, 0)
        off = np.concatenate([[0], np.cumsum(count)])
        doc = np.repeat(np.arange(n_docs), count)
        pos = unit_off[doc] + np.arange(off[-1]) - off[doc]  # first unit of each shingle
        w = width[doc]
        h = np.zeros(pos.size, dtype=U64)
        mult = U64(1)
        for k in range(int(w.max(initial=0))):
            take = w > k
            h[take] += unit_hash[pos[take] + k] * mult
            mult = U64((int(mult) * _GRAM) & ((1 << 64) - 1))
        return fmix64(h), off


def _number_chars_kept(cp: np.ndarray, doc_first: np.ndarray, digit_table: np.ndarray) -> np.ndarray:
    """Characters kept when every number (digits, single '.'/',' between digits) shrinks to one character."""
    digit = digit_table[cp]
    num = digit.copy()
    mark = (cp[1:-1] == ord(".")) | (cp[1:-1] == ord(","))
    num[1:-1] |= mark & digit[:-2] & digit[2:] & ~doc_first[1:-1] & ~doc_first[2:]
    keep = ~num
    keep[0] = True
    keep[1:] |= ~num[:-1] | doc_first[1:]
    return keep


def exact_hashes(unit_hash: np.ndarray, unit_off: np.ndarray, seeds: np.ndarray) -> np.ndarray:
    """128-bit hash (n, 2) uint64 of each document's unit sequence (its normalized text), seeded per doc."""
    raw = unit_hash.tobytes()
    bounds = zip(unit_off[:-1].tolist(), unit_off[1:].tolist(), seeds.tolist(), strict=True)
    digests = [xxhash.xxh3_128_intdigest(raw[8 * a : 8 * b], seed) for a, b, seed in bounds]
    return np.array([(h >> 64, h & ((1 << 64) - 1)) for h in digests], dtype=U64).reshape(-1, 2)
