"""gigatoken as the encoder of a byte-level tokenizer, used only where it gives the ``tokenizers``
library's ids (which are the trainers' own preprocessing's).

``Engine.start`` checks the tokenizer first: features gigatoken reads differently without an error
(``UNSAFE``) keep the ``tokenizers`` library, and so does any difference on a probe of special tokens
written in text, odd whitespace, every script and seeded random code points. A document holding a code
point that this Python's Unicode database leaves unassigned goes to the ``tokenizers`` library too:
gigatoken knows newer Unicode than the ``tokenizers`` library's regex engine, so it may split such text
differently (``routed`` counts them). gigatoken adds no post-processor tokens: the caller adds them.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import random
import unicodedata
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from workflow_scripts.core.fsio import atomic_path

CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "snakepack"
UNSAFE = {  # tokenizer.json settings gigatoken encodes differently without an error (read from the file)
    '"type":"Digits"': "a Digits pre-tokenizer",
    '"behavior":"Removed"': "a Split that removes its matches",
    '"single_word":true': "an added token with single_word",
}
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


@functools.cache
def unassigned() -> np.ndarray:
    """Whether each code point is unassigned (``Cn``) in this Python's Unicode database (cached on disk per
    Unicode version: computing it takes most of a second)."""
    cache = CACHE / f"unassigned-{unicodedata.unidata_version}.npy"
    if cache.is_file():
        return np.unpackbits(np.load(cache))[:0x110000].astype(bool)
    table = np.array([unicodedata.category(chr(c)) == "Cn" for c in range(0x110000)], bool)
    with contextlib.suppress(OSError):  # a read-only home only costs the time
        cache.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(str(cache)) as tmp, open(tmp, "wb") as f:
            np.save(f, np.packbits(table))
    return table


@functools.cache
def mixed_blocks() -> np.ndarray:
    """Whether each block of 128 code points holds an unassigned one."""
    return unassigned().reshape(-1, 128).any(axis=1)


def has_unassigned(text: str) -> bool:
    """Whether ``text`` holds a code point this Python's Unicode database leaves unassigned (a lookup in a
    small per-block table first, the full table only for the code points of blocks with a gap)."""
    if text.isascii():
        return False
    points = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), np.uint32)
    gaps = mixed_blocks()[points >> 7]
    return bool(gaps.any() and unassigned()[points[gaps]].any())


def probe(specials: Sequence[str], seed: int = 0) -> list[str]:
    """Texts that tell a byte-level encoder from another: special tokens written in text (whole, cut, in
    words), odd whitespace, many scripts and seeded random assigned code points."""
    rng = random.Random(seed)
    texts: list[str] = []
    for token in specials:
        texts += [token, f"x{token}y", f" {token} ", token + token, token[:-1], f"{token}\n{token[1:]}"]
    words = [*SAMPLES, *ODD, "it's", "I'll", "don't", "12345678", "3.14", "x.y", "--", "...", "$€£"]
    texts += [" ".join(rng.choices(words, k=12)) for _ in range(200)]
    points = [c for c in range(0x20, 0x30000) if not unassigned()[c] and not 0xD800 <= c < 0xE000]
    texts += ["".join(chr(c) for c in rng.sample(points, 40)) for _ in range(200)]
    texts += ["a" + chr(c) + "b " + chr(c) * 2 for c in rng.sample(points, 2000)]
    return texts


class Engine:
    """gigatoken over a ``tokenizers.Tokenizer``; ``start`` says whether it is exact and why not."""

    def __init__(self, impl: Any, version: str) -> None:
        self.impl = impl
        self.name = f"gigatoken {version}"
        self.routed = 0  # documents encoded by the tokenizers library instead (unassigned code points)

    @classmethod
    def start(cls, backend: Any, specials: Sequence[str]) -> tuple[Engine | None, str]:
        """The engine for ``backend`` when it gives its ids on the probe, else None and why."""
        try:
            import gigatoken
        except ImportError:
            return None, "gigatoken is not installed"
        config = json.dumps(json.loads(backend.to_str()), separators=(",", ":"))
        unsafe = [why for key, why in UNSAFE.items() if key in config]
        if unsafe:
            return None, f"gigatoken reads {', '.join(unsafe)} differently"
        try:
            impl = gigatoken.Tokenizer(backend)
        except Exception as exc:  # gigatoken raises plain exceptions for what it does not support
            return None, f"gigatoken cannot read this tokenizer: {exc}"
        texts = probe(specials)
        expected = [e.ids for e in backend.encode_batch(texts, add_special_tokens=False)]
        got = impl.encode_batch_list(texts)
        wrong = [t for t, a, b in zip(texts, expected, got, strict=True) if list(a) != list(b)]
        if wrong:
            return None, f"gigatoken differs from tokenizers on {len(wrong)} probe texts, first {wrong[0]!r}"
        engine = cls(impl, metadata.version("gigatoken"))
        return engine, f"{engine.name}: the tokenizers library's ids on {len(texts)} probe texts"

    def encode(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """All ids (int32) and per-text lengths (int64), no post-processor tokens."""
        import awkward as ak

        layout = ak.to_layout(self.impl.encode_batch(list(texts)))
        offsets = np.asarray(layout.offsets.data, np.int64)
        ids = np.asarray(layout.content.data)[offsets[0] : offsets[-1]]
        return ids.astype(np.int32), np.diff(offsets)


def frame(
    ids: np.ndarray, lengths: np.ndarray, before: list[int], after: list[int]
) -> tuple[np.ndarray, np.ndarray]:
    """Concatenated texts' ids with ``before`` and ``after`` put around each text's."""
    if not before and not after:
        return ids, lengths
    framed = lengths + len(before) + len(after)
    ends = np.cumsum(framed)
    starts = ends - framed
    out = np.empty(int(ends[-1]) if len(ends) else 0, np.int32)
    body = np.ones(len(out), bool)
    for positions, tokens in ((starts, before), (ends - len(after), after)):
        for k, token in enumerate(tokens):
            out[positions + k] = token
            body[positions + k] = False
    out[body] = ids
    return out, framed
