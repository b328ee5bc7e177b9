"""The unit memo as the encoder of a byte-level tokenizer (``ByteUnitMemo``): each distinct unit of text is
encoded once, by the ``tokenizers`` library (``LibraryUnits``), and every later one is a hash lookup
(``unit_memo``, byte-level mode).

A unit ends before a space (U+0020) followed by a character that is surely not White_Space. The split
patterns it is used with (GPT-2's, Llama 3's and Qwen2's, ``SPLITS``) start a pretoken at such a space
whatever comes before it: no alternative of theirs matches a space followed by a non-space except as its
first character. A unit is therefore a run of whole pretokens, and alone it splits as it does in the text:
only ``\\s+(?!\\S)`` looks ahead, and at a unit's end it sees either the end or that space, both not
``\\S``. Byte-level BPE encodes each pretoken on its own, so a document's ids are its units' ids joined.

``plan`` allows it only for what this argument covers: one of those split patterns, no normalizer or NFC
(whose composition never crosses a space), BPE without dropout and no added token holding whitespace; and
the probe texts of ``probes.probe`` must come out as the library's. A unit whose ids hold an added
token (a special token written in the text) has its documents encoded whole, as the caller's encoder
encodes them: an added token may strip the whitespace around it, across units.
"""

from __future__ import annotations

import itertools
import json
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from workflow_scripts.tokens.engines.base import Encoded, Encoder
from workflow_scripts.tokens.engines.hf_tokenizer import HFTokenizer, TokenizersEncoder
from workflow_scripts.tokens.engines.ids import split, utf8_batch
from workflow_scripts.tokens.engines.probes import probe
from workflow_scripts.tokens.engines.unit_memo import UnitMemo

GPT2_SPLIT = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
    r"|\s+(?!\S)|\s+"
)
WORD_START = np.zeros(256, bool)  # the first bytes of characters surely not White_Space (as _unitmemo.c)
WORD_START[0x21:0x7F] = WORD_START[0xC3:0xE0] = WORD_START[0xE4:0xF5] = True
SPLITS = {GPT2_SPLIT: "GPT-2's", LLAMA3_SPLIT: "Llama 3's", LLAMA3_SPLIT.replace("{1,3}", ""): "Qwen2's"}


def pattern(config: dict[str, Any]) -> str | None:
    """The name of the known split of a tokenizer.json's pre-tokenizer, or None."""
    pre = config.get("pre_tokenizer") or {}
    if pre.get("type") == "ByteLevel":
        return "GPT-2's" if pre.get("use_regex", True) else None
    steps = pre.get("pretokenizers") or []
    if pre.get("type") != "Sequence" or len(steps) != 2:
        return None
    split, level = steps
    if split.get("type") != "Split" or split.get("behavior") != "Isolated" or split.get("invert"):
        return None
    if level.get("type") != "ByteLevel" or level.get("use_regex", True):
        return None
    return SPLITS.get((split.get("pattern") or {}).get("Regex"))


def plan(backend: Any) -> tuple[bool, str]:
    """Whether the memo is exact for ``backend`` (a ``tokenizers.Tokenizer``), and its split or why not."""
    config = json.loads(backend.to_str())
    model, normalizer, known = config.get("model") or {}, config.get("normalizer"), pattern(config)
    added = [t["content"] for t in config.get("added_tokens") or []]
    spaced = [t for t in added if any(c.isspace() for c in t)]
    if normalizer is not None and normalizer.get("type") != "NFC":
        return False, f"a {normalizer.get('type')} normalizer"
    if known is None:
        return False, "a pre-tokenizer other than GPT-2's, Llama 3's or Qwen2's byte-level split"
    if model.get("type") != "BPE" or model.get("dropout"):
        return False, "not a BPE model without dropout"
    if model.get("continuing_subword_prefix") or model.get("end_of_word_suffix"):
        return False, "a BPE model with a subword prefix or word suffix"
    if spaced:
        return False, f"added token {spaced[0]!r} holds whitespace"
    return True, f"{known} split"


def token_bytes(backend: Any) -> np.ndarray:
    """The UTF-8 bytes of each token's text: a byte-level token's string has a character per byte, an
    added token its content."""
    sizes = np.zeros(backend.get_vocab_size(with_added_tokens=True), np.int64)
    for token, i in backend.get_vocab(with_added_tokens=True).items():
        sizes[i] = len(token)
    for i, token in backend.get_added_tokens_decoder().items():
        sizes[i] = len(token.content.encode())
    return sizes


