"""A Rust engine library as the encoder of a byte-level tokenizer (``EngineEncoder``), used only where it
gives the ``tokenizers`` library's ids (which are the trainers' own preprocessing's): fastokens
(``Fastokens``, the fastest here) or gigatoken (``Gigatoken``, the engine of Megatron-LM's
``preprocess_data_fast.py``).

``start`` checks the tokenizer first: a library that cannot read it, features it reads differently without
an error (``Engine.unsafe``), or any difference on a probe of special tokens written in text, odd
whitespace, every script and seeded random code points keep the next engine, and in the end the
``tokenizers`` library. A document holding a code point that this Python's Unicode database leaves
unassigned goes to the ``tokenizers`` library too: the engines' regex engines may know newer Unicode than
the library's, so they may split such text differently (``EngineEncoder.finish``: ``Encoded.routed``). The
engines add no post-processor tokens: the stage adds them (``Encoded.before``, ``after``).

Finding those documents costs little: the engine's own ids point at them. A byte-level token's bytes
either hold a whole unassigned code point or end in the first bytes of one (a code point cut between
tokens starts in some token), so only a document with such a *suspect* token (``suspect_tokens``: a few
dozen in a 50k vocabulary) is scanned, character by character (``has_unassigned``).
"""

from __future__ import annotations

import abc
import hashlib
import importlib.util
import os
import re
import threading
import unicodedata
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from workflow_scripts.core import cache
from workflow_scripts.tokens.engines.base import Encoded, Encoder
from workflow_scripts.tokens.engines.ids import flagged, flat, split, strings, utf8_batch
from workflow_scripts.tokens.engines.probes import has_unassigned, probe, unassigned

if TYPE_CHECKING:  # not at run time: the build starts before the tokenizers library is imported (prebuild)
    from workflow_scripts.tokens.engines.hf_tokenizer import HFTokenizer, TokenizersEncoder


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


