"""gigatoken encodes a SentencePiece BPE model (tokens/engines/sp_gigatoken) only where it gives
SentencePiece's ids: control pieces spelled in text go to SentencePiece, a model it reads differently keeps
the unit memo."""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import sentencepiece as spm

from tests.tokens.engines.test_sp_memo import EXACT, FALLBACK, ours, texts, train
from tests.utils import write_jsonl
from workflow_scripts.core import cache
from workflow_scripts.tokens import reader
from workflow_scripts.tokens.engines import base, choose, sp_gigatoken
from workflow_scripts.tokens.engines.base import Encoded
from workflow_scripts.tokens.engines.ids import holding, utf8_batch
from workflow_scripts.tokens.engines.sp_gigatoken import SpGigatoken
from workflow_scripts.tokens.engines.sp_tokenizer import SentencePieceTokenizer
from workflow_scripts.tokens.framing import RecordSettings
from workflow_scripts.tokens.settings import TokenizeSettings

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


def split(encoded: Encoded) -> list[list[int]]:
    return [a.tolist() for a in np.split(encoded.ids, np.cumsum(encoded.lengths)[:-1])]


def loaded(model: bytes, folder: Path) -> SentencePieceTokenizer:
    """``model`` written to ``folder`` and loaded."""
    path = folder / "m.model"
    path.write_bytes(model)
    return SentencePieceTokenizer(path)


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
def test_engine_ids_equal_sentencepiece_or_it_stands_aside(name: str, tmp_path: Path) -> None:
    options = MODELS[name]
    model = train(**options)
    sp = spm.SentencePieceProcessor(model_proto=model)
    engine, note = SpGigatoken.start(loaded(model, tmp_path))
    if name not in SERVED:
        assert engine is None and note.startswith(ASIDE.get(name, "gigatoken cannot read this model")), note
        return
    assert engine is not None, note
    batch = docs(21)
    for threads in (1, 2):
        encoded = engine.on_threads(threads).encode(batch)
        assert split(encoded) == sp.encode(batch), threads
        assert encoded.routed, threads  # the batch spells added pieces


def test_our_trainers_bpe_model_is_served_by_gigatoken(tmp_path: Path) -> None:
    """The tokenizer the workflow trains (identity, whitespace kept, byte fallback) gets the engine."""
    model = train(**ours("bpe"))
    engine, note = SpGigatoken.start(loaded(model, tmp_path))
    assert engine is not None, note
    batch = ["<s> and </s> stay text", "plain"]
    encoded = engine.encode(batch)
    sp = spm.SentencePieceProcessor(model_proto=model)
    assert encoded.routed == [0] and split(encoded) == sp.encode(batch)


