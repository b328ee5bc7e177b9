"""A Hugging Face ``tokenizer.json`` (byte-level BPE and the like), encoded as the trainers' own
preprocessing encodes it: GPT-NeoX's ``HFTokenizer`` (``Tokenizer.from_file(...).encode(text).ids``) and
Megatron-LM's ``HuggingFaceTokenizer`` (``AutoTokenizer(...)(text).input_ids``) both let the tokenizer's
post-processor add its special tokens (a template's BOS) and read a special token written in the text as
that token; so does this, to give the same ids. A GPT-2 ``vocab.json`` + ``merges.txt`` (``HFTokenizer.gpt2``)
is read as both trainers' ``GPT2BPETokenizer`` reads it (transformers' GPT-2 tokenizer; EOD
``<|endoftext|>``).

EOD (``eod``): ``auto`` picks ``<|endoftext|>`` when the tokenizer has that token (GPT-NeoX's
``HFTokenizer`` rule), else the ``eos_token`` of the ``tokenizer_config.json`` beside it (Megatron-LM's
``HuggingFaceTokenizer`` rule), else it is an error; a token or ``id:N`` overrides the rule.

Encoding: inside ``fast_encoding``, an engine library where it gives the library's ids (``byte_engine``:
fastokens, then gigatoken) or else the unit memo (``byte_memo``); otherwise the ``tokenizers`` library's
``encode_batch_fast`` on ``threads`` threads (its Rayon pool is sized once per process, from
``RAYON_NUM_THREADS``). A document over ``LONG_CHARS`` characters is encoded
piece by piece, cut before a space that follows a non-space (where byte-level pre-tokenizers start a word
anyway), the post-processor's tokens added once around the whole; a cut that has to fall elsewhere, or a
tokenizer for which that cut changes the ids, is counted (``unsafe_cuts``).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import sys
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
from tokenizers import Tokenizer as Backend
from tokenizers import decoders, models, pre_tokenizers

from workflow_scripts.core.cli import UserError
from workflow_scripts.tokens import byte_engine, byte_memo
from workflow_scripts.tokens.byte_engine import Engine, has_unassigned, utf8_batch
from workflow_scripts.tokens.byte_memo import ByteMemo
from workflow_scripts.tokens.framing import frame
from workflow_scripts.tokens.settings import EOD_PIECE, LONG_CHARS
from workflow_scripts.tokens.tokenizer import no_ids

CUT = re.compile(r"(?<=\S) ")  # a space after a non-space: a byte-level pre-tokenizer starts a word there


class HFTokenizerError(UserError, ValueError):
    """A tokenizer.json or token specification that cannot be used."""


class HFTokenizer:
    """A ``tokenizer.json`` with validated token lookup and batched encoding to flat numpy arrays."""

    kind = "hf"

    def __init__(self, path: str | os.PathLike[str], backend: Backend | None = None) -> None:
        self.path = os.fspath(path)
        self.from_file = backend is None  # read from ``path`` (a tokenizer.json) as it is
        try:
            self.backend = backend or Backend.from_file(self.path)
        except Exception as exc:  # tokenizers raises a bare Exception for a malformed file
            raise HFTokenizerError(f"{self.path}: cannot load the Hugging Face tokenizer: {exc}") from None
        self.vocab_size = self.backend.get_vocab_size(with_added_tokens=True)
        self.merges: str | None = None  # a GPT-2 vocabulary's merges file
        self.unsafe_cuts = 0
        self.engine: Engine | None = None  # an engine library, inside ``fast_encoding`` where it is exact
        self.engine_note = "turned off"
        self.memo: ByteMemo | None = None  # the unit memo, inside ``fast_encoding`` where it is exact
        self.memo_note = "turned off"
        self._routed = threading.local()  # ``last_routed``, per thread
        self._counting = threading.Lock()  # ``unsafe_cuts``

    @classmethod
    def gpt2(cls, vocab: str, merges: str) -> HFTokenizer:
        """A GPT-2 ``vocab.json`` + ``merges.txt`` as GPT-NeoX's and Megatron-LM's ``GPT2BPETokenizer`` read
        them (transformers' GPT-2 tokenizer): byte-level BPE, no prefix space, no tokens added, and
        ``<|endoftext|>`` a special token (read as itself where the text spells it)."""
        try:
            backend = Backend(models.BPE.from_file(vocab, merges))
        except Exception as exc:  # tokenizers raises a bare Exception for a malformed file
            raise HFTokenizerError(f"{vocab}, {merges}: cannot load the GPT-2 BPE: {exc}") from None
        backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        backend.decoder = decoders.ByteLevel()
        if backend.token_to_id(EOD_PIECE) is not None:
            backend.add_special_tokens([EOD_PIECE])
        tokenizer = cls(vocab, backend)
        tokenizer.kind, tokenizer.merges = "gpt2", merges
        return tokenizer

    @contextlib.contextmanager
    def fast_encoding(
        self, enabled: bool, workers: int, memo_entries: int, max_unit_chars: int, engine: str = "auto"
    ) -> Iterator[Engine | None]:
        """Encode with an engine library inside the block where it is exact (``byte_engine``: ``engine``
        ``auto`` tries fastokens, then gigatoken; or the one named); else, or with ``engine`` ``memo``,
        through the unit memo where it is exact (``byte_memo``; its missing units encoded by the
        ``tokenizers`` library); else with the library. Said once in the log; yield the engine."""
        self.engine, self.engine_note = None, "turned off"
        self.memo, self.memo_note = None, "turned off"
        if enabled:
            added = self.backend.get_added_tokens_decoder()
            specials = [t.content for t in added.values()]
            if engine == "memo":
                self.engine_note = f"engine {engine!r}: the unit memo over the tokenizers library"
            else:
                json = byte_engine.json_of(self.path) if self.from_file else None
                started = byte_engine.start(self.backend, specials, engine, workers, json)
                self.engine, self.engine_note = started
            print(f"encoder: {self.engine_note}", file=sys.stderr, flush=True)
            if self.engine is None:
                self._start_memo(added, specials, memo_entries, max_unit_chars)
            else:
                self.memo_note = f"{self.engine.library} encodes whole documents (faster)"
            print(f"unit memo: {'on' if self.memo else 'off'}: {self.memo_note}", file=sys.stderr, flush=True)
        try:
            yield self.engine
        finally:
            self.engine, self.memo = None, None

    @property
    def reads_utf8(self) -> bool:
        """Whether ``encode_flat`` reads the texts' UTF-8 bytes (the unit memo, gigatoken), so that the
        reader should make them."""
        return self.memo is not None or (self.engine is not None and self.engine.reads_utf8)

    def _start_memo(self, added: dict[int, Any], specials: list[str], entries: int, unit_chars: int) -> None:
        """The unit memo where ``byte_memo.plan`` and its self-check say it is exact, and the note why."""
        exact, self.memo_note = byte_memo.plan(self.backend)
        if exact:
            wrong = byte_memo.self_check(self._memo(added, 1 << 12, 64), self.backend, specials)
            if wrong:
                self.memo_note = wrong
            else:
                self.memo = self._memo(added, entries, unit_chars)
                self.memo_note += ": the tokenizers library's ids on the probe texts"

    def _memo(self, added: dict[int, Any], entries: int, unit_chars: int) -> ByteMemo:
        """A unit memo whose missing units and whole documents go to the ``tokenizers`` library."""
        units = byte_memo.LibraryUnits(self.backend)
        return ByteMemo(units, self._library_utf8, list(added), entries, unit_chars)

    def _library_utf8(self, blob: bytes, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The library's ids and lengths of texts given as UTF-8 back to back (no post-processor tokens)."""
        ends = np.cumsum(sizes)
        texts = [blob[e - n : e].decode() for e, n in zip(ends.tolist(), sizes.tolist(), strict=True)]
        return self._library_flat(texts, False)

    def engine_stats(self, engine: Engine | None, routed: int) -> dict[str, object]:
        """The stats' ``fast_encode``: the engine, why, the documents it left to the library (``routed``), and
        the unit memo's figures (or why it was off)."""
        name = engine.name if engine else "tokenizers"
        memo = {"enabled": self.memo is not None, "why": self.memo_note}
        if self.memo is not None:
            stats = self.memo.stats()
            memo |= stats
            print(
                f"unit memo: {stats['units']:,} units, hit rate {stats['hit_rate']:.1%}, "
                f"{stats['docs_encoded_whole']:,} documents encoded whole",
                file=sys.stderr,
                flush=True,
            )
        return {"enabled": engine is not None, "engine": name, "why": self.engine_note, "memo": memo} | (
            {"routed_to_tokenizers": routed} if engine else {}
        )

    def token_id(self, spec: str) -> int:
        """The id of a token, or of ``id:N``; a token missing from the tokenizer is an error."""
        if spec.startswith("id:"):
            try:
                token = int(spec[3:])
            except ValueError:
                raise HFTokenizerError(f"bad token id spec {spec!r} (expected id:N)") from None
            if not 0 <= token < self.vocab_size:
                raise HFTokenizerError(
                    f"token {spec} is outside the vocabulary of {self.path} (0..{self.vocab_size - 1})"
                )
            return token
        token = self.backend.token_to_id(spec)
        if token is None:
            raise HFTokenizerError(f"token {spec!r} is not in {self.path}")
        return token

    def piece(self, token: int | None) -> str | None:
        """The token string of ``token`` (None for None or an id the tokenizer does not have)."""
        return None if token is None else self.backend.id_to_token(token)

    def render(self, ids: Sequence[int]) -> str:
        """Decoded text, special tokens shown as themselves."""
        return self.backend.decode(list(ids), skip_special_tokens=False)

    def eos_token(self) -> str | None:
        """The ``eos_token`` of the ``tokenizer_config.json`` beside the file, if any (GPT-2's is
        ``<|endoftext|>``)."""
        if self.kind == "gpt2":
            return EOD_PIECE
        config = os.path.join(os.path.dirname(self.path), "tokenizer_config.json")
        if not os.path.isfile(config):
            return None
        with open(config, encoding="utf-8") as f:
            eos = json.load(f).get("eos_token")
        return eos.get("content") if isinstance(eos, dict) else eos

    def eod(self, spec: str = "auto") -> tuple[int, str]:
        """The EOD id for ``spec`` and the rule that chose it (see the module docstring)."""
        if spec != "auto":
            return self.token_id(spec), f"given {spec!r}"
        if (eod := self.backend.token_to_id(EOD_PIECE)) is not None:
            return eod, f"auto: the tokenizer has {EOD_PIECE!r}"
        eos = self.eos_token()
        if eos is not None and (eod := self.backend.token_to_id(eos)) is not None:
            return eod, f"auto: tokenizer_config.json's eos_token {eos!r} (no {EOD_PIECE!r} token)"
        raise HFTokenizerError(
            f"{self.path}: no EOD token: no {EOD_PIECE!r} token and no eos_token in a tokenizer_config.json "
            "beside it; set tokenize.eod_piece to a token or id:N"
        )

    @functools.cached_property
    def specials(self) -> tuple[list[int], list[int]]:
        """The ids the post-processor adds before and after a text's own (a template's BOS, say)."""
        plain = self.backend.encode("a", add_special_tokens=False).ids
        full = self.backend.encode("a", add_special_tokens=True).ids
        start = next(i for i in range(len(full)) if full[i : i + len(plain)] == plain)
        return full[:start], full[start + len(plain) :]

    @functools.cached_property
    def splits_safely(self) -> bool:
        """Whether cutting before a space that follows a non-space keeps this tokenizer's ids."""
        probe = "ab  cd ef gh   ij k\tl\nmn  x.y z, 12 3 東京 ü ß. \n  a"  # a space in every 5 characters
        whole = self.backend.encode(probe, add_special_tokens=False).ids
        return [i for p in self._cuts(probe, 6) for i in self.plain(p[0])] == whole

    def plain(self, text: str) -> list[int]:
        """The ids of ``text`` without the post-processor's tokens."""
        return self.backend.encode(text, add_special_tokens=False).ids

    def decode(self, ids: Sequence[int]) -> str:
        """The text of ``ids``, special tokens left out."""
        return self.backend.decode(list(ids))

    @property
    def last_routed(self) -> list[int]:
        """The texts (indices) the last ``finish`` (``encode_flat``) of this thread left to the library: the
        tokenize command encodes batches in several threads at once (``concurrent_calls``)."""
        return getattr(self._routed, "texts", [])

    @last_routed.setter
    def last_routed(self, texts: list[int]) -> None:
        self._routed.texts = texts

    @property
    def bos(self) -> int | None:
        """The token the post-processor puts before a text (a template's BOS), if any."""
        return self.specials[0][0] if self.specials[0] else None

    def _cuts(self, text: str, size: int) -> Iterator[tuple[str, bool | None]]:
        """(piece, whether the cut after it is before a space that follows a non-space; None: the last)."""
        start = 0
        while len(text) - start > size:
            cuts = [m.start() for m in CUT.finditer(text, start + 1, start + size)]
            if not cuts:
                yield text[start : start + size], False
                start += size
                continue
            yield text[start : cuts[-1]], True
            start = cuts[-1]
        yield text[start:], None

    def encode_long(self, text: str) -> Iterator[np.ndarray]:
        """The ids of a document too long to encode at once, piece by piece (see the module docstring)."""
        before, after = self.specials
        yield np.asarray(before, np.int32)
        for piece, safe in self._cuts(text, LONG_CHARS):
            if safe is not None and not (safe and self.splits_safely):
                with self._counting:
                    self.unsafe_cuts += 1
            yield np.asarray(self.plain(piece), np.int32)
        yield np.asarray(after, np.int32)

    def encode_flat(
        self,
        texts: Sequence[str],
        threads: int,
        specials: bool = True,
        utf8: tuple[bytes, np.ndarray] | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Encode ``texts`` (with the post-processor's tokens unless ``specials`` is False); return all ids
        concatenated (int32) and the per-text lengths (int64). ``utf8``: the texts' UTF-8 bytes and sizes
        (``byte_engine.utf8_batch``), when the caller has them."""
        self.last_routed = []
        if not texts:
            return no_ids()
        raw = self.encode_raw(texts, threads, utf8)
        return self._library_flat(texts, specials) if raw is None else self.finish(texts, *raw, specials)

    def concurrent_calls(self, threads: int) -> int:
        """How many batches to encode at once on ``threads`` threads: ``threads`` where the engine encodes a
        call on one thread (fastokens), else 1 (the engine, the memo or the library use the threads)."""
        return threads if self.engine is not None and self.engine.one_thread_per_call else 1

    def encode_raw(
        self, texts: Sequence[str], threads: int, utf8: tuple[bytes, np.ndarray] | None = None
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """The engine's (or the unit memo's) ids of ``texts`` and their lengths, before ``finish``; None when
        neither is in use (the library encodes: its pool, like the memo's, gets ``threads``)."""
        os.environ.setdefault("RAYON_NUM_THREADS", str(max(1, threads)))  # read when the pools start
        if self.engine is None and self.memo is None:
            return None
        if not texts:
            return no_ids()
        if self.memo is not None:  # the memo runs only where no engine library is used
            return self.memo.encode(*(utf8 or utf8_batch(texts)))
        return self.engine.encode(texts, utf8)

    def finish(
        self, texts: Sequence[str], ids: np.ndarray, lengths: np.ndarray, specials: bool = True
    ) -> tuple[np.ndarray, np.ndarray]:
        """``encode_raw``'s ids made final: the texts the engine may read differently (an unassigned code
        point) encoded by the library instead (their indices in ``last_routed``), and the post-processor's
        tokens added unless ``specials`` is False."""
        routed = [] if self.engine is None else self.engine.suspected(ids, lengths)
        self.last_routed = [int(i) for i in routed if has_unassigned(texts[i])]
        if self.last_routed:
            parts = np.split(ids, np.cumsum(lengths)[:-1])
            for i in self.last_routed:
                parts[i] = self._library_flat([texts[i]], False)[0]
            ids, lengths = np.concatenate(parts), np.fromiter(map(len, parts), np.int64, len(parts))
        return frame(ids, lengths, *self.specials) if specials else (ids, lengths)

    def _library_flat(self, texts: Sequence[str], specials: bool) -> tuple[np.ndarray, np.ndarray]:
        """``encode_flat`` by the ``tokenizers`` library."""
        if any(len(t) > LONG_CHARS for t in texts):
            arrays = [
                np.concatenate(list(self.encode_long(t)))
                if len(t) > LONG_CHARS
                else self._library_flat([t], specials)[0]
                for t in texts
            ]
        else:
            encodings = self.backend.encode_batch_fast(list(texts), add_special_tokens=specials)
            arrays = [np.asarray(e.ids, np.int32) for e in encodings]
        lengths = np.fromiter(map(len, arrays), np.int64, len(arrays))
        return np.concatenate(arrays), lengths
