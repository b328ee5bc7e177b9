"""gigatoken as the encoder of a byte-level tokenizer, used only where it gives the ``tokenizers``
library's ids (which are the trainers' own preprocessing's).

``Engine.start`` checks the tokenizer first: features gigatoken reads differently without an error
(``UNSAFE``) keep the ``tokenizers`` library, and so does any difference on a probe of special tokens
written in text, odd whitespace, every script and seeded random code points. A document holding a code
point that this Python's Unicode database leaves unassigned goes to the ``tokenizers`` library too:
gigatoken knows newer Unicode than the ``tokenizers`` library's regex engine, so it may split such text
differently (``routed`` counts them). gigatoken adds no post-processor tokens: the caller adds them.

Finding those documents costs little: the engine's own ids point at them. A byte-level token's bytes
either hold a whole unassigned code point or end in the first bytes of one (a code point cut between
tokens starts in some token), so only a document with such a *suspect* token (``suspect_tokens``: a few
dozen in a 50k vocabulary) is scanned, character by character (``has_unassigned``).
"""

from __future__ import annotations

import functools
import hashlib
import json
import random
import unicodedata
from collections.abc import Sequence
from importlib import metadata
from typing import Any

import numpy as np

from workflow_scripts.core import cache

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
    return cache.flags(f"unassigned-{unicodedata.unidata_version}.bits", 0x110000, _unassigned)


def _unassigned() -> np.ndarray:
    return np.array([unicodedata.category(chr(c)) == "Cn" for c in range(0x110000)], bool)


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


def utf8_width(lead: int) -> int:
    """Bytes of the UTF-8 sequence a byte starts (1 for ASCII and continuation bytes)."""
    return 2 if 0xC0 <= lead < 0xE0 else 3 if 0xE0 <= lead < 0xF0 else 4 if lead >= 0xF0 else 1


def is_suspect(token: bytes) -> bool:
    """Whether a token's bytes hold an unassigned code point or end in the first bytes of a sequence that
    could encode one (leading continuation bytes belong to an earlier token's code point)."""
    start, end = 0, len(token)
    while start < end and 0x80 <= token[start] < 0xC0:
        start += 1
    last = end - 1
    while last >= start and 0x80 <= token[last] < 0xC0:
        last -= 1
    if last >= start and end - last < utf8_width(token[last]):  # cut: any code point it may start counts
        width, head = utf8_width(token[last]), token[last:]
        low = token[last] & (0x7F >> width)
        for byte in head[1:]:
            low = low << 6 | byte & 0x3F
        spare = 6 * (width - len(head))
        if unassigned()[low << spare : min((low + 1) << spare, 0x110000)].any():
            return True
        end = last
    text = token[start:end].decode("utf-8", "replace")
    return not text.isascii() and has_unassigned(text)


def suspect_tokens(vocab: dict[int, bytes], size: int) -> np.ndarray:
    """``is_suspect`` of every token id (False for an id without a token)."""
    table = np.zeros(size, bool)
    for token, data in vocab.items():
        table[token] = not data.isascii() and is_suspect(data)
    return table


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


class Engine:
    """gigatoken over a ``tokenizers.Tokenizer``; ``start`` says whether it is exact and why not."""

    def __init__(self, impl: Any, version: str, suspects: np.ndarray) -> None:
        self.impl = impl
        self.name = f"gigatoken {version}"
        self.suspects = suspects
        self.routed = 0  # documents encoded by the tokenizers library instead (unassigned code points)

    @classmethod
    def start(cls, backend: Any, specials: Sequence[str]) -> tuple[Engine | None, str]:
        """The engine for ``backend`` when it gives its ids on the probe, else None and why. A tokenizer that
        passed is remembered on disk (per gigatoken, tokenizers and Unicode version, and the probe's texts),
        with its suspect tokens: a later start (every other shard's job) skips the probe."""
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
        version = metadata.version("gigatoken")
        passed = passed_name(version, config, texts)
        if cache.read(passed) is None:
            wrong = differs(backend, impl, texts)
            if wrong:
                return None, wrong
            cache.write(passed, b"passed\n")
        table = functools.partial(suspect_tokens, impl.vocab, impl.vocab_size)
        engine = cls(impl, version, cache.flags(passed + ".suspects", impl.vocab_size, table))
        return engine, f"{engine.name}: the tokenizers library's ids on {len(texts)} probe texts"

    def encode(self, blob: bytes, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The ids (int32) and lengths (int64) of the texts whose UTF-8 bytes ``blob`` holds back to back
        (``sizes`` bytes each), no post-processor tokens. The texts go in as one buffer: no object each."""
        import awkward as ak

        offsets = np.zeros(len(sizes) + 1, np.int64)
        np.cumsum(sizes, out=offsets[1:])
        chars = ak.contents.NumpyArray(np.frombuffer(blob, np.uint8), parameters={"__array__": "char"})
        string = {"__array__": "string"}
        texts = ak.contents.ListOffsetArray(ak.index.Index64(offsets), chars, parameters=string)
        ids, lengths = flat(self.impl.encode_batch(ak.Array(texts)))
        return ids.astype(np.int32), lengths

    def suspected(self, ids: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """The texts (indices) whose ids hold a suspect token: the only ones that may hold an unassigned
        code point."""
        at = np.flatnonzero(np.take(self.suspects, ids))
        if not len(at):
            return at
        return np.unique(np.searchsorted(np.cumsum(lengths), at, side="right"))


def differs(backend: Any, impl: Any, texts: list[str]) -> str:
    """Empty when gigatoken (``impl``) gives the library's (``backend``) ids on ``texts``, else which
    differ."""
    expected = [e.ids for e in backend.encode_batch(texts, add_special_tokens=False)]
    got = impl.encode_batch_list(texts)
    wrong = [t for t, a, b in zip(texts, expected, got, strict=True) if a != list(b)]
    return (
        f"gigatoken differs from tokenizers on {len(wrong)} probe texts, first {wrong[0]!r}" if wrong else ""
    )


def passed_name(version: str, config: str, texts: Sequence[str]) -> str:
    """The cache name that says gigatoken ``version`` passed the probe ``texts`` for the tokenizer ``config``
    (its JSON), under this ``tokenizers`` library and Unicode database."""
    digest = hashlib.sha256(config.encode())
    digest.update("\0".join(texts).encode("utf-8", "surrogatepass"))
    versions = f"gigatoken-{version}-tokenizers-{metadata.version('tokenizers')}"
    return f"byte-engine-{versions}-unicode-{unicodedata.unidata_version}-{digest.hexdigest()[:32]}"


def flat(batch: Any) -> tuple[np.ndarray, np.ndarray]:
    """The ids of gigatoken's ``encode_batch`` result (an awkward array of lists) back to back, and each
    text's count; no copy of the ids."""
    layout = batch.layout
    offsets = np.asarray(layout.offsets.data, np.int64)
    return np.asarray(layout.content.data)[offsets[0] : offsets[-1]], np.diff(offsets)


def utf8_batch(texts: Sequence[str]) -> tuple[bytes, np.ndarray]:
    """The texts' UTF-8 bytes back to back and each one's size."""
    data = [t.encode() for t in texts]
    return b"".join(data), np.fromiter(map(len, data), np.int64, len(data))


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