def test_a_model_gigatoken_reads_differently_keeps_the_memo(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The probe catches a difference: here gigatoken is handed another model's conversion."""
    model, other = train(**ours("bpe")), train(**ours("bpe", vocab_size="700"))
    wrong = sp_gigatoken.convert(other)
    monkeypatch.setattr(sp_gigatoken, "convert", lambda m: wrong)
    tok = loaded(model, tmp_path)
    engine, note = SpGigatoken.start(tok)
    assert engine is None and note.startswith("gigatoken differs from SentencePiece on "), note
    encoder = choose.choose(tok, TokenizeSettings(fast_encode=True, engine="auto", threads=1))
    assert encoder.name == "unit memo" and encoder.stats(0)["enabled"]  # the memo instead


def test_a_passed_model_is_recorded_and_not_probed_again(
    own_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = train(**ours("bpe"))
    first, note = SpGigatoken.start(loaded(model, own_cache.parent))
    assert first is not None and len(list(own_cache.glob("gigatoken-*-sentencepiece-*.json"))) == 1

    def no_probe(specials: list[str]) -> list[str]:
        raise AssertionError("probed again")

    monkeypatch.setattr(sp_gigatoken, "probe", no_probe)
    monkeypatch.setattr(sp_gigatoken, "convert", no_probe)
    monkeypatch.setattr(sp_gigatoken, "read_options", no_probe)  # its options passed too (40 ms a job)
    second, again = SpGigatoken.start(loaded(model, own_cache.parent))
    assert second is not None and again == note
    batch = docs(3)
    assert split(second.encode(batch)) == split(first.encode(batch))


def test_the_texts_left_to_sentencepiece_are_named_in_a_batch_with_a_long_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``routed`` holds the batch's indices of the texts gigatoken left to SentencePiece, also when a
    long text in the batch has each short one encoded alone."""
    tok = loaded(train(**ours("bpe")), tmp_path)
    monkeypatch.setattr(base, "LONG_CHARS", 50)
    batch = ["plain", "long " * 20, "<s> and </s> stay text", "more plain"]
    options = TokenizeSettings(fast_encode=True, engine="gigatoken", threads=1, memo_entries=1 << 10)
    encoder = choose.choose(tok, options)
    assert isinstance(encoder, SpGigatoken)
    encoded = encoder.encode(batch)
    assert encoded.routed == [2]
    assert split(encoded)[2] == tok.sp.encode(batch[2])
    assert encoder.encode(["<s>", "x"]).routed == [0]


def test_threads_encode_as_many_batches_at_once(tmp_path: Path) -> None:
    """With ``threads`` threads the stage hands the engine that many batches at once, each encoded on its
    caller's thread; concurrent batches still get SentencePiece's ids."""
    model = train(**ours("bpe"))
    engine, note = SpGigatoken.start(loaded(model, tmp_path))
    assert engine is not None, note
    engine = engine.on_threads(2)
    assert engine.concurrent_calls == 2
    sp = spm.SentencePieceProcessor(model_proto=model)
    batches = [docs(seed) for seed in range(4)]
    with ThreadPoolExecutor(2) as pool:
        for batch, encoded in zip(batches, pool.map(engine.encode, batches), strict=True):
            assert split(encoded) == sp.encode(batch)


def test_an_added_piece_is_found_in_its_text_only() -> None:
    """The texts spelling an added piece are found in their UTF-8 back to back: a match across two texts
    counts for neither, nor hides a match that starts inside it."""
    pattern = re.compile(b"<s>|</s>|<\\|endoftext\\|>")
    texts = ["x<", "s></s>", "plain", "<|endo", "ftext|>", "é<|endoftext|>"]
    assert holding(pattern, *utf8_batch(texts)) == [1, 5]
    assert holding(pattern, *utf8_batch(["a<", "s>b"])) == []
    assert holding(re.compile(b"ab|bc"), *utf8_batch(["a", "bc"])) == [1]  # "ab" across, "bc" inside


def test_the_reader_s_utf8_is_what_the_engine_encodes(tmp_path: Path) -> None:
    """Given the texts' UTF-8 (as the reader reads it), the ids and the texts left to SentencePiece are the
    same as from the strings."""
    model = train(**ours("bpe"))
    engine, note = SpGigatoken.start(loaded(model, tmp_path))
    assert engine is not None and engine.reads_utf8, note
    batch = [*docs(5), "a<", "s>b"]
    from_strings, from_utf8 = engine.encode(batch), engine.encode(batch, utf8_batch(batch))
    assert (
        split(from_utf8) == split(from_strings) == spm.SentencePieceProcessor(model_proto=model).encode(batch)
    )
    assert from_utf8.routed == from_strings.routed and len(batch) - 2 not in from_utf8.routed


def test_the_engine_decodes_only_the_texts_it_leaves_to_sentencepiece(tmp_path: Path) -> None:
    """A batch the reader read as UTF-8 holds no str per text; encoding it decodes only the texts spelling an
    added piece (for SentencePiece), and the ids are SentencePiece's."""
    model = train(**ours("bpe"))
    engine, note = SpGigatoken.start(loaded(model, tmp_path))
    assert engine is not None, note
    batch = ["plain text", "\u65e5\u672c\u8a9e text \u00e9", "<s> and </s> stay text", "more"] * 10
    path = write_jsonl(tmp_path / "in.jsonl", [{"text": t} for t in batch])
    [read] = reader.read_batches(str(path), RecordSettings(), 1 << 30, utf8=True)
    asked: list[int] = []

    class Counted(reader.Strings):
        def __getitem__(self, i: int) -> str:  # type: ignore[override]
            asked.append(i)
            return super().__getitem__(i)

    encoded = engine.encode(Counted(read), read.utf8_batch())
    assert split(encoded) == spm.SentencePieceProcessor(model_proto=model).encode(batch)
    assert read.texts == [None] * len(batch) and asked == encoded.routed == list(range(2, len(batch), 4))


ONE_THREAD = """
import sys
from workflow_scripts.tokens.engines.sp_gigatoken import SpGigatoken
from workflow_scripts.tokens.engines.sp_tokenizer import SentencePieceTokenizer
tokenizer = SentencePieceTokenizer(sys.argv[1])
for start in range(2):  # the first probes and records the model, the second loads it
    engine, note = SpGigatoken.start(tokenizer)
    assert engine is not None, note
texts = ["plain text", "\\u65e5\\u672c\\u8a9e \\u00e9", "<s> spelled", "x" * 999]
encoded = engine.encode(texts)
assert encoded.lengths.tolist() == [len(ids) for ids in tokenizer.sp.encode(texts)], encoded
print("awkward" in sys.modules)
"""


def test_one_thread_encodes_each_text_alone_without_awkward(tmp_path: Path) -> None:
    """On one thread (a small shard's job) each text is one gigatoken call: nothing imports awkward, whose
    import costs about 0.15 CPU seconds a job (its ids are SentencePiece's: the tests above, threads 1)."""
    path = tmp_path / "m.model"
    path.write_bytes(train(**ours("bpe")))
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "xdg")}  # a cache of its own
    run = subprocess.run(
        [sys.executable, "-c", ONE_THREAD, str(path)], capture_output=True, text=True, env=env, check=False
    )
    assert run.returncode == 0 and run.stdout.split() == ["False"], run.stderr


