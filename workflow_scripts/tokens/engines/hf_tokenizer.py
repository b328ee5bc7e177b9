"""A Hugging Face ``tokenizer.json`` (byte-level BPE and the like; ``HFTokenizer``), encoded as the trainers'
own preprocessing encodes it: GPT-NeoX's ``HFTokenizer`` (``Tokenizer.from_file(...).encode(text).ids``) and
Megatron-LM's ``HuggingFaceTokenizer`` (``AutoTokenizer(...)(text).input_ids``) both let the tokenizer's
post-processor add its special tokens (a template's BOS) and read a special token written in the text as
that token; so does this, to give the same ids. A GPT-2 ``vocab.json`` + ``merges.txt`` (``HFTokenizer.gpt2``)
is read as both trainers' ``GPT2BPETokenizer`` reads it (transformers' GPT-2 tokenizer; EOD
``<|endoftext|>``).

EOD (``eod``): ``auto`` picks ``<|endoftext|>`` when the tokenizer has that token (GPT-NeoX's
``HFTokenizer`` rule), else the ``eos_token`` of the ``tokenizer_config.json`` beside it (Megatron-LM's
``HuggingFaceTokenizer`` rule), else it is an error; a token or ``id:N`` overrides the rule.

``TokenizersEncoder``: the ``tokenizers`` library's ``encode_batch_fast`` (its Rayon pool is sized once per
process, from ``RAYON_NUM_THREADS``). Long documents are cut before a space that follows a non-space (where
byte-level pre-tokenizers start a word anyway), the post-processor's tokens added once around the whole.
"""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Sequence
from typing import Any

import numpy as np
from tokenizers import Tokenizer as Backend
from tokenizers import decoders, models, pre_tokenizers

from workflow_scripts.tokens.engines.base import Encoded, Encoder, Tokenizer, TokenizerError
from workflow_scripts.tokens.settings import EOD_PIECE

CUT = re.compile(r"(?<=\S) ")  # a space after a non-space: a byte-level pre-tokenizer starts a word there


class HFTokenizer(Tokenizer):
    """A ``tokenizer.json`` with validated token lookup."""

    kind = "hf"
    cut_probe = "ab  cd ef gh   ij k\tl\nmn  x.y z, 12 3 東京 ü ß. \n  a"  # a space in every 5 characters

    def __init__(self, path: str | os.PathLike[str], backend: Backend | None = None) -> None:
        super().__init__(path)
        self.from_file = backend is None  # read from ``path`` (a tokenizer.json) as it is
        try:
            self.backend = backend or Backend.from_file(self.path)
        except Exception as exc:  # tokenizers raises a bare Exception for a malformed file
            raise TokenizerError(f"{self.path}: cannot load the Hugging Face tokenizer: {exc}") from None
        self.vocab_size = self.backend.get_vocab_size(with_added_tokens=True)

    @classmethod
    def gpt2(cls, vocab: str, merges: str) -> HFTokenizer:
        """A GPT-2 ``vocab.json`` + ``merges.txt`` as GPT-NeoX's and Megatron-LM's ``GPT2BPETokenizer`` read
        them (transformers' GPT-2 tokenizer): byte-level BPE, no prefix space, no tokens added, and
        ``<|endoftext|>`` a special token (read as itself where the text spells it)."""
        try:
            backend = Backend(models.BPE.from_file(vocab, merges))
        except Exception as exc:  # tokenizers raises a bare Exception for a malformed file
            raise TokenizerError(f"{vocab}, {merges}: cannot load the GPT-2 BPE: {exc}") from None
        backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        backend.decoder = decoders.ByteLevel()
        if backend.token_to_id(EOD_PIECE) is not None:
            backend.add_special_tokens([EOD_PIECE])
        tokenizer = cls(vocab, backend)
        tokenizer.kind, tokenizer.merges = "gpt2", merges
        return tokenizer

    def lookup(self, spec: str) -> int:
        token = self.backend.token_to_id(spec)
        if token is None:
            raise TokenizerError(f"token {spec!r} is not in {self.path}")
        return token

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

    def auto_eod(self) -> tuple[int, str]:
        if (eod := self.backend.token_to_id(EOD_PIECE)) is not None:
            return eod, f"auto: the tokenizer has {EOD_PIECE!r}"
        eos = self.eos_token()
        if eos is not None and (eod := self.backend.token_to_id(eos)) is not None:
            return eod, f"auto: tokenizer_config.json's eos_token {eos!r} (no {EOD_PIECE!r} token)"
        raise TokenizerError(
            f"{self.path}: no EOD token: no {EOD_PIECE!r} token and no eos_token in a tokenizer_config.json "
            "beside it; set tokenize.eod_piece to a token or id:N"
        )

    def piece(self, token: int | None) -> str | None:
        return None if token is None else self.backend.id_to_token(token)

    def render(self, ids: Sequence[int]) -> str:
        return self.backend.decode(list(ids), skip_special_tokens=False)

    def plain(self, text: str) -> list[int]:
        return self.backend.encode(text, add_special_tokens=False).ids

    def decode(self, ids: Sequence[int]) -> str:
        return self.backend.decode(list(ids))

    @functools.cached_property
    def specials(self) -> tuple[list[int], list[int]]:
        """The ids the post-processor adds before and after a text's own (a template's BOS, say)."""
        plain = self.backend.encode("a", add_special_tokens=False).ids
        full = self.backend.encode("a", add_special_tokens=True).ids
        start = next(i for i in range(len(full)) if full[i : i + len(plain)] == plain)
        return full[:start], full[start + len(plain) :]

    @property
    def bos(self) -> int | None:
        """The token the post-processor puts before a text (a template's BOS), if any."""
        return self.specials[0][0] if self.specials[0] else None

    def cut(self, text: str, start: int, end: int) -> int:
        """Before the last space that follows a non-space."""
        cuts = [m.start() for m in CUT.finditer(text, start + 1, end)]
        return cuts[-1] if cuts else -1


class TokenizersEncoder(Encoder):
    """The ``tokenizers`` library's batched encode (the post-processor's tokens in the ids). ``why``: why no
    engine library; ``memo_why``: why no unit memo."""

    name = "tokenizers"

    def __init__(self, tokenizer: HFTokenizer, threads: int, why: str, memo_why: str) -> None:
        super().__init__(tokenizer, threads, why)
        self.memo_why = memo_why

    def _encode(self, texts: Sequence[str], utf8: object, specials: bool) -> Encoded:
        encodings = self.tokenizer.backend.encode_batch_fast(list(texts), add_special_tokens=specials)
        arrays = [np.asarray(e.ids, np.int32) for e in encodings]
        lengths = np.fromiter(map(len, arrays), np.int64, len(arrays))
        return Encoded(np.concatenate(arrays), lengths)

    def stats(self, routed: int) -> dict[str, Any]:
        memo = {"enabled": False, "why": self.memo_why}
        return {"enabled": False, "engine": self.name, "why": self.why, "memo": memo}
