"""The byte-level unit memo (tokens/engines/byte_memo): the ``tokenizers`` library's ids on every text, added
tokens that strip whitespace, the tokenizers it refuses, and the CLI's ``--engine memo``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from tokenizers import AddedToken, Tokenizer, normalizers, pre_tokenizers

from tests.tokens.engines.test_byte_engines import chosen, framed, texts
from tests.utils import byte_level_bpe, write_jsonl
from workflow_scripts.cli import main as snakepack
from workflow_scripts.tokens.engines import byte_memo
from workflow_scripts.tokens.engines.hf_tokenizer import HFTokenizer

ODD = ["x y\n", " \n z", "a  b", "x\t y", "z\n\n w", "tail  ", "  lead", "q\u00a0 r", "s \u3000t"]
ODD += ["u \u0301v", "1 234 5678"]


@pytest.fixture(scope="module", params=[False, True], ids=["gpt2", "llama3"])
def tok(request, tmp_path_factory) -> HFTokenizer:
    return HFTokenizer(byte_level_bpe(tmp_path_factory.mktemp("tok"), texts(1, 100), llama3=request.param))


def library(tok: HFTokenizer, sample: list[str]) -> list[list[int]]:
    return [e.ids for e in tok.backend.encode_batch(sample, add_special_tokens=True)]


def test_the_memo_gives_the_librarys_ids_on_every_text(tok: HFTokenizer) -> None:
    special = tok.piece(0)
    sample = [*texts(2), *ODD, f"a {special} b", f"{special}x", f"x{special[:-1]} {special[1:]}"] * 2
    encoder = chosen(
        tok, "memo", memo_entries=64, memo_unit_chars=8
    )  # a small memo: its generations turn over
    assert isinstance(encoder, byte_memo.ByteUnitMemo), encoder.stats(0)
    ids, lengths = framed(encoder.finish(sample, encoder.encode(sample)))
    stats = encoder.stats(0)["memo"]
    got = np.split(ids, np.cumsum(lengths)[:-1])
    assert [g.tolist() for g in got] == library(tok, sample)
    assert stats["enabled"] and stats["docs_encoded_whole"] >= 4  # those spelling a special token, twice
    assert 0 < stats["units_encoded"] < stats["units"] and stats["memo_entries"] <= 64
    assert chosen(tok, "memo", fast=False).stats(0)["memo"]["enabled"] is False  # the tokenizer keeps no memo


def test_added_tokens_that_strip_whitespace(tok: HFTokenizer, tmp_path: Path) -> None:
    backend = Tokenizer.from_str(tok.backend.to_str())
    backend.add_special_tokens([AddedToken("<both>", lstrip=True, rstrip=True)])
    stripping = HFTokenizer(tmp_path / "tokenizer.json", backend)
    sample = ["x <both> y", "x\t <both>\t y z", "<both> a", "a  <both>", *ODD]
    encoder = chosen(stripping, "memo", 1, memo_entries=1 << 10, memo_unit_chars=64)
    assert isinstance(encoder, byte_memo.ByteUnitMemo), encoder.stats(0)
    ids, lengths = framed(encoder.encode(sample))
    assert [g.tolist() for g in np.split(ids, np.cumsum(lengths)[:-1])] == library(stripping, sample)
    for units in (
        [b"x\t", b" <both>", b" y", b" z"],  # joined, <both> would take the spaces around it
        [b" y\n", b" \n", b" z", b"\n", b" \n"],  # a first unit " \n" joined would make "\n \n" one pretoken
    ):
        blob, sizes = b"".join(units), np.array([len(u) for u in units])
        flat, counts = byte_memo.LibraryUnits(backend)(blob, sizes)
        each = [backend.encode(u.decode(), add_special_tokens=False).ids for u in units]
        assert [g.tolist() for g in np.split(flat, np.cumsum(counts)[:-1])] == each


def test_the_plan_refuses_what_its_argument_does_not_cover(tok: HFTokenizer) -> None:
    assert byte_memo.plan(tok.backend)[0]
    digits = Tokenizer.from_str(tok.backend.to_str())
    digits.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(), digits.pre_tokenizer])
    lower = Tokenizer.from_str(tok.backend.to_str())
    lower.normalizer = normalizers.Lowercase()
    spaced = Tokenizer.from_str(tok.backend.to_str())
    spaced.add_special_tokens(["<a b>"])
    whys = [byte_memo.plan(t) for t in (digits, lower, spaced)]
    assert [exact for exact, _ in whys] == [False] * 3
    words = ["pre-tokenizer", "Lowercase", "whitespace"]
    assert [word in why for word, (_, why) in zip(words, whys, strict=True)] == [True] * 3


def test_the_cli_with_the_memo_writes_the_same_files(tok: HFTokenizer, tmp_path: Path) -> None:
    records = [{"text": t} for t in [*texts(5, 150), *ODD] if t.strip()]
    shard = write_jsonl(tmp_path / "in.jsonl", records)
    argv = ["tokenize", "--input", str(shard), "--tokenizer-model", tok.path, "--append-eod"]
    files = {}
    for engine in ("auto", "memo"):
        prefix = tmp_path / engine
        assert snakepack([*argv, "--output-prefix", str(prefix), "--engine", engine, "--workers", "2"]) == 0
        doc = f"{prefix}_text_document"
        files[engine] = [Path(doc + ext).read_bytes() for ext in (".bin", ".idx")]
        fast = json.loads(Path(doc + ".stats.json").read_text())["fast_encode"]
        assert fast["memo"]["enabled"] == (engine == "memo"), fast
    assert files["auto"] == files["memo"]
    assert fast["engine"] == "tokenizers" and 0 < fast["memo"]["hit_rate"] < 1
