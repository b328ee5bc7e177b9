"""What every tokenizer kind and every encoder share.

``Tokenizer``: the shared base of a loaded tokenizer (a SentencePiece model, ``sp_tokenizer``; a
``tokenizer.json`` or GPT-2 pair, ``hf_tokenizer``): token lookup (``token_id``: a piece or token of the
model, or ``id:N``; one missing from the model is an error, never ``<unk>``), the EOD rule's frame (``eod``:
``auto`` is each kind's rule) and long documents. The library needs about 50 bytes a character, so a document
over ``LONG_CHARS`` (4 Mi characters) is encoded piece by piece (``encode_long``), cut where the kind starts a
unit anyway (a space after a non-space), which gives the same ids as the whole; a cut that has to fall
elsewhere, or a model for which that cut changes the ids, is counted (``unsafe_cuts``).

``Encoder``: the one protocol the stage loop talks to. Texts (or their UTF-8 bytes, when the encoder
``reads_utf8``) in; an ``Encoded`` out: the ids back to back, each text's count, the texts the engine left to
its library (``routed``) and the tokens still to put around each text (the post-processor's). ``finish`` is
the part of the work the stage runs in its main thread, beside the next batches' encoding. ``choose`` picks
the encoder for a tokenizer and the ``tokenize`` settings.
"""

from __future__ import annotations

import abc
import functools
import os
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from workflow_scripts.core.cli import UserError
from workflow_scripts.tokens.settings import LONG_CHARS


class TokenizerError(UserError, ValueError):
    """A tokenizer's files or a token specification that cannot be used."""


def no_ids() -> tuple[np.ndarray, np.ndarray]:
    """No ids (int32) and no lengths (int64): what encoding no text gives."""
    return np.empty(0, np.int32), np.empty(0, np.int64)


class Tokenizer(abc.ABC):
    """A loaded tokenizer: token lookup, the EOD rule, decoding and long documents cut into pieces."""

    kind = ""  # sentencepiece, hf or gpt2 (kinds.KINDS)
    cut_probe = ""  # a text with a cut every few characters (``splits_safely``)

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self.merges: str | None = None  # a GPT-2 vocabulary's merges file
        self.vocab_size = 0
        self.unsafe_cuts = 0  # cuts of long documents that may have changed ids (see ``pieces``)
        self._counting = threading.Lock()  # ``unsafe_cuts``: batches are encoded in several threads

    @abc.abstractmethod
    def lookup(self, spec: str) -> int:
        """The id of the piece or token ``spec``; one the model lacks is a ``TokenizerError``."""

    @abc.abstractmethod
    def auto_eod(self) -> tuple[int, str]:
        """The EOD id of the kind's ``auto`` rule and why (see each kind's module)."""

    @abc.abstractmethod
    def plain(self, text: str) -> list[int]:
        """The ids of ``text`` without the tokens a post-processor adds."""

    @abc.abstractmethod
    def decode(self, ids: Sequence[int]) -> str:
        """The text of ``ids``, control and special tokens left out."""

    @abc.abstractmethod
    def render(self, ids: Sequence[int]) -> str:
        """Decoded text, with control and special tokens shown as themselves."""

    @abc.abstractmethod
    def piece(self, token: int | None) -> str | None:
        """The piece or token string of ``token`` (None for None or an id the model does not have)."""

    @property
    @abc.abstractmethod
    def bos(self) -> int | None:
        """The model's BOS, if it has one."""

    @property
    def specials(self) -> tuple[list[int], list[int]]:
        """The ids a post-processor adds before and after a text's own (none here)."""
        return [], []

    @abc.abstractmethod
    def cut(self, text: str, start: int, end: int) -> int:
        """Where in ``text[start + 1 : end]`` the last cut that keeps the ids may fall (the kind starts a
        unit there), or -1 where none may."""

    def after_cut(self, cut: int) -> int:
        """Where the piece after a cut at ``cut`` starts."""
        return cut

    def token_id(self, spec: str) -> int:
        """The id of a piece or token, or of ``id:N``; one missing from the model is an error, never
        ``<unk>``."""
        if spec.startswith("id:"):
            try:
                token = int(spec[3:])
            except ValueError:
                raise TokenizerError(f"bad token id spec {spec!r} (expected id:N)") from None
            if not 0 <= token < self.vocab_size:
                raise TokenizerError(
                    f"token {spec} is outside the vocabulary of {self.path} (0..{self.vocab_size - 1})"
                )
            return token
        return self.lookup(spec)

    def eod(self, spec: str = "auto") -> tuple[int, str]:
        """The EOD id for ``spec`` and the rule that chose it: ``auto`` is the kind's rule (``auto_eod``), a
        piece, token or ``id:N`` overrides it."""
        if spec != "auto":
            return self.token_id(spec), f"given {spec!r}"
        return self.auto_eod()

    @functools.cached_property
    def splits_safely(self) -> bool:
        """Whether cutting where ``cut`` says keeps the ids of this model (``cut_probe`` cut every few
        characters)."""
        return [i for p, _ in self._cuts(self.cut_probe, 6) for i in self.plain(p)] == self.plain(
            self.cut_probe
        )

    def _cuts(self, text: str, size: int) -> Iterator[tuple[str, bool | None]]:
        """(piece, whether the cut after it is where the kind starts a unit; None for the last piece)."""
        start = 0
        while len(text) - start > size:
            cut = self.cut(text, start, start + size)
            if cut <= start:
                yield text[start : start + size], False
                start += size
                continue
            yield text[start:cut], True
            start = self.after_cut(cut)
        yield text[start:], None

    def pieces(self, text: str, size: int) -> Iterator[str]:
        """``text`` cut into pieces of at most about ``size`` characters that encode, one after the other, to
        the ids of the whole. A cut that has to fall elsewhere than ``cut`` says (a run of ``size``
        characters without such a place, or a model where cutting is not safe) is counted in
        ``unsafe_cuts``."""
        for piece, safe in self._cuts(text, size):
            if safe is not None and not (safe and self.splits_safely):
                with self._counting:
                    self.unsafe_cuts += 1
            yield piece

    def encode_long(self, text: str, specials: bool = True) -> Iterator[np.ndarray]:
        """The ids of a document too long to encode at once, piece by piece, with the post-processor's
        tokens around the whole (unless ``specials`` is False)."""
        before, after = self.specials if specials else ([], [])
        if before:
            yield np.asarray(before, np.int32)
        for piece in self.pieces(text, LONG_CHARS):
            yield np.asarray(self.plain(piece), np.int32)
        if after:
            yield np.asarray(after, np.int32)


