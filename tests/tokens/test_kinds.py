"""Which tokenizer a config names (tokens/kinds): the kind read from the file or given, GPT-2's merges file
beside its vocabulary, the identity digest, and the byte-level BPE the workflow trains (``hf-bpe``)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from tests.utils import byte_level_bpe, gpt2_pair, write_jsonl
from workflow_scripts.cli import main as snakepack
from workflow_scripts.tokens import train_tokenizer
from workflow_scripts.tokens.engines import choose
from workflow_scripts.tokens.kinds import TokenizerFiles, TokenizerKindError, merges_beside
from workflow_scripts.tokens.settings import EOD_PIECE, TokenizeSettings

TEXTS = ["The data of Rīga läuft über 東京. x.y  z!!\n spaces\tand\ttabs 12345 🙂 done"] * 20


def test_the_kind_comes_from_the_file(tmp_path: Path) -> None:
    model = byte_level_bpe(tmp_path / "tok", TEXTS)
    vocab, merges = gpt2_pair(model, tmp_path / "gpt2")
    spm = tmp_path / "m.model"
    spm.write_bytes(b"\n\x0bprotobuf")
    assert TokenizerFiles.resolve(str(model)) == TokenizerFiles("hf", str(model))
    assert TokenizerFiles.resolve(str(vocab)) == TokenizerFiles("gpt2", str(vocab), str(merges))
    assert TokenizerFiles.resolve(str(spm)).kind == "sentencepiece"
    assert TokenizerFiles.resolve(str(vocab), "gpt2", str(merges)).paths == [str(vocab), str(merges)]
    with pytest.raises(TokenizerKindError, match=r"neither a Hugging Face tokenizer\.json"):
        (tmp_path / "other.json").write_text('{"a": "b"}')
        TokenizerFiles.resolve(str(tmp_path / "other.json"))
    with pytest.raises(TokenizerKindError, match=r"goes with a GPT-2 vocab\.json, not hf"):
        TokenizerFiles.resolve(str(model), "hf", str(merges))
    with pytest.raises(TokenizerKindError, match="tokenizer type 'bpe'"):
        TokenizerFiles.resolve(str(model), "bpe")


def test_gpt2_merges_are_named_after_the_vocabulary(tmp_path: Path) -> None:
    assert merges_beside("/d/gpt2-vocab.json") == "/d/gpt2-merges.txt"
    assert merges_beside("vocab.json") == "merges.txt"
    assert merges_beside("/my.vocab/x-vocab-v2.json") == "/my.vocab/x-merges-v2.txt"
    with pytest.raises(TokenizerKindError, match=r"set tokenizer\.merges"):
        merges_beside("/d/words.json")


def test_the_identity_is_the_files_digest(tmp_path: Path) -> None:
    model = byte_level_bpe(tmp_path / "tok", TEXTS)
    vocab, merges = gpt2_pair(model, tmp_path / "gpt2")
    assert TokenizerFiles.resolve(str(model)).sha256() == hashlib.sha256(model.read_bytes()).hexdigest()
    pair = TokenizerFiles.resolve(str(vocab))
    before = pair.sha256()
    merges.write_text(merges.read_text() + "\n")
    assert pair.sha256() != before  # either file changes the identity


def test_hf_bpe_training_is_deterministic_reserves_the_control_tokens_and_round_trips(tmp_path: Path) -> None:
    shard = write_jsonl(tmp_path / "in.jsonl", [{"text": t + str(i)} for i, t in enumerate(TEXTS)])
    argv = [str(shard), "--kind", "hf-bpe", "--vocab-size", "400", "--control-symbols", "<|user|>", EOD_PIECE]
    for out in ("a", "b"):
        assert train_tokenizer.main([*argv, "--output-dir", str(tmp_path / out)]) == 0
    first = (tmp_path / "a" / "tokenizer.json").read_bytes()
    assert first == (tmp_path / "b" / "tokenizer.json").read_bytes()
    merges = json.loads(first)["model"]["merges"]
    assert merges and all(isinstance(m, str) and m.count(" ") == 1 for m in merges)  # tokenizers 0.15
    tok = TokenizerFiles.resolve(str(tmp_path / "a" / "tokenizer.json")).load()
    assert [tok.piece(i) for i in (0, 1)] == [EOD_PIECE, "<|user|>"]
    assert tok.eod() == (0, f"auto: the tokenizer has '{EOD_PIECE}'") and tok.eos_token() == EOD_PIECE
    encoded = choose.choose(tok, TokenizeSettings(fast_encode=False, threads=1)).encode(TEXTS[:2])
    ids, lengths = encoded.ids, encoded.lengths
    assert tok.specials == ([], []) and len(lengths) == 2
    assert tok.render(ids[: lengths[0]].tolist()) == TEXTS[0]  # byte-level: lossless
    with pytest.raises(SystemExit):
        train_tokenizer.main([str(shard), "--kind", "hf-bpe"])  # no --output-dir


def test_a_gpt2_pair_through_tokenize_import_and_inspect(tmp_path: Path, capsys) -> None:
    vocab, merges = gpt2_pair(byte_level_bpe(tmp_path / "tok", TEXTS), tmp_path / "gpt2")
    records = [{"text": f"{t} <|endoftext|> {i}"} for i, t in enumerate(TEXTS)]
    shard = write_jsonl(tmp_path / "in.jsonl", records)
    out = tmp_path / "out"
    argv = ["tokenize", "--input", str(shard), "--output-prefix", str(out), "--append-eod"]
    assert snakepack([*argv, "--tokenizer-model", str(vocab)]) == 0
    stats = json.loads((tmp_path / "out_text_document.stats.json").read_text())
    assert (stats["tokenizer_type"], stats["tokenizer_merges"]) == ("gpt2", str(merges))
    assert stats["tokenizer_sha256"] == TokenizerFiles.resolve(str(vocab)).sha256()
    prefix = str(tmp_path / "out_text_document")
    argv = ["import-tokenized", "--prefix", prefix, "--output-prefix", str(tmp_path / "imp")]
    assert snakepack([*argv, "--tokenizer-model", str(vocab), "--tokenizer-merges", str(merges)]) == 0
    imported = json.loads((tmp_path / "imp.stats.json").read_text())
    assert imported["tokenizer_sha256"] == stats["tokenizer_sha256"] and imported["eod_id"] == stats["eod_id"]
    capsys.readouterr()
    assert snakepack(["inspect", prefix, "-n", "1", "--tokenizer-model", str(vocab)]) == 0
    shown = capsys.readouterr().out
    assert f"{TEXTS[0]} <|endoftext|> 0<|endoftext|>" in shown  # text, the spelled token and the EOD
