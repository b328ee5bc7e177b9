"""The trainers' tokenizer classes for the data's tokenizer: the ``tokenizer_type`` each trainer is given
for a kind of tokenizer, and the end of document it then takes (the configs check it against the data's;
train/hf checks a model's ``eos_token_id`` against it)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from workflow_scripts.tokens.engines.base import Tokenizer

EOD_PIECE = "<|endoftext|>"

TRAINER_TOKENIZERS = {  # (tokenizer kind, trainer) -> the trainer's tokenizer_type
    ("sentencepiece", "neox"): "SPMTokenizer",
    ("hf", "neox"): "HFTokenizer",
    ("gpt2", "neox"): "GPT2BPETokenizer",
    ("sentencepiece", "megatron"): "GPTSentencePieceTokenizer",
    ("hf", "megatron"): "HuggingFaceTokenizer",
    ("gpt2", "megatron"): "GPT2BPETokenizer",
}


def trainer_eod(tok: Tokenizer, trainer: str) -> tuple[int | None, str]:
    """The EOD id ``trainer`` takes with ``tok`` and its rule: GPT-NeoX's tokenizers take
    ``<|endoftext|>`` (SentencePiece's ``piece_to_id`` gives ``<unk>`` without it); Megatron-LM's take the
    model's EOS (SentencePiece), the folder's ``eos_token`` (``HuggingFaceTokenizer``) or GPT-2's
    ``<|endoftext|>``."""
    if tok.kind == "sentencepiece" and trainer == "neox":
        return tok.sp.piece_to_id(EOD_PIECE), f"piece_to_id('{EOD_PIECE}')"
    if tok.kind == "sentencepiece":
        return tok.sp.eos_id(), "the model's EOS"
    if trainer == "neox" or tok.kind == "gpt2":
        return tok.backend.token_to_id(EOD_PIECE), f"token_to_id('{EOD_PIECE}')"
    eos = tok.eos_token()
    return (None if eos is None else tok.backend.token_to_id(eos)), f"eos_token {eos!r}"