class LibraryUnits:
    """Encodes missing units with the ``tokenizers`` library, those that start at a space followed by a
    character surely not White_Space (all but a document's first) joined into texts of about ``chunk``
    bytes: a pretoken starts there whatever is before it, so the ids of a joined text are its units' ids
    back to back (the
    library's cost is per call). The ids are cut at the units' ends by the tokens' byte counts; where a
    token would cross one (an added token stripping the space next to it), every unit is encoded alone."""

    def __init__(self, backend: Any, chunk: int = 1 << 16) -> None:
        self.backend, self.chunk, self.bytes = backend, chunk, token_bytes(backend)

    def __call__(self, blob: bytes, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        ends = np.cumsum(sizes)
        starts = ends - sizes
        data = np.frombuffer(blob, np.uint8)
        after = data[np.minimum(starts + 1, len(data) - 1)]
        alone = (data[starts] != ord(" ")) | (sizes < 2) | ~WORD_START[after]  # a document's first unit
        new = alone.copy()
        new[1:] |= alone[:-1] | (np.diff(starts // self.chunk) > 0)
        new[0] = True
        edges = [*starts[new].tolist(), len(blob)]
        ids, _ = self._encode([blob[a:b] for a, b in itertools.pairwise(edges)])
        token_ends = np.cumsum(self.bytes[ids])
        at = np.searchsorted(token_ends, ends)
        if len(ids) and at[-1] < len(ids) and np.array_equal(token_ends[at], ends):
            return ids, np.diff(at, prepend=-1)
        return self._encode([blob[a:b] for a, b in zip(starts.tolist(), ends.tolist(), strict=True)])

    def _encode(self, texts: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
        """The ids of UTF-8 texts back to back (int32) and each one's count."""
        encodings = self.backend.encode_batch_fast([t.decode() for t in texts], add_special_tokens=False)
        lengths = np.fromiter((len(e.ids) for e in encodings), np.int64, len(encodings))
        return np.fromiter(itertools.chain.from_iterable(e.ids for e in encodings), np.int32), lengths


class ByteUnitMemo(Encoder):
    """Encodes batches of UTF-8 texts through one byte-level unit memo: the missing units of a batch go to
    the ``tokenizers`` library in one call (``LibraryUnits``), documents holding an added token whole to the
    library. ``why``: why no engine library; ``memo_why``: the memo's plan."""

    name = "tokenizers"
    reads_utf8 = True
    cuts_long = False  # whole documents: the memo's units are short

    def __init__(
        self, tokenizer: HFTokenizer, why: str, memo_why: str, threads: int, entries: int, unit_chars: int
    ) -> None:
        super().__init__(tokenizer, threads, why)
        self.memo_why = memo_why
        self.library = TokenizersEncoder(tokenizer, threads, why, memo_why)
        self.units = LibraryUnits(tokenizer.backend)
        self.added = np.asarray(list(tokenizer.backend.get_added_tokens_decoder()), np.int32)
        self.memo = UnitMemo(entries, unit_chars, False, True)

    def _encode(self, texts: Sequence[str], utf8: tuple[bytes, np.ndarray] | None, specials: bool) -> Encoded:
        ids, lengths = self.encode_utf8(*(utf8 or utf8_batch(texts)))
        before, after = self.tokenizer.specials if specials else ([], [])
        return Encoded(ids, lengths, before=before, after=after)

    def encode_utf8(self, blob: bytes, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The ids (int32) and lengths (int64) of the texts whose UTF-8 ``blob`` holds back to back."""
        return self.memo.encode_utf8(blob, sizes, self.units, self._whole, self.added)

    def _whole(self, blob: bytes, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The library's ids and lengths of texts given as UTF-8 back to back (no post-processor tokens)."""
        ends = np.cumsum(sizes)
        texts = [blob[e - n : e].decode() for e, n in zip(ends.tolist(), sizes.tolist(), strict=True)]
        encoded = self.library.encode(texts, specials=False)
        return encoded.ids, encoded.lengths

    def stats(self, routed: int) -> dict[str, Any]:
        stats = self.memo.stats()
        print(
            f"unit memo: {stats['units']:,} units, hit rate {stats['hit_rate']:.1%}, "
            f"{stats['docs_encoded_whole']:,} documents encoded whole",
            file=sys.stderr,
            flush=True,
        )
        memo = {"enabled": True, "why": self.memo_why} | stats
        return {"enabled": False, "engine": self.name, "why": self.why, "memo": memo}


def self_check(memo: ByteUnitMemo, specials: Sequence[str]) -> str:
    """ "" when the memo gives the library's ids on ``probes.probe``'s texts, else the first text that
    differs."""
    texts = probe(specials, seed=1)
    ids, lengths = memo.encode_utf8(*utf8_batch(texts))
    got = split(ids, lengths)
    expected = memo.tokenizer.backend.encode_batch(texts, add_special_tokens=False)
    for text, mine, theirs in zip(texts, got, expected, strict=True):
        if list(mine) != theirs.ids:
            return f"the memo differs from tokenizers on {text!r}"
    return ""