class Engine(abc.ABC):
    """An engine library over a ``tokenizers.Tokenizer``; ``start`` says whether it is exact and why not."""

    library = ""  # the Python package
    builds_from_json = False  # ``load`` reads the JSON, not the library's tokenizer (``prebuild``)
    # tokenizer.json settings it encodes differently without an error
    unsafe: ClassVar[Mapping[str, str]] = {}
    reads_utf8 = False  # ``encode`` reads the texts' UTF-8 bytes (else the strings)
    one_thread_per_call = False  # ``encode`` runs on one thread: the caller runs calls at once, one a thread

    def __init__(self, impl: Future[Any], version: str, suspects: np.ndarray) -> None:
        self._impl = impl
        self.name = f"{self.library} {version}"
        self.suspects = suspects

    @classmethod
    def start(
        cls, backend: Any, specials: Sequence[str], threads: int = 1, json: str | None = None
    ) -> tuple[Engine | None, str]:
        """The engine for ``backend`` (``json``: the tokenizer.json it was read from, else its own JSON) when
        it gives its ids on the probe, else None and why. A tokenizer that passed is remembered on disk (per
        engine, tokenizers and Unicode version, and the probe's texts), with its suspect tokens: a later
        start (every other shard's job) skips the probe."""
        from importlib import metadata  # here, not before ``prebuild``: it takes 15 ms to import

        try:
            version = metadata.version(cls.library)
        except metadata.PackageNotFoundError:
            return None, f"{cls.library} is not installed"
        json = backend.to_str() if json is None else json
        if cls.unsafe:
            config = backend.to_str()  # compact JSON
            unsafe = [why for key, why in cls.unsafe.items() if key in config]
            if unsafe:
                return None, f"{cls.library} reads {', '.join(unsafe)} differently"
        texts = probe(specials)
        passed = passed_name(f"{cls.library} {version}", json, texts)
        checked = cache.read(passed) is not None
        impl = _loading(cls, json, backend, threads)
        if not checked:
            try:
                impl.result()
            except Exception as exc:  # the engines raise plain exceptions for what they do not support
                _LOADED.pop(_build_key(cls, json, threads))
                return None, f"{cls.library} cannot read this tokenizer: {str(exc)[:200]}"
        engine = cls(impl, version, np.zeros(0, bool))
        if not checked:
            wrong = differs(backend, engine, texts)
            if wrong:
                return None, wrong
            cache.write(passed, b"passed\n")
        size = backend.get_vocab_size(with_added_tokens=True)
        engine.suspects = cache.flags(
            passed + ".suspects", size, lambda: suspect_tokens(engine.vocab(backend), size)
        )
        return engine, f"{engine.name}: the tokenizers library's ids on {len(texts)} probe texts"

    @property
    def impl(self) -> Any:
        """The library's tokenizer (waiting for its build, which runs in the background)."""
        return self._impl.result()

    @staticmethod
    @abc.abstractmethod
    def load(json: str, backend: Any, threads: int) -> Any:
        """The library's tokenizer for ``json`` (a tokenizer.json; ``backend``: the same, read by the
        ``tokenizers`` library), on ``threads`` threads."""

    @abc.abstractmethod
    def vocab(self, backend: Any) -> dict[int, bytes]:
        """Each token's bytes."""

    @abc.abstractmethod
    def encode(
        self, texts: Sequence[str], utf8: tuple[bytes, np.ndarray] | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """The ids (int32) and lengths (int64) of ``texts`` (``utf8``: their UTF-8 bytes back to back and
        sizes, when the caller has them), no post-processor tokens."""

    def suspected(self, ids: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """The texts (indices) whose ids hold a suspect token: the only ones that may hold an unassigned
        code point (one compiled pass, ``_ids.c``)."""
        return flagged(self.suspects, ids, lengths)


class Fastokens(Engine):
    """fastokens (Rust, PCRE2): reads the strings. Each call on one thread (its thread count is read once,
    at its first encode), as many calls at once as there are threads: two such calls on two cores encode a
    fifth faster than one call fanned out over both (no wait for the slowest text of each batch)."""

    library = "fastokens"
    builds_from_json = True
    one_thread_per_call = True

    @staticmethod
    def load(json: str, backend: Any, threads: int) -> Any:
        import fastokens

        os.environ["FASTOKENS_BPE_THREADS"] = "1"
        return fastokens.Tokenizer.from_json_str(json)

    def vocab(self, backend: Any) -> dict[int, bytes]:
        return byte_level_vocab(backend)

    def encode(
        self, texts: Sequence[str], utf8: tuple[bytes, np.ndarray] | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        ids, offsets = self.impl.encode_batch_flat(list(texts))
        lengths = np.diff(np.frombuffer(offsets, np.uint64)).astype(np.int64)
        return np.frombuffer(ids, np.int32), lengths


class Gigatoken(Engine):
    """gigatoken (Rust, a pretoken cache): reads the texts' UTF-8 as one buffer, no object each; its pool is
    sized from ``RAYON_NUM_THREADS``."""

    library = "gigatoken"
    unsafe: ClassVar[Mapping[str, str]] = {
        '"type":"Digits"': "a Digits pre-tokenizer",
        '"behavior":"Removed"': "a Split that removes its matches",
        '"single_word":true': "an added token with single_word",
    }
    reads_utf8 = True

    @staticmethod
    def load(json: str, backend: Any, threads: int) -> Any:
        import gigatoken

        os.environ.setdefault("RAYON_NUM_THREADS", str(max(1, threads)))
        return gigatoken.Tokenizer(backend)

    def vocab(self, backend: Any) -> dict[int, bytes]:
        return self.impl.vocab

    def encode(
        self, texts: Sequence[str], utf8: tuple[bytes, np.ndarray] | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        ids, lengths = flat(self.impl.encode_batch(strings(*(utf8 or utf8_batch(texts)))))
        return ids.astype(np.int32), lengths


_LOADED: dict[tuple[str, str, int], Future[Any]] = {}


def _build_key(cls: type[Engine], json: str, threads: int) -> tuple[str, str, int]:
    return cls.library, hashlib.sha256(json.encode()).hexdigest(), threads


def _loading(cls: type[Engine], json: str, backend: Any, threads: int) -> Future[Any]:
    """``cls.load`` in a thread of its own, once per process for each tokenizer and thread count: the
    members of a batch job share it. Building fastokens' takes a quarter of a second without the GIL,
    which the start of the command (``prebuild``) and the reader's first batches take meanwhile."""
    key = _build_key(cls, json, threads)
    if key not in _LOADED:
        future: Future[Any] = Future()

        def build() -> None:
            try:
                future.set_result(cls.load(json, backend, threads))
            except BaseException as exc:  # the caller sees it where it waits
                future.set_exception(exc)

        # not a daemon: a command that fails meanwhile waits for it, as the interpreter must not stop a
        # thread in the library's code (it aborts the process)
        threading.Thread(target=build, name=f"{cls.library}-build").start()
        _LOADED[key] = future
    return _LOADED[key]


def prebuild(path: str, choice: str, threads: int) -> None:
    """Start building the first engine ``start`` tries for the tokenizer.json at ``path`` where it reads the
    JSON itself (fastokens), before the ``tokenizers`` library has read it: ``start`` (given the same
    ``json_of(path)``) takes it up, or leaves it unused."""
    first = ENGINES.get(next(iter(ENGINES)) if choice == "auto" else choice)
    if first and first.builds_from_json and importlib.util.find_spec(first.library) is not None:
        _loading(first, json_of(path), None, threads)


def json_of(path: str) -> str:
    """A tokenizer.json's text, as an engine reads it."""
    with open(path, encoding="utf-8") as f:
        return f.read()


BYTE_TOKEN = re.compile(r"<0x[0-9A-F]{2}>")  # a byte-fallback token
ENGINES: dict[str, type[Engine]] = {"fastokens": Fastokens, "gigatoken": Gigatoken}  # auto: in this order


def start(
    backend: Any, specials: Sequence[str], choice: str, threads: int, json: str | None = None
) -> tuple[Engine | None, str]:
    """The first engine of ``choice`` (``auto``: every engine, fastest first) that is exact for ``backend``
    (``json``: the tokenizer.json it was read from), and why; else None and why each is not."""
    names = list(ENGINES) if choice == "auto" else [choice]
    notes = []
    for name in names:
        engine, note = ENGINES[name].start(backend, specials, threads, json)
        if engine is not None:
            return engine, note
        notes.append(note)
    return None, "; ".join(notes)


def byte_level_vocab(backend: Any) -> dict[int, bytes]:
    """Each token's bytes: a byte-level token's characters mapped back to its bytes, a byte-fallback token
    (``<0xE3>``, where the model has byte fallback) its byte, an added token's content in UTF-8. Another
    token (not byte-level) gets the UTF-8 of a character no Unicode version assigns, so that every text it
    is in is checked."""
    to_byte = {c: b for b, c in enumerate(byte_level_alphabet())}
    fallback = '"byte_fallback":true' in backend.to_str()
    unknown = "\U0010fffe".encode()
    vocab = {}
    for token, i in backend.get_vocab(with_added_tokens=False).items():
        if fallback and BYTE_TOKEN.fullmatch(token):
            vocab[i] = bytes([int(token[3:5], 16)])
            continue
        try:
            vocab[i] = bytes(to_byte[c] for c in token)
        except KeyError:
            vocab[i] = unknown
    for i, token in backend.get_added_tokens_decoder().items():
        vocab[i] = token.content.encode()
    return vocab


def byte_level_alphabet() -> list[str]:
    """The character that stands for each byte in a byte-level vocabulary (GPT-2's table): the printable
    Latin-1 bytes stand for themselves, the others for U+0100 onwards, in order."""
    keep = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    chars, extra = {b: b for b in keep}, 0x100
    for b in range(256):
        if b not in chars:
            chars[b], extra = extra, extra + 1
    return [chr(chars[b]) for b in range(256)]


def differs(backend: Any, engine: Engine, texts: list[str]) -> str:
    """Empty when ``engine`` gives the library's (``backend``) ids on ``texts``, else which differ."""
    expected = [e.ids for e in backend.encode_batch(texts, add_special_tokens=False)]
    ids, lengths = engine.encode(texts)
    got = split(ids, lengths)
    wrong = [t for t, a, b in zip(texts, expected, got, strict=True) if a != b.tolist()]
    return (
        f"{engine.library} differs from tokenizers on {len(wrong)} probe texts, first {wrong[0]!r}"
        if wrong
        else ""
    )


def passed_name(engine: str, json: str, texts: Sequence[str]) -> str:
    """The cache name that says ``engine`` (library and version) passed the probe ``texts`` for the
    tokenizer ``json``, under this ``tokenizers`` library and Unicode database."""
    digest = hashlib.sha256(json.encode())
    digest.update("\0".join(texts).encode("utf-8", "surrogatepass"))
    from importlib import metadata

    versions = f"{engine.replace(' ', '-')}-tokenizers-{metadata.version('tokenizers')}"
    return f"byte-engine-{versions}-unicode-{unicodedata.unidata_version}-{digest.hexdigest()[:32]}"


class EngineEncoder(Encoder):
    """An engine library as the encoder of a byte-level tokenizer: ``encode`` (in the stage's encoder
    threads) runs the engine and nothing else; ``finish`` (in its main thread) gives the documents the
    engine may read differently (an unassigned code point) to the ``library``. ``why``: the engine's note;
    ``memo_why``: why no unit memo."""

    cuts_long = False  # the engines take a long document whole

    def __init__(
        self, tokenizer: HFTokenizer, engine: Engine, library: TokenizersEncoder, memo_why: str
    ) -> None:
        super().__init__(tokenizer, library.threads, library.why)
        self.engine = engine
        self.name = engine.name
        self.reads_utf8 = engine.reads_utf8
        self.memo_why = memo_why
        self.library = library

    @property
    def concurrent_calls(self) -> int:
        """``threads`` where the engine encodes a call on one thread (fastokens), else 1."""
        return self.threads if self.engine.one_thread_per_call else 1

    def _encode(self, texts: Sequence[str], utf8: tuple[bytes, np.ndarray] | None, specials: bool) -> Encoded:
        before, after = self.tokenizer.specials if specials else ([], [])
        return Encoded(*self.engine.encode(texts, utf8), before=before, after=after, final=False)

    def finish(self, texts: Sequence[str], encoded: Encoded) -> Encoded:
        """The texts the engine may read differently (an unassigned code point) encoded by the library
        instead (their indices in ``routed``)."""
        if encoded.final:
            return encoded
        ids, lengths = encoded.ids, encoded.lengths
        routed = [int(i) for i in self.engine.suspected(ids, lengths) if has_unassigned(texts[i])]
        if routed:
            parts = split(ids, lengths)
            for i in routed:
                parts[i] = self.library.encode([texts[i]], specials=False).ids
            ids, lengths = np.concatenate(parts), np.fromiter(map(len, parts), np.int64, len(parts))
        return Encoded(ids, lengths, routed, encoded.before, encoded.after)

    def stats(self, routed: int) -> dict[str, Any]:
        memo = {"enabled": False, "why": self.memo_why}
        return {"enabled": True, "engine": self.name, "why": self.why, "memo": memo} | {
            "routed_to_tokenizers": routed
        }
