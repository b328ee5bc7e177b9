"""A SentencePiece model (tokens/engines/sp_tokenizer): the EOD rule, token lookup, long documents cut
without changing the ids."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sentencepiece as spm

from tests.tokens.test_encode import LONG_TEXTS, run_tokenize
from workflow_scripts.core.indexed_dataset import IndexedDataset
from workflow_scripts.tokens.engines import base, choose
from workflow_scripts.tokens.engines.base import TokenizerError
from workflow_scripts.tokens.engines.sp_tokenizer import SentencePieceTokenizer
from workflow_scripts.tokens.framing import resolve_settings
from workflow_scripts.tokens.settings import TokenizeSettings


def foreign_model(corpus: list[Path], path: Path, **options: object) -> SentencePieceTokenizer:
    """A SentencePiece model trained elsewhere: SentencePiece's own defaults plus ``options``."""
    lines = [json.loads(line)["text"] for line in corpus[0].read_text(encoding="utf-8").splitlines()]
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_prefix=str(path),
        vocab_size=200,
        hard_vocab_limit=False,
        minloglevel=2,
        **options,
    )
    return SentencePieceTokenizer(path.with_suffix(".model"))


@pytest.mark.parametrize(
    ("options", "piece", "rule"),
    [
        ({}, "</s>", "the model's EOS '</s>'"),  # Megatron-LM's GPTSentencePieceTokenizer rule
        ({"user_defined_symbols": ["<|endoftext|>"]}, "<|endoftext|>", "has '<|endoftext|>'"),  # GPT-NeoX's
        ({"control_symbols": ["<|endoftext|>"], "eos_id": -1}, "<|endoftext|>", "has '<|endoftext|>'"),
    ],
)
def test_eod_rule_for_foreign_models(
    corpus: list[Path], tmp_path: Path, options: dict, piece: str, rule: str
) -> None:
    tokenizer = foreign_model(corpus, tmp_path / "m", **options)
    eod, why = tokenizer.eod("auto")
    assert tokenizer.sp.id_to_piece(eod) == piece and eod != tokenizer.sp.unk_id() and rule in why
    assert tokenizer.eod("id:5") == (5, "given 'id:5'")
    assert tokenizer.eod("<s>")[0] == tokenizer.sp.bos_id()
    stats, prefix = run_tokenize(tokenizer, corpus[0], tmp_path / "out", eod="auto")
    assert (stats["eod_id"], stats["eod_piece"]) == (eod, piece) and rule in stats["eod_rule"]
    assert {IndexedDataset(prefix).document(i).tolist()[-1] for i in range(stats["docs_out"])} == {eod}


def test_eod_rule_refuses_a_model_without_eod(corpus: list[Path], tmp_path: Path) -> None:
    tokenizer = foreign_model(corpus, tmp_path / "m", eos_id=-1)
    with pytest.raises(TokenizerError, match=r"m\.model: no EOD token: .* set tokenize\.eod_piece"):
        tokenizer.eod("auto")
    assert tokenizer.eod("id:1")[0] == 1


def test_eod_rule_on_the_trained_model(tokenizer: SentencePieceTokenizer) -> None:
    assert tokenizer.eod()[0] == tokenizer.sp.eos_id() == tokenizer.token_id("<|endoftext|>")


def test_token_lookup_validates(tokenizer: SentencePieceTokenizer) -> None:
    assert tokenizer.token_id("<|endoftext|>") == tokenizer.sp.piece_to_id("<|endoftext|>") > 2
    assert tokenizer.token_id("id:7") == 7
    assert tokenizer.token_id("<unk>") == tokenizer.sp.unk_id()
    with pytest.raises(TokenizerError, match="silently use <unk>"):
        tokenizer.token_id("<|missing|>")
    with pytest.raises(TokenizerError, match="outside the vocabulary"):
        tokenizer.token_id(f"id:{tokenizer.vocab_size}")
    with pytest.raises(TokenizerError, match="id:N"):
        tokenizer.token_id("id:x")
    with pytest.raises(TokenizerError, match="needs at least one"):
        resolve_settings(tokenizer, sft=True)


@pytest.mark.parametrize(
    "options",
    [
        None,
        {},
        {"add_dummy_prefix": False},
        {"normalization_rule_name": "nmt_nfkc", "remove_extra_whitespaces": True},
    ],
)
def test_long_documents_encode_in_pieces_to_the_same_ids(
    tokenizer: SentencePieceTokenizer,
    corpus: list[Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    options: dict | None,
) -> None:
    model = tokenizer if options is None else foreign_model(corpus, tmp_path / "m", **options)
    monkeypatch.setattr(base, "LONG_CHARS", 37)
    library = choose.choose(model, TokenizeSettings(fast_encode=False, threads=1))
    for text in LONG_TEXTS:
        before = model.unsafe_cuts
        pieces = list(model.pieces(text, 37))
        unsafe = model.unsafe_cuts - before
        assert len(pieces) > 5 and max(map(len, pieces)) <= 37
        encoded = library.encode([text, "short one"])
        flat, lengths = encoded.ids, encoded.lengths
        if unsafe == 0:
            assert flat[: lengths[0]].tolist() == model.sp.encode(text), (options, text[:40])
        elif model.splits_safely:  # only where 37 characters pass without a space after a non-space
            assert text.startswith("東京")
    cjk = "東京の天気は晴れです" * 20  # no space at all: cut where it must, and counted
    before = model.unsafe_cuts
    assert len(list(model.pieces(cjk, 37))) == 6 and model.unsafe_cuts - before == 5
