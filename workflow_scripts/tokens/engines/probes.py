"""The texts an engine is checked on before it is used (``probe``: special tokens written in text, odd
whitespace, many scripts and seeded random code points; ``SP_PROBES``: the unit memo's SentencePiece
self-check), and the code points this Python's Unicode database leaves unassigned (``has_unassigned``: a
document holding one is left to the library, whose reading of it an engine may not share).
"""

from __future__ import annotations

import functools
import random
import unicodedata
from collections.abc import Sequence

import numpy as np

from workflow_scripts.core import cache
from workflow_scripts.tokens.engines.ids import holds_flagged

SAMPLES = [
    "Ελληνικά",
    "русский",
    "العربية",
    "हिन्दी",
    "東京データ",
    "한국어",
    "ไทย",
    "עברית",
    "🙂👍🏽",
    "Rīga",
]
ODD = [
    "a\u00a0b",
    "c\u2028d",
    "e\r\nf",
    "g\u3000h",
    "\t\tx",
    "  y  ",
    "\u200bz",
    "\ufeffw",
    "\n\n\n",
    "x\u0301",
]
SP_PROBES = (  # the unit memo's self-check (sp_memo), part of gigatoken's (sp_gigatoken)
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


@functools.cache
def unassigned() -> np.ndarray:
    """Whether each code point is unassigned (``Cn``) in this Python's Unicode database (cached on disk per
    Unicode version: computing it takes most of a second)."""
    return cache.flags(f"unassigned-{unicodedata.unidata_version}.bits", 0x110000, _unassigned)


def _unassigned() -> np.ndarray:
    return np.array([unicodedata.category(chr(c)) == "Cn" for c in range(0x110000)], bool)


def has_unassigned(text: str) -> bool:
    """Whether ``text`` holds a code point this Python's Unicode database leaves unassigned."""
    return not text.isascii() and holds_flagged(unassigned(), text)


def probe(specials: Sequence[str], seed: int = 0) -> list[str]:
    """Texts that tell a byte-level encoder from another: special tokens written in text (whole, cut, in
    words), odd whitespace, many scripts and seeded random assigned code points."""
    rng = random.Random(seed)
    texts: list[str] = []
    for token in specials:
        texts += [token, f"x{token}y", f" {token} ", token + token, token[:-1], f"{token}\n{token[1:]}"]
    words = [*SAMPLES, *ODD, "it's", "I'll", "don't", "12345678", "3.14", "x.y", "--", "...", "$€£"]
    texts += [" ".join(rng.choices(words, k=12)) for _ in range(200)]
    assigned = ~unassigned()[:0x30000]
    assigned[:0x20] = assigned[0xD800:0xE000] = False
    points = np.flatnonzero(assigned).tolist()
    texts += ["".join(chr(c) for c in rng.sample(points, 40)) for _ in range(200)]
    texts += ["a" + chr(c) + "b " + chr(c) * 2 for c in rng.sample(points, 2000)]
    return texts
