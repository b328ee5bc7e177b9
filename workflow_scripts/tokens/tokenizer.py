"""A SentencePiece model with validated token lookup and batched encoding to flat numpy arrays.

Tokens: EOD, BOS and SFT marker tokens are pieces of the model (looked up and validated: a piece missing
from the model is an error, where SentencePiece's ``piece_to_id`` would silently give ``<unk>``) or explicit
``id:N``.

EOD (``eod``): ``auto`` picks ``<|endoftext|>`` when the model has that piece (GPT-NeoX's ``SPMTokenizer``
rule), else the model's EOS (Megatron-LM's ``GPTSentencePieceTokenizer`` rule), else it is an error; never
``<unk>``, which is what GPT-NeoX silently uses for a model without ``<|endoftext|>``. A piece or ``id:N``
overrides the rule.

Encoding: SentencePiece's batched ``encode(..., num_threads=threads)`` (which releases the GIL), or, inside
``fast_encoding``, gigatoken (``sp_engine.SpEngine``) where it gives SentencePiece's ids on a probe of the
model, else ``fast_encode.FastEncoder`` (a memo of word-like units; the same ids). SentencePiece
needs about 50 bytes a character, so a document over ``LONG_CHARS`` (4 Mi characters) is encoded piece by
piece, cut where SentencePiece starts a unit anyway (a space after a non-space), which gives the same ids as
the whole; a cut that has to fall elsewhere is counted (``unsafe_cuts``).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import sys
from collections.abc import Iterator, Sequence

import numpy as np
import sentencepiece as spm

from workflow_scripts.core.cli import UserError
from workflow_scripts.tokens.fast_encode import FastEncoder, Plan, plan
from workflow_scripts.tokens.settings import EOD_PIECE, LONG_CHARS
from workflow_scripts.tokens.sp_engine import SpEngine


class TokenizerError(UserError, ValueError):
    """A tokenizer model or token specification that cannot be used."""


def no_ids() -> tuple[np.ndarray, np.ndarray]:
    """No ids (int32) and no lengths (int64): what encoding no text gives."""
    return np.empty(0, np.int32), np.empty(0, np.int64)


class Tokenizer:
    """A SentencePiece model with validated token lookup and batched encoding to flat numpy arrays."""

    kind = "sentencepiece"
    merges = None  # one file
    reads_utf8 = False  # encode_flat reads the strings

    def __init__(self, model_path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(model_path)
        try:
            self.sp = spm.SentencePieceProcessor(model_file=self.path)
        except (OSError, RuntimeError) as exc:
            raise TokenizerError(f"{self.path}: cannot load SentencePiece model: {exc}") from None
        self.vocab_size = self.sp.vocab_size()
        self.numpy_output = _has_numpy_output(self.sp)
        self.unsafe_cuts = 0  # cuts of long documents that may have changed ids (see ``pieces``)
        self.fast: SpEngine | FastEncoder | None = None  # set by ``fast_encoding``
        self.last_routed: list[int] = []  # texts of the last ``encode_flat`` the engine left to SentencePiece

    @functools.cached_property
    def fast_plan(self) -> tuple[Plan | None, str]:
        """Whether the fast path (``fast_encode``) is exact for this model: its plan, or None and why not
        (said once in the log)."""
        with open(self.path, "rb") as f:
            result, note = plan(f.read())
        if result is None:
            print(
                f"fast encoding off for {self.path}: {note}; SentencePiece encodes every text",
                file=sys.stderr,
            )
        return result, note

    @functools.cached_property
    def engine_start(self) -> tuple[SpEngine | None, str]:
        """gigatoken for this model where it gives SentencePiece's ids, or None and why not."""
        with open(self.path, "rb") as f:
            return SpEngine.start(f.read(), self.sp)

    @contextlib.contextmanager
    def fast_encoding(
        self, enabled: bool, workers: int, memo_entries: int, max_unit_chars: int, engine: str = "auto"
    ) -> Iterator[SpEngine | FastEncoder | None]:
        """Within the block ``encode_flat`` goes through gigatoken (``engine`` ``auto`` or ``gigatoken``,
        where it is exact; said once in the log) or else a fresh unit memo (SentencePiece with ``workers``
        threads for the units it lacks), when ``enabled`` and exact for the model; yields that encoder
        (None: SentencePiece alone). fastokens reads no SentencePiece model: ``fastokens`` gets the memo."""
        if enabled and engine == "fastokens":
            print("encoder: fastokens reads no SentencePiece model; the unit memo instead", file=sys.stderr)
        if enabled and engine in ("auto", "gigatoken"):
            sp_engine, note = self.engine_start
            print(f"encoder: {note}" + ("" if sp_engine else "; the unit memo instead"), file=sys.stderr)
            if sp_engine is not None:
                sp_engine.threads = workers
                self.fast = sp_engine
                try:
                    yield sp_engine
                finally:
                    self.fast = None
                return
        fast_plan = self.fast_plan[0] if enabled else None
        if fast_plan is None:
            yield None
            return
        self.fast = FastEncoder(fast_plan, workers, memo_entries, max_unit_chars)
        try:
            yield self.fast
        finally:
            self.fast = None

    def token_id(self, spec: str) -> int:
        """The id of a piece, or of ``id:N``; a piece missing from the model is an error, never ``<unk>``."""
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
        token = self.sp.piece_to_id(spec)
        if self.sp.id_to_piece(token) != spec:
            raise TokenizerError(
                f"piece {spec!r} is not in {self.path} (SentencePiece would silently use <unk> id {token})"
            )
        return token

    def piece(self, token: int | None) -> str | None:
        """The piece of ``token`` (None for None or an id the model does not have)."""
        return self.sp.id_to_piece(token) if token is not None and token < self.sp.get_piece_size() else None

    def render(self, ids: Sequence[int]) -> str:
        """Decoded text, with control and unknown tokens (which ``decode`` drops) shown as their pieces."""
        out: list[str] = []
        run: list[int] = []
        for i in ids:
            if self.sp.is_control(i) or self.sp.is_unknown(i):
                out.append(self.sp.decode(run) + self.sp.id_to_piece(i))
                run = []
            else:
                run.append(i)
        out.append(self.sp.decode(run))
        return "".join(out)

    def plain(self, text: str) -> list[int]:
        """The ids of ``text``."""
        return self.sp.encode(text)

    def decode(self, ids: Sequence[int]) -> str:
        """The text of ``ids``, control tokens left out."""
        return self.sp.decode(list(ids))

    @property
    def bos(self) -> int | None:
        """The model's BOS, if it has one."""
        return self.sp.bos_id() if self.sp.bos_id() >= 0 else None

    def eod(self, spec: str = "auto") -> tuple[int, str]:
        """The EOD id for ``spec`` and the rule that chose it (see the module docstring)."""
        if spec != "auto":
            return self.token_id(spec), f"given {spec!r}"
        if self.sp.id_to_piece(eod := self.sp.piece_to_id(EOD_PIECE)) == EOD_PIECE:
            return eod, f"auto: the model has {EOD_PIECE!r}"
        eos = self.sp.eos_id()
        if 0 <= eos < self.vocab_size and eos != self.sp.unk_id():
            return eos, f"auto: the model's EOS {self.sp.id_to_piece(eos)!r} (no {EOD_PIECE!r} piece)"
        raise TokenizerError(
            f"{self.path}: no EOD token: the model has no {EOD_PIECE!r} piece and no EOS; "
            "set tokenize.eod_piece to a piece or id:N"
        )

    @functools.cached_property
    def dummy_prefix(self) -> bool:
        """Whether the model adds a ``▁`` before the text (SentencePiece's ``add_dummy_prefix``)."""
        return self.sp.id_to_piece(self.sp.encode("a")[0]).startswith("\u2581")

    @functools.cached_property
    def splits_safely(self) -> bool:
        """Whether cutting at a space after a non-space keeps the ids of this model (not, e.g., without a
        dummy prefix but with ``remove_extra_whitespaces``, which drops a piece's leading space)."""
        probe = "ab  cd ef\n gh   ij k\tl mn  "  # cut at every space run (size 6)
        return [i for p, _ in self._cuts(probe, 6) for i in self.sp.encode(p)] == self.sp.encode(probe)

    def _cuts(self, text: str, size: int) -> Iterator[tuple[str, bool | None]]:
        """(piece, whether the cut after it is at a unit start; None for the last piece)."""
        start = 0
        while len(text) - start > size:
            cut = text.rfind(" ", start + 1, start + size)
            while cut > start and text[cut - 1] == " ":
                cut -= 1  # the start of the run of spaces
            if cut <= start:
                yield text[start : start + size], False
                start += size
                continue
            yield text[start:cut], True
            start = cut + 1 if self.dummy_prefix else cut
        yield text[start:], None

    def pieces(self, text: str, size: int) -> Iterator[str]:
        """``text`` cut into pieces of at most about ``size`` characters that encode, one after the other, to
        the ids of the whole: each cut is at a space that follows a non-space (SentencePiece starts a unit
        there), and with a dummy prefix that space is left for the model to add back. A cut that has to fall
        elsewhere (a run of ``size`` characters without such a space, or a model where cutting is not safe)
        is counted in ``unsafe_cuts``."""
        for piece, safe in self._cuts(text, size):
            if safe is not None and not (safe and self.splits_safely):
                self.unsafe_cuts += 1
            yield piece

    def encode_long(self, text: str) -> Iterator[np.ndarray]:
        """The ids of a document too long to encode at once (SentencePiece needs about 50 bytes a
        character), piece by piece."""
        for piece in self.pieces(text, LONG_CHARS):
            yield np.asarray(self.sp.encode(piece), np.int32)

    def concurrent_calls(self, threads: int) -> int:
        """1: SentencePiece encodes a batch on ``threads`` threads itself."""
        return 1

    def encode_raw(self, texts: Sequence[str], threads: int, utf8: object = None) -> None:
        """None: SentencePiece's ids need no finishing apart (``hf_tokenizer``'s do); ``encode_flat``."""
        return None

    def encode_flat(
        self, texts: Sequence[str], threads: int, specials: bool = True
    ) -> tuple[np.ndarray, np.ndarray]:
        """Encode ``texts``; return all ids concatenated (int32) and the per-text lengths (int64).
        ``specials`` is for other kinds (SentencePiece adds none)."""
        self.last_routed = []
        if not texts:
            return no_ids()
        texts = list(texts)
        long = any(len(t) > LONG_CHARS for t in texts)
        if self.fast is not None and not long:
            ids, lengths = self.fast.encode_flat(texts)
            if isinstance(self.fast, SpEngine):
                self.last_routed = self.fast.last_routed
            return ids, lengths
        if long:
            arrays, routed = [], []
            for k, text in enumerate(texts):
                if len(text) > LONG_CHARS:
                    arrays.append(np.concatenate(list(self.encode_long(text))))
                else:
                    arrays.append(self.encode_flat([text], threads)[0])
                    routed += [k] if self.last_routed else []
            self.last_routed = routed
            lengths = np.fromiter(map(len, arrays), np.int64, len(arrays))
            return np.concatenate(arrays), lengths
        if self.numpy_output:
            arrays = self.sp.encode(texts, num_threads=threads, out_type="numpy")
            lengths = np.fromiter(map(len, arrays), np.int64, len(arrays))
            return np.concatenate(arrays), lengths
        ids = self.sp.encode(texts, num_threads=threads)
        lengths = np.fromiter(map(len, ids), np.int64, len(ids))
        return np.fromiter(itertools.chain.from_iterable(ids), np.int32, int(lengths.sum())), lengths


def _has_numpy_output(sp: spm.SentencePieceProcessor) -> bool:
    """Whether this SentencePiece returns numpy arrays (``out_type="numpy"``; 0.2.3 does), which saves
    building a Python int per token; older releases give int lists, flattened with ``np.fromiter``."""
    try:
        sp.encode(["a"], out_type="numpy")
    except (ValueError, TypeError):
        return False
    return True
