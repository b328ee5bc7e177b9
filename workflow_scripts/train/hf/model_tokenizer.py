"""The model's tokenizer must be the data's: checked before any GPU hour is spent.

A Hugging Face folder's tokenizer (``tokenizer.model``, ``tokenizer.json`` or GPT-2's ``vocab.json``; the
file of the data tokenizer's kind first) must give every id of the data's tokenizer (any kind) the same
piece, its ``vocab_size`` must hold them all (GPT-NeoX pads the data's count up), and its ``eos_token_id``
must be the end of document GPT-NeoX takes with the data's tokenizer (train/trainer_tokenizers).
Continued pretraining on data tokenized otherwise trains on the wrong embeddings without a single error;
here it stops the plan, naming both tokenizers.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from workflow_scripts.core.cli import UserError
from workflow_scripts.train.trainer_tokenizers import EOD_PIECE, trainer_eod

if TYPE_CHECKING:
    from workflow_scripts.tokens.engines.base import Tokenizer
    from workflow_scripts.tokens.kinds import TokenizerFiles

SHOWN = 5  # differing ids named in the message


class TokenizerMismatch(UserError, ValueError):
    """The model's tokenizer is not the data's; the message names both and the first differences."""


@dataclass(frozen=True)
class DataTokenizer:
    vocab_size: int
    eod: int


def padded(size: int, multiple: int) -> int:
    """GPT-NeoX's padded vocabulary: the next multiple of ``make_vocab_size_divisible_by`` x TP."""
    return int(math.ceil(size / multiple) * multiple)


FOLDER_FILES = {  # the data tokenizer's kind -> a Hugging Face folder's tokenizer files, in preference order
    "sentencepiece": ("tokenizer.model", "tokenizer.json", "vocab.json"),
    "hf": ("tokenizer.json", "tokenizer.model", "vocab.json"),
    "gpt2": ("tokenizer.json", "vocab.json", "tokenizer.model"),
}


def hf_pieces(hf_dir: str, kind: str = "sentencepiece") -> tuple[str, Callable[[int], str | None]]:
    """(the tokenizer file, id -> piece) of a Hugging Face folder, its file of the data's ``kind`` first."""
    paths = [os.path.join(hf_dir, name) for name in FOLDER_FILES[kind]]
    path = next((p for p in paths if os.path.isfile(p)), None)
    if path is None:
        raise TokenizerMismatch(f"{hf_dir}: no {', '.join(FOLDER_FILES[kind])} to compare with the data's")
    if path.endswith(".model"):
        import sentencepiece as spm

        sp = spm.SentencePieceProcessor(model_file=path)
        return path, lambda i: sp.id_to_piece(i) if i < sp.get_piece_size() else None
    if path.endswith("tokenizer.json"):
        from tokenizers import Tokenizer as Backend

        return path, Backend.from_file(path).id_to_token
    with open(path, encoding="utf-8") as f:
        tokens = {i: t for t, i in json.load(f).items()}
    return path, tokens.get


def neox_eod(tok: Tokenizer) -> int:
    """The end of document GPT-NeoX takes with ``tok`` (its ``SPMTokenizer``, ``HFTokenizer`` and
    ``GPT2BPETokenizer``: ``<|endoftext|>``), or a ``TokenizerMismatch`` saying the tokenizer lacks it."""
    eod, rule = trainer_eod(tok, "neox")
    if eod is None or tok.piece(eod) != EOD_PIECE:
        raise TokenizerMismatch(
            f"{tok.path}: GPT-NeoX takes EOD = {rule}, a token this tokenizer lacks; a model in or out "
            f"(train.init_from.hf, train.export) needs a data tokenizer with {EOD_PIECE!r}"
        )
    return eod


def match(hf_dir: str, config: dict[str, Any], data: TokenizerFiles) -> DataTokenizer:
    """The data tokenizer's size and EOD, once the model's tokenizer is shown to be the same."""
    tok = data.load()
    size, eod = tok.vocab_size, neox_eod(tok)
    model_file, piece = hf_pieces(hf_dir, data.kind)
    both = f"the model's tokenizer {model_file} and the data's {data.model}"
    vocab = int(config.get("vocab_size") or 0)
    if vocab < size:
        raise TokenizerMismatch(f"{both}: the model's vocab_size {vocab} < the data's {size} pieces")
    differ = [i for i in range(size) if piece(i) != tok.piece(i)]
    if differ:
        shown = ", ".join(f"id {i}: {piece(i)!r} vs {tok.piece(i)!r}" for i in differ[:SHOWN])
        raise TokenizerMismatch(f"{both} differ at {len(differ)} of {size} ids ({shown})")
    eos = config.get("eos_token_id")
    eos_ids = eos if isinstance(eos, list) else [eos]
    if eod not in eos_ids:
        raise TokenizerMismatch(
            f"{both}: the data's end of document is id {eod} ({EOD_PIECE}), the model's eos_token_id {eos}"
        )
    return DataTokenizer(size, eod)
