"""gigatoken as the encoder of a SentencePiece BPE model (``SpGigatoken``), used only where it gives
SentencePiece's ids.

gigatoken reads a ``.model`` by converting it to a ``tokenizer.json`` (its own converter, the work of
``Tokenizer.from_sentencepiece``). It splits the text at the model's added pieces first: it reads a control
piece spelled in text (``<s>``, ``</s>``, ``<|endoftext|>``) as that token, where SentencePiece keeps it
text, and cuts the spaces around a user-defined piece otherwise. A document that spells an added piece is
encoded by SentencePiece (``Encoded.routed``). ``SpGigatoken.start`` takes only BPE models with byte
fallback (what gigatoken reads) and without a character map (NFKC: gigatoken's reading of it differs on
combining marks after spaces), and checks the model first on a probe (``probes``: the unit memo's texts,
added pieces written in text, odd whitespace, many scripts and seeded random code points); any difference
keeps the unit memo (``choose``). Converting and probing take about 0.3 s, so a model that passed keeps its
converted form in the cache, per gigatoken and SentencePiece version, and later jobs load that.

Each encoder thread encodes its own batch on its own thread (``encode_batch(parallel=False)``, whose
result is an awkward array); with one thread, each text is one ``encode`` call instead (as fast, and no
awkward import, a tenth of a small shard's job; each call holds the GIL, so not with more threads). Either
way no Python object is made per token.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from workflow_scripts.core import cache
from workflow_scripts.tokens.engines.base import Encoded, Encoder
from workflow_scripts.tokens.engines.ids import flat, holding, one_by_one, split, strings, utf8_batch
from workflow_scripts.tokens.engines.probes import SP_PROBES, probe
from workflow_scripts.tokens.engines.sp_tokenizer import SentencePieceTokenizer
from workflow_scripts.tokens.model_proto import read_options


def convert(model: bytes) -> str:
    """gigatoken's ``tokenizer.json`` for ``model``: what ``Tokenizer.from_sentencepiece`` loads."""
    from gigatoken._load.sentencepiece import sentencepiece_to_tokenizer_json

    return sentencepiece_to_tokenizer_json(model)


def added_tokens(data: str) -> list[str]:
    """The added pieces (control and user-defined) of a converted model: gigatoken splits the text at them
    before anything else."""
    start = data.index("[", data.index('"added_tokens":'))
    added, _ = json.JSONDecoder().raw_decode(data, start)  # the list alone, not the 1 MB vocab and merges
    return [t["content"] for t in added]


class SpGigatoken(Encoder):
    """gigatoken over a SentencePiece BPE model; ``start`` says whether it is exact and why not. It reads the
    texts' UTF-8 as one buffer (the reader's), no object each."""

    reads_utf8 = True

    def __init__(self, tokenizer: SentencePieceTokenizer, impl: Any, version: str, added: list[str]) -> None:
        super().__init__(tokenizer, 1, "")
        self.impl = impl
        self.name = f"gigatoken {version}"
        self.protect = re.compile(b"|".join(re.escape(a.encode()) for a in added)) if added else None

    @classmethod
    def start(cls, tokenizer: SentencePieceTokenizer) -> tuple[SpGigatoken | None, str]:
        """The engine for ``tokenizer`` when it gives SentencePiece's ids on the probe, else None and why. A
        model that passed keeps its converted form on disk (per gigatoken and SentencePiece version): a later
        start loads that instead of converting and probing again."""
        try:
            import gigatoken
        except ImportError:
            return None, "gigatoken is not installed"
        from importlib import metadata  # here: a byte-level run never needs it (15 ms to import)

        model, sp = tokenizer.model, tokenizer.sp
        version = metadata.version("gigatoken")
        versions = f"gigatoken-{version}-sentencepiece-{metadata.version('sentencepiece')}"
        passed = f"{versions}-{hashlib.sha256(model).hexdigest()[:32]}.json"
        cached = cache.read(passed)
        try:
            data = cached.decode() if cached else convert(model)
            impl = gigatoken.Tokenizer.from_json(data).backend
        except Exception as exc:  # gigatoken raises plain exceptions for what it does not support
            return None, f"gigatoken cannot read this model: {exc}"
        if not cached and read_options(model).charsmap:  # a cached model passed this too
            return None, "a normalizer (character map): gigatoken's reading of it differs on combining marks"
        added = added_tokens(data)
        engine = cls(tokenizer, impl, version, added)
        engine.why = note = f"{engine.name}: SentencePiece's ids on the probe texts"
        if cached:
            return engine, note
        texts = [*SP_PROBES, *probe([*added, sp.id_to_piece(sp.unk_id()), "<0x41>"])]
        encoded = engine.encode(texts)
        got = split(encoded.ids, encoded.lengths)
        wrong = [t for t, a, b in zip(texts, got, sp.encode(texts), strict=True) if a.tolist() != b]
        if wrong:
            return None, f"gigatoken differs from SentencePiece on {len(wrong)} probe texts, as {wrong[0]!r}"
        cache.write(passed, data.encode())
        return engine, note

    def on_threads(self, threads: int) -> SpGigatoken:
        """This engine on ``threads`` threads (the started one is kept for later runs)."""
        engine = copy.copy(self)
        engine.threads = threads
        return engine

    @property
    def concurrent_calls(self) -> int:
        """One batch per thread: each call encodes on its own thread (``encode_batch(parallel=False)``), which
        keeps both cores busier than one call at a time on gigatoken's pool."""
        return self.threads

    def _encode(self, texts: Sequence[str], utf8: tuple[bytes, np.ndarray] | None, specials: bool) -> Encoded:
        blob, sizes = utf8 or utf8_batch(texts)
        if self.threads == 1:
            ids, lengths = one_by_one(self.impl, blob, sizes)
        else:
            ids, lengths = flat(self.impl.encode_batch(strings(blob, sizes), parallel=False))
        routed = holding(self.protect, blob, sizes) if self.protect else []
        if routed:
            docs = split(ids, lengths)
            plain = self.tokenizer.sp.encode([texts[i] for i in routed])
            for i, doc in zip(routed, plain, strict=True):
                docs[i] = np.asarray(doc, np.uint32)
            lengths = np.fromiter(map(len, docs), np.int64, len(docs))
            ids = np.concatenate(docs)
        return Encoded(ids.view(np.int32), lengths, routed)  # ids < 2**31: the same values, no copy

    def stats(self, routed: int) -> dict[str, Any]:
        print(f"fast encoding: {self.name}, {routed:,} documents to SentencePiece", file=sys.stderr)
        return {"enabled": True, "engine": self.name, "why": self.why, "routed_to_sentencepiece": routed}
