"""A SentencePiece model (``SentencePieceTokenizer``) and SentencePiece's own batched encoding of it
(``SentencePieceEncoder``: ``encode(..., num_threads=threads)``, which releases the GIL).

Tokens: EOD, BOS and SFT marker tokens are pieces of the model (looked up and validated: a piece missing
from the model is an error, where SentencePiece's ``piece_to_id`` would silently give ``<unk>``) or explicit
``id:N``.

EOD (``eod``): ``auto`` picks ``<|endoftext|>`` when the model has that piece (GPT-NeoX's ``SPMTokenizer``
rule), else the model's EOS (Megatron-LM's ``GPTSentencePieceTokenizer`` rule), else it is an error; never
``<unk>``, which is what GPT-NeoX silently uses for a model without ``<|endoftext|>``. A piece or ``id:N``
overrides the rule.

Long documents are cut where SentencePiece starts a unit anyway (a space after a non-space; with a dummy
prefix that space is left for the model to add back).
"""

from __future__ import annotations

import functools
import itertools
import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import sentencepiece as spm

from workflow_scripts.tokens.engines.base import Encoded, Encoder, Tokenizer, TokenizerError
from workflow_scripts.tokens.settings import EOD_PIECE


class SentencePieceTokenizer(Tokenizer):
    """A SentencePiece model with validated token lookup."""

    kind = "sentencepiece"
    cut_probe = "ab  cd ef\n gh   ij k\tl mn  "  # cut at every space run (size 6)

    def __init__(self, model_path: str | os.PathLike[str]) -> None:
        super().__init__(model_path)
        try:
            self.sp = spm.SentencePieceProcessor(model_file=self.path)
        except (OSError, RuntimeError) as exc:
            raise TokenizerError(f"{self.path}: cannot load SentencePiece model: {exc}") from None
        self.vocab_size = self.sp.vocab_size()
        self.numpy_output = _has_numpy_output(self.sp)

    @functools.cached_property
    def model(self) -> bytes:
        """The model file's bytes (what the fast encoders read)."""
        with open(self.path, "rb") as f:
            return f.read()

    def lookup(self, spec: str) -> int:
        token = self.sp.piece_to_id(spec)
        if self.sp.id_to_piece(token) != spec:
            raise TokenizerError(
                f"piece {spec!r} is not in {self.path} (SentencePiece would silently use <unk> id {token})"
            )
        return token

    def auto_eod(self) -> tuple[int, str]:
        if self.sp.id_to_piece(eod := self.sp.piece_to_id(EOD_PIECE)) == EOD_PIECE:
            return eod, f"auto: the model has {EOD_PIECE!r}"
        eos = self.sp.eos_id()
        if 0 <= eos < self.vocab_size and eos != self.sp.unk_id():
            return eos, f"auto: the model's EOS {self.sp.id_to_piece(eos)!r} (no {EOD_PIECE!r} piece)"
        raise TokenizerError(
            f"{self.path}: no EOD token: the model has no {EOD_PIECE!r} piece and no EOS; "
            "set tokenize.eod_piece to a piece or id:N"
        )

    def piece(self, token: int | None) -> str | None:
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
        return self.sp.encode(text)

    def decode(self, ids: Sequence[int]) -> str:
        return self.sp.decode(list(ids))

    @property
    def bos(self) -> int | None:
        return self.sp.bos_id() if self.sp.bos_id() >= 0 else None

    @functools.cached_property
    def dummy_prefix(self) -> bool:
        """Whether the model adds a ``▁`` before the text (SentencePiece's ``add_dummy_prefix``)."""
        return self.sp.id_to_piece(self.sp.encode("a")[0]).startswith("\u2581")

    def cut(self, text: str, start: int, end: int) -> int:
        """The start of the last run of spaces (SentencePiece starts a unit at a space after a non-space;
        not, e.g., without a dummy prefix but with ``remove_extra_whitespaces``: ``splits_safely``)."""
        cut = text.rfind(" ", start + 1, end)
        while cut > start and text[cut - 1] == " ":
            cut -= 1  # the start of the run of spaces
        return cut

    def after_cut(self, cut: int) -> int:
        """With a dummy prefix the space at the cut is left for the model to add back."""
        return cut + 1 if self.dummy_prefix else cut


class SentencePieceEncoder(Encoder):
    """SentencePiece's batched encode on ``threads`` threads (numpy arrays out where this SentencePiece
    gives them)."""

    name = "sentencepiece"

    def _encode(self, texts: Sequence[str], utf8: object, specials: bool) -> Encoded:
        sp = self.tokenizer.sp
        if self.tokenizer.numpy_output:
            arrays = sp.encode(list(texts), num_threads=self.threads, out_type="numpy")
            lengths = np.fromiter(map(len, arrays), np.int64, len(arrays))
            return Encoded(np.concatenate(arrays), lengths)
        ids = sp.encode(list(texts), num_threads=self.threads)
        lengths = np.fromiter(map(len, ids), np.int64, len(ids))
        return Encoded(np.fromiter(itertools.chain.from_iterable(ids), np.int32, int(lengths.sum())), lengths)

    def stats(self, routed: int) -> dict[str, Any]:
        return {"enabled": False, "why": self.why}


def _has_numpy_output(sp: spm.SentencePieceProcessor) -> bool:
    """Whether this SentencePiece returns numpy arrays (``out_type="numpy"``; 0.2.3 does), which saves
    building a Python int per token; older releases give int lists, flattened with ``np.fromiter``."""
    try:
        sp.encode(["a"], out_type="numpy")
    except (ValueError, TypeError):
        return False
    return True
