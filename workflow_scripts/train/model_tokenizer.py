"""The model's tokenizer must be the data's: checked before any GPU hour is spent.

A Hugging Face folder's tokenizer (``tokenizer.model``, SentencePiece, or ``tokenizer.json``) must give every
id of the data's SentencePiece model the same piece, its ``vocab_size`` must hold them all (GPT-NeoX pads
the data's count up), and its ``eos_token_id`` must be the data's end of document (GPT-NeoX's
``SPMTokenizer``: the ``<|endoftext|>`` piece). Continued pretraining on data tokenized otherwise trains on
the wrong embeddings without a single error; here it stops the plan, naming both tokenizers.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from workflow_scripts.core.cli import UserError

EOD_PIECE = "<|endoftext|>"
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


def hf_pieces(hf_dir: str) -> tuple[str, Callable[[int], str | None]]:
    """(the tokenizer file, id -> piece) of a Hugging Face folder."""
    spm_file, json_file = (os.path.join(hf_dir, n) for n in ("tokenizer.model", "tokenizer.json"))
    if os.path.isfile(spm_file):
        import sentencepiece as spm

        sp = spm.SentencePieceProcessor(model_file=spm_file)
        return spm_file, lambda i: sp.id_to_piece(i) if i < sp.get_piece_size() else None
    if os.path.isfile(json_file):
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(json_file)
        return json_file, tok.id_to_token
    raise TokenizerMismatch(f"{hf_dir}: no tokenizer.model or tokenizer.json to compare with the data's")


def match(hf_dir: str, config: dict[str, Any], data_model: str) -> DataTokenizer:
    """The data tokenizer's size and EOD, once the model's tokenizer is shown to be the same."""
    import sentencepiece as spm

    from workflow_scripts.tokens.kinds import detect

    if (kind := detect(data_model)) != "sentencepiece":
        raise TokenizerMismatch(
            f"{data_model}: a model in and out (train.init_from.hf, train.export) needs a SentencePiece data "
            f"tokenizer for now; this one is {kind}"
        )
    sp = spm.SentencePieceProcessor(model_file=data_model)
    size, eod = sp.get_piece_size(), sp.piece_to_id(EOD_PIECE)
    model_file, piece = hf_pieces(hf_dir)
    both = f"the model's tokenizer {model_file} and the data's {data_model}"
    vocab = int(config.get("vocab_size") or 0)
    if vocab < size:
        raise TokenizerMismatch(f"{both}: the model's vocab_size {vocab} < the data's {size} pieces")
    differ = [i for i in range(size) if piece(i) != sp.id_to_piece(i)]
    if differ:
        shown = ", ".join(f"id {i}: {piece(i)!r} vs {sp.id_to_piece(i)!r}" for i in differ[:SHOWN])
        raise TokenizerMismatch(f"{both} differ at {len(differ)} of {size} ids ({shown})")
    eos = config.get("eos_token_id")
    eos_ids = eos if isinstance(eos, list) else [eos]
    if eod not in eos_ids:
        raise TokenizerMismatch(
            f"{both}: the data's end of document is id {eod} ({EOD_PIECE}), the model's eos_token_id {eos}"
        )
    return DataTokenizer(size, eod)