def holds_long(texts: Sequence[str], utf8: tuple[bytes, np.ndarray] | None) -> bool:
    """Whether a text is over ``LONG_CHARS`` characters; with their UTF-8 sizes, none is where none is over
    ``LONG_CHARS`` bytes (then no text is looked at: a batch's may be decoded only when asked for)."""
    if utf8 is not None and (not len(utf8[1]) or int(utf8[1].max()) <= LONG_CHARS):
        return False
    return any(len(t) > LONG_CHARS for t in texts)


@dataclass(frozen=True)
class Encoded:
    """A batch's ids back to back (int32) and each text's count (int64), with the texts (indices) the engine
    left to its library (``routed``). ``before`` and ``after``: the post-processor's tokens that go around
    each text's ids and are not in them yet (the stage puts them in with BOS and EOD in one pass). Not
    ``final``: ``Encoder.finish`` has yet to check the ids."""

    ids: np.ndarray
    lengths: np.ndarray
    routed: list[int] = field(default_factory=list)
    before: Sequence[int] = ()
    after: Sequence[int] = ()
    final: bool = True


class Encoder(abc.ABC):
    """Encodes a tokenizer's texts in batches: the one protocol the stage loop talks to (``choose`` picks
    the encoder). ``encode`` runs in the stage's encoder threads (``concurrent_calls`` at once), ``finish``
    in its main thread; ``stats`` is the stats' ``fast_encode`` (said in the log too)."""

    name = ""  # the engine, as the stats name it
    reads_utf8 = False  # ``encode`` reads the texts' UTF-8 bytes (the reader makes them)
    cuts_long = (
        True  # a text over LONG_CHARS is cut into pieces (``Tokenizer.encode_long``), not encoded whole
    )

    def __init__(self, tokenizer: Any, threads: int, why: str) -> None:
        self.tokenizer = tokenizer
        self.threads = threads
        self.why = why  # why this encoder (and not a faster one)

    @property
    def concurrent_calls(self) -> int:
        """How many batches to encode at once on ``threads`` threads (1: the encoder uses them itself)."""
        return 1

    def encode(
        self, texts: Sequence[str], utf8: tuple[bytes, np.ndarray] | None = None, specials: bool = True
    ) -> Encoded:
        """The ids of ``texts`` (``utf8``: their UTF-8 bytes back to back and sizes, when the caller has
        them), with the post-processor's tokens (in the ids, or in ``before``/``after``) unless ``specials``
        is False."""
        if not texts:
            return Encoded(*no_ids())
        if self.cuts_long and holds_long(texts, utf8):
            return self._with_long(texts, specials)
        return self._encode(texts, utf8, specials)

    @abc.abstractmethod
    def _encode(self, texts: Sequence[str], utf8: tuple[bytes, np.ndarray] | None, specials: bool) -> Encoded:
        """``encode`` of a batch of texts none of which is to be cut."""

    def finish(self, texts: Sequence[str], encoded: Encoded) -> Encoded:
        """``encoded`` (the ids of ``texts``) made final."""
        return encoded

    @abc.abstractmethod
    def stats(self, routed: int) -> dict[str, Any]:
        """The stats' ``fast_encode``: the engine, why, and the documents it left to its library
        (``routed``: as the caller counted them) or its memo's figures; said in the log too."""

    def _with_long(self, texts: Sequence[str], specials: bool) -> Encoded:
        """A batch holding a long text: each text alone, the long ones in pieces."""
        arrays, routed = [], []
        for k, text in enumerate(texts):
            if len(text) > LONG_CHARS:
                arrays.append(np.concatenate(list(self.tokenizer.encode_long(text, specials))))
            else:
                one = self._encode([text], None, specials)
                arrays.append(one.ids)
                routed += [k] if one.routed else []
        lengths = np.fromiter(map(len, arrays), np.int64, len(arrays))
        return Encoded(np.concatenate(arrays), lengths, routed)
