"""A Hugging Face tokenizer.json (tokens/engines/hf_tokenizer): the EOD rule, token lookup, long documents cut
without changing the ids, SFT spans without the post-processor's tokens. Byte identity with the trainers'
own preprocessing is in test_compat."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.tokens.engines.test_byte_engines import chosen
from tests.utils import byte_level_bpe
from workflow_scripts.tokens.engines import base
from workflow_scripts.tokens.engines.base import TokenizerError
from workflow_scripts.tokens.engines.hf_tokenizer import HFTokenizer

TEXTS = [
    "The data of Rīga läuft über 東京. Straße, x.y  z!!\n\n  spaces\tand\ttabs 12345 🙂 <|endoftext|> done",
    "Ελληνικά κείμενα και русский текст, العربية, हिन्दी भाषा\r\n  indented   runs   of spaces ",
] * 40


@pytest.fixture(scope="module", params=[False, True], ids=["gpt2", "llama3"])
def tok(request, tmp_path_factory) -> HFTokenizer:
    return HFTokenizer(byte_level_bpe(tmp_path_factory.mktemp("tok"), TEXTS, llama3=request.param))


def test_eod_is_endoftext_else_the_configs_eos_token_else_an_error(tok: HFTokenizer, tmp_path: Path) -> None:
    eod, rule = tok.eod()
    if tok.backend.token_to_id("<|endoftext|>") is not None:
        assert tok.piece(eod) == "<|endoftext|>" and "has '<|endoftext|>'" in rule
    else:
        assert tok.piece(eod) == "<|end_of_text|>" and "eos_token" in rule
        config = Path(tok.path).parent / "tokenizer_config.json"
        alone = tmp_path / "tokenizer.json"
        alone.write_bytes(Path(tok.path).read_bytes())
        with pytest.raises(TokenizerError, match=r"no EOD token.*set tokenize\.eod_piece"):
            HFTokenizer(alone).eod()
        assert json.loads(config.read_text())["eos_token"] == "<|end_of_text|>"
    assert tok.eod("id:7") == (7, "given 'id:7'")


def test_a_token_missing_or_out_of_range_is_an_error(tok: HFTokenizer) -> None:
    with pytest.raises(TokenizerError, match="'<nope>' is not in"):
        tok.token_id("<nope>")
    with pytest.raises(TokenizerError, match="outside the vocabulary"):
        tok.token_id(f"id:{tok.vocab_size}")


def test_a_malformed_file_names_itself(tmp_path: Path) -> None:
    bad = tmp_path / "tokenizer.json"
    bad.write_text('{"model": {"type": "nothing"}}')
    with pytest.raises(TokenizerError, match=f"{bad}: cannot load"):
        HFTokenizer(bad)


def test_long_documents_cut_into_pieces_give_the_ids_of_the_whole(tok, monkeypatch) -> None:
    monkeypatch.setattr(base, "LONG_CHARS", 37)
    text = " ".join(TEXTS[:6]) + " tail"
    whole = tok.backend.encode(text).ids
    encoded = chosen(tok, threads=1, fast=False).encode([text, "short"])
    flat, lengths = encoded.ids, encoded.lengths
    assert flat[: lengths[0]].tolist() == whole and tok.splits_safely and tok.unsafe_cuts == 0
    tok.unsafe_cuts = 0
    list(tok.encode_long("x" * 100))  # no space to cut at: counted
    assert tok.unsafe_cuts == 2


def test_sft_spans_go_without_the_post_processors_tokens(tok: HFTokenizer) -> None:
    for encoder in (chosen(tok, threads=1, fast=False), chosen(tok, threads=1)):  # the library, an engine
        encoded = encoder.finish(
            ["hello there", "again"], encoder.encode(["hello there", "again"], specials=False)
        )
        assert not encoded.before and not encoded.after  # the post-processor adds nothing
    flat, lengths = encoded.ids, encoded.lengths
    plain = [tok.backend.encode(t, add_special_tokens=False).ids for t in ("hello there", "again")]
    assert flat.tolist() == plain[0] + plain[1] and lengths.tolist() == [len(p) for p in plain]
    assert flat.dtype == np.int32
