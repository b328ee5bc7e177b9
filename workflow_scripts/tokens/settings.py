"""Settings of the tokens stage: the trained tokenizer (config ``tokenizer``) and encoding (``tokenize``)."""

from __future__ import annotations

from dataclasses import dataclass

from workflow_scripts.core.settings import setting

EOD_PIECE = "<|endoftext|>"  # GPT-NeoX's EOD piece; the trained tokenizer's EOS
LONG_CHARS = 1 << 22  # documents longer than this (4 Mi characters) are encoded in pieces


@dataclass(frozen=True)
class TokenizerSettings:
    """Settings of a trained tokenizer (config ``tokenizer``) and the seed of its line sample."""

    vocab_size: int = setting("tokenizer", "vocab_size")
    model_type: str = setting("tokenizer", "model_type")
    max_sentences: int = setting("tokenizer", "max_sentences", flags=("--input-sentence-size",))
    character_coverage: float = setting("tokenizer", "character_coverage")
    control_symbols: tuple[str, ...] = setting("tokenizer", "control_symbols")
    seed: int = setting("", "seed")


@dataclass(frozen=True)
class TokenizeSettings:
    """The tokenize stage's settings (config ``tokenize``)."""

    mode: str = setting("tokenize", "mode")
    append_eod: bool = setting("tokenize", "append_eod")
    eod_piece: str = setting("tokenize", "eod_piece")
    prepend_bos: bool = setting("tokenize", "prepend_bos")
    bos_piece: str = setting("tokenize", "bos_piece")
    min_tokens: int = setting("tokenize", "min_tokens")
    sft_markers: dict[str, str] = setting("tokenize", "sft_markers")
    threads: int = setting("tokenize", "threads", flags=("--workers",))
    batch_mb: float = setting("tokenize", "batch_mb")
    fast_encode: bool = setting("tokenize", "fast_encode")
    engine: str = setting("tokenize", "engine")
    memo_entries: int = setting("tokenize", "memo_entries")
    memo_unit_chars: int = setting("tokenize", "memo_unit_chars")