SMALL_SHARD = """
import sys
from workflow_scripts.tokens import encode
from workflow_scripts.tokens.engines.sp_tokenizer import SentencePieceTokenizer
from workflow_scripts.tokens.framing import resolve_settings
tokenizer = SentencePieceTokenizer(sys.argv[1])
settings = resolve_settings(tokenizer, eod="auto")
encode.tokenize_file(sys.argv[2], sys.argv[3], tokenizer, settings, workers=2, batch_bytes=int(sys.argv[4]))
print("awkward" in sys.modules)
"""


@pytest.mark.parametrize(("batch_bytes", "imported"), [(1 << 20, "False"), (200, "True")])
def test_a_shard_of_one_batch_is_encoded_on_one_thread(
    tmp_path: Path, batch_bytes: int, imported: str
) -> None:
    """Two threads encode two batches at once: a shard that is one batch takes the one-thread path (no
    awkward import, 0.15 CPU seconds of a small shard's job) and the same bytes; one of several keeps both."""
    path = tmp_path / "m.model"
    path.write_bytes(train(**ours("bpe")))
    shard = write_jsonl(tmp_path / "s.jsonl", [{"text": t} for t in texts(7)[:40]])
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    outputs = []
    for run_in in ("a", "b"):
        out = tmp_path / run_in / "out"
        out.parent.mkdir()
        size = str(batch_bytes if run_in == "a" else 1 << 20)
        run = subprocess.run(
            [sys.executable, "-c", SMALL_SHARD, str(path), str(shard), str(out), size],
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
        assert run.returncode == 0, run.stderr
        outputs.append((run.stdout.split(), (tmp_path / run_in / "out_text_document.bin").read_bytes()))
    assert outputs[0][0] == [imported] and outputs[1][0] == ["False"]
    assert outputs[0][1] == outputs[1][1]
