"""gigatoken encodes a SentencePiece BPE model only where it gives SentencePiece's ids: control pieces
spelled in text go to SentencePiece, a model it reads differently keeps the unit memo."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
import sentencepiece as spm

from tests.tokens.test_fast_encode import EXACT, FALLBACK, ours, texts, train
from workflow_scripts.core import cache
from workflow_scripts.tokens import sp_engine
from workflow_scripts.tokens.sp_engine import SpEngine

CONTROL_TEXT = [
    "<s>",
    "a</s>b",
    " <|endoftext|> ",
    "<|user|>hi<|assistant|>",
    "<s",
    "<unk>",
    "<0x41>",
    "<tab>@@",
]


@pytest.fixture(autouse=True)
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(cache, "CACHE", tmp_path / "cache")
    return tmp_path / "cache"


def docs(seed: int) -> list[str]:
    """Adversarial text of every language, random Unicode, and control pieces spelled in words."""
    rng = random.Random(seed)
    out = texts(seed)
    return out + [f"{t[:5]}{rng.choice(CONTROL_TEXT)}{t[5:]}" for t in out[:200]]


def split(flat: np.ndarray, lengths: np.ndarray) -> list[list[int]]:
    return [a.tolist() for a in np.split(flat, np.cumsum(lengths)[:-1])]


IDENTITY_BYTES = {"model_type": "bpe", "byte_fallback": True, "normalization_rule_name": "identity"}
MODELS = {name: options for name, options in EXACT.items()} | {n: o for n, (o, _) in FALLBACK.items()}
MODELS |= {
    "llama_like": IDENTITY_BYTES | {"remove_extra_whitespaces": False, "split_digits": True},
    "identity_bytes_ws_removed": IDENTITY_BYTES | {"user_defined_symbols": ["<u>", "▁x"]},
}
SERVED = {"ours_bpe", "ours_bpe_no_dummy", "llama_like"}  # BPE, byte fallback, identity, whitespace kept
ASIDE = {  # the others lack byte fallback or are not BPE: gigatoken cannot read them
    "nfkc_bytes_no_dummy": "a normalizer",
    "identity_bytes_ws_removed": "gigatoken differs from SentencePiece on ",  # the probe finds it
}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_engine_ids_equal_sentencepiece_or_it_stands_aside(name: str) -> None:
    options = MODELS[name]
    model = train(**options)
    sp = spm.SentencePieceProcessor(model_proto=model)
    engine, note = SpEngine.start(model, sp)
    if name not in SERVED:
        assert engine is None and note.startswith(ASIDE.get(name, "gigatoken cannot read this model")), note
        return
    assert engine is not None, note
    batch = docs(21)
    for threads in (1, 2):
        engine.threads = threads
        assert split(*engine.encode_flat(batch)) == sp.encode(batch), threads
        assert engine.last_routed, threads  # the batch spells added pieces


def test_our_trainers_bpe_model_is_served_by_gigatoken() -> None:
    """The tokenizer the workflow trains (identity, whitespace kept, byte fallback) gets the engine."""
    model = train(**ours("bpe"))
    engine, note = SpEngine.start(model, spm.SentencePieceProcessor(model_proto=model))
    assert engine is not None, note
    batch = ["<s> and </s> stay text", "plain"]
    flat, lengths = engine.encode_flat(batch)
    sp = spm.SentencePieceProcessor(model_proto=model)
    assert engine.last_routed == [0] and split(flat, lengths) == sp.encode(batch)


def test_a_model_gigatoken_reads_differently_keeps_the_memo(monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe catches a difference: here gigatoken is handed another model's conversion."""
    model, other = train(**ours("bpe")), train(**ours("bpe", vocab_size="700"))
    wrong = sp_engine.convert(other)
    monkeypatch.setattr(sp_engine, "convert", lambda m: wrong)
    engine, note = SpEngine.start(model, spm.SentencePieceProcessor(model_proto=model))
    assert engine is None and note.startswith("gigatoken differs from SentencePiece on "), note


def test_a_passed_model_is_recorded_and_not_probed_again(
    own_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = train(**ours("bpe"))
    sp = spm.SentencePieceProcessor(model_proto=model)
    first, note = SpEngine.start(model, sp)
    assert first is not None and len(list(own_cache.glob("gigatoken-*-sentencepiece-*.json"))) == 1

    def no_probe(specials: list[str]) -> list[str]:
        raise AssertionError("probed again")

    monkeypatch.setattr(sp_engine, "probe", no_probe)
    monkeypatch.setattr(sp_engine, "convert", no_probe)
    second, again = SpEngine.start(model, sp)
    assert second is not None and again == note
    batch = docs(3)
    assert split(*second.encode_flat(batch)) == split(*first.encode_flat(batch))


def test_the_texts_left_to_sentencepiece_are_named_in_a_batch_with_a_long_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``last_routed`` holds the batch's indices of the texts gigatoken left to SentencePiece, also when a
    long text in the batch has each short one encoded alone."""
    from workflow_scripts.tokens import tokenizer as sp_tokenizer

    path = tmp_path / "ours.model"
    path.write_bytes(train(**ours("bpe")))
    tok = sp_tokenizer.Tokenizer(path)
    monkeypatch.setattr(sp_tokenizer, "LONG_CHARS", 50)
    batch = ["plain", "long " * 20, "<s> and </s> stay text", "more plain"]
    with tok.fast_encoding(True, 1, 1 << 10, 64, "gigatoken") as engine:
        assert isinstance(engine, SpEngine)
        flat, lengths = tok.encode_flat(batch, 1)
        assert tok.last_routed == [2]
        assert split(flat, lengths)[2] == tok.sp.encode(batch[2])
        tok.encode_flat(["<s>", "x"], 1)
        assert tok.last_routed == [0]
