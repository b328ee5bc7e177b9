"""fastokens and gigatoken as the byte-level encoders (tokens/engines/byte_engines, picked by choose): used
only where they give the ``tokenizers`` library's ids, documents with unassigned code points routed to the
library, the template's tokens framed."""

from __future__ import annotations

import dataclasses
import os
import random
from concurrent.futures import Future
from pathlib import Path

import numpy as np
import orjson
import pytest
from tokenizers import Tokenizer, models, pre_tokenizers

from tests.utils import byte_level_bpe, write_jsonl
from workflow_scripts.core import cache
from workflow_scripts.core.indexed_dataset import IndexedDataset
from workflow_scripts.tokens.engines import byte_engines, choose
from workflow_scripts.tokens.engines.base import Encoded, Encoder
from workflow_scripts.tokens.engines.byte_engines import (
    ENGINES,
    EngineEncoder,
    Fastokens,
    Gigatoken,
    is_suspect,
)
from workflow_scripts.tokens.engines.hf_tokenizer import HFTokenizer, TokenizersEncoder
from workflow_scripts.tokens.engines.probes import has_unassigned
from workflow_scripts.tokens.framing import frame
from workflow_scripts.tokens.kinds import TokenizerFiles
from workflow_scripts.tokens.settings import TokenizeSettings

WORDS = ["Rīga", "東京", "русский", "العربية", "🙂👍🏽", "it's", "12345", "a\u00a0b", "c\u2028d", "\r\n"]


def clean(values: list[str]) -> list[str]:
    """Lone surrogates (not valid UTF-8) replaced."""
    return [v.encode("utf-8", "surrogatepass").decode("utf-8", "replace") for v in values]


def texts(seed: int, n: int = 300) -> list[str]:
    rng = random.Random(seed)
    out = [" ".join(rng.choices(WORDS, k=rng.randint(1, 30))) for _ in range(n)]
    out += ["".join(chr(rng.randrange(0x20, 0x40000)) for _ in range(50)) for _ in range(n)]  # any code point
    return [*clean(out), "", "<|endoftext|>x"]


@pytest.fixture(autouse=True)
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(cache, "CACHE", tmp_path / "cache")
    monkeypatch.setattr(byte_engines, "_LOADED", {})  # each test builds its engines
    return tmp_path / "cache"


def chosen(
    tok: HFTokenizer, engine: str = "auto", threads: int = 2, fast: bool = True, **memo: int
) -> Encoder:
    """``choose``'s encoder for ``tok`` (the unit memo's sizes, ``memo_entries`` and ``memo_unit_chars``, 0
    unless given)."""
    sizes = {"memo_entries": 0, "memo_unit_chars": 0} | memo
    options = TokenizeSettings(fast_encode=fast, engine=engine, threads=threads, **sizes)
    return choose.choose(tok, options)


def framed(encoded: Encoded) -> tuple[np.ndarray, np.ndarray]:
    """The ids with the post-processor's tokens the encoder left to the caller."""
    return frame(encoded.ids, encoded.lengths, encoded.before, encoded.after)


@pytest.fixture(scope="module", params=[False, True], ids=["gpt2", "llama3"])
def tok(request, tmp_path_factory) -> HFTokenizer:
    sample = texts(1, 100)
    return HFTokenizer(byte_level_bpe(tmp_path_factory.mktemp("tok"), sample, llama3=request.param))


@pytest.mark.parametrize("name", list(ENGINES))
def test_the_engine_gives_the_librarys_ids_on_every_text(tok: HFTokenizer, name: str) -> None:
    sample = texts(2)
    encodings = tok.backend.encode_batch(sample, add_special_tokens=True)
    expected = [np.asarray(e.ids, np.int32) for e in encodings]
    encoder = chosen(tok, name)
    assert isinstance(encoder, EngineEncoder) and encoder.engine.library == name, encoder.why
    assert encoder.reads_utf8 == (name == "gigatoken")
    encoded = encoder.finish(sample, encoder.encode(sample))
    ids, lengths = framed(encoded)
    assert encoded.routed == [i for i, t in enumerate(sample) if has_unassigned(t)]
    assert 0 < len(encoded.routed) < len(sample)  # random code points include unassigned ones
    assert lengths.tolist() == [len(e) for e in expected]
    assert np.array_equal(ids, np.concatenate(expected))
    assert isinstance(chosen(tok, name, fast=False), TokenizersEncoder)  # the tokenizer keeps no engine


@pytest.mark.parametrize("name", list(ENGINES))
def test_fastokens_takes_a_batch_a_thread(tok: HFTokenizer, name: str) -> None:
    """fastokens encodes each call on one thread, so the tokenize command encodes as many batches at once as
    it has threads; gigatoken, the memo and the library take the threads in one call."""
    assert chosen(tok, name, 3, fast=False).concurrent_calls == 1
    assert chosen(tok, name, 3).concurrent_calls == (3 if name == "fastokens" else 1)
    if name == "fastokens":
        assert os.environ["FASTOKENS_BPE_THREADS"] == "1"  # read once, at its first encode


def test_the_librarys_pool_gets_the_threads_asked_for(
    tok: HFTokenizer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without an engine (``fast_encode`` off, or none exact) the ``tokenizers`` library encodes, on a pool
    sized from ``RAYON_NUM_THREADS`` when it starts: set from the threads asked for, as with an engine."""
    monkeypatch.delenv("RAYON_NUM_THREADS", raising=False)
    encoder = chosen(tok, threads=3, fast=False)
    assert isinstance(encoder, TokenizersEncoder)
    encoded = encoder.finish(["some text", "more"], encoder.encode(["some text", "more"]))
    assert os.environ["RAYON_NUM_THREADS"] == "3" and len(encoded.lengths) == 2 and encoded.routed == []


def test_a_setting_gigatoken_reads_differently_keeps_fastokens(tmp_path: Path) -> None:
    path = byte_level_bpe(tmp_path, texts(3, 50))
    backend = Tokenizer.from_file(str(path))
    backend.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(), backend.pre_tokenizer])
    engine, why = Gigatoken.start(backend, ["<|endoftext|>"])
    assert engine is None and "Digits" in why
    engine, why = byte_engines.start(backend, ["<|endoftext|>"], "auto", 1)
    assert isinstance(engine, Fastokens), why
    sample = texts(6)
    ids, lengths = engine.encode(sample)
    expected = [e.ids for e in backend.encode_batch(sample, add_special_tokens=False)]
    assert [x.tolist() for x in np.split(ids, np.cumsum(lengths)[:-1])] == expected


def test_auto_takes_the_next_engine_and_says_why_not_the_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = Tokenizer.from_file(str(byte_level_bpe(tmp_path, texts(3, 50))))

    def refuse(*_: object) -> None:
        raise ValueError("unsupported normalizer type: NFKC")

    monkeypatch.setattr(Fastokens, "load", staticmethod(refuse))
    engine, why = byte_engines.start(backend, ["<|endoftext|>"], "auto", 1)
    assert isinstance(engine, Gigatoken) and why.startswith("gigatoken "), why
    engine, why = byte_engines.start(backend, ["<|endoftext|>"], "fastokens", 1)
    assert engine is None and why == "fastokens cannot read this tokenizer: unsupported normalizer type: NFKC"


def test_the_engine_built_before_the_tokenizer_loads_is_the_one_used(tmp_path: Path) -> None:
    """``prebuild`` starts fastokens' build from the tokenizer.json before the library reads it; ``choose``
    takes that build up (one build), exact as ever."""
    path = str(byte_level_bpe(tmp_path, texts(3, 50)))
    files, options = TokenizerFiles("hf", path), TokenizeSettings(threads=2)
    choose.prebuild(files, dataclasses.replace(options, engine="memo"))
    choose.prebuild(files, dataclasses.replace(options, engine="gigatoken"))  # from the library's: not before
    choose.prebuild(files, dataclasses.replace(options, fast_encode=False))
    choose.prebuild(TokenizerFiles("sentencepiece", path), options)  # not a tokenizer.json
    assert byte_engines._LOADED == {}
    choose.prebuild(files, dataclasses.replace(options, engine="auto"))
    [(key, built)] = byte_engines._LOADED.items()
    assert key[0] == "fastokens" and key[2] == 2
    tok = HFTokenizer(path)
    sample = texts(7)
    encoder = chosen(tok, "auto")
    assert isinstance(encoder, EngineEncoder) and isinstance(encoder.engine, Fastokens), encoder.why
    assert encoder.engine._impl is built
    ids, lengths = framed(encoder.finish(sample, encoder.encode(sample)))
    expected = [e.ids for e in tok.backend.encode_batch(sample, add_special_tokens=True)]
    assert [x.tolist() for x in np.split(ids, np.cumsum(lengths)[:-1])] == expected
    assert list(byte_engines._LOADED.values()) == [built]


@pytest.mark.parametrize("engine", list(ENGINES.values()), ids=list(ENGINES))
def test_a_tokenizer_that_passed_skips_the_probe_next_time(
    tmp_path: Path, own_cache: Path, monkeypatch: pytest.MonkeyPatch, engine: type[Fastokens | Gigatoken]
) -> None:
    backend = Tokenizer.from_file(str(byte_level_bpe(tmp_path, texts(5, 50))))
    first, why = engine.start(backend, ["<|endoftext|>"])
    assert first is not None, why
    assert len(list(own_cache.iterdir())) == 2  # the pass and the suspect tokens
    monkeypatch.setattr(byte_engines, "differs", lambda *_: "the probe ran")
    again, why_again = engine.start(backend, ["<|endoftext|>"])
    assert again is not None and why_again == why
    assert np.array_equal(again.suspects, first.suspects) and first.suspects.any()
    backend.add_special_tokens(["<|other|>"])  # another tokenizer: probed again
    assert engine.start(backend, ["<|endoftext|>", "<|other|>"]) == (None, "the probe ran")


def test_unassigned_code_points_and_framing() -> None:
    assert not has_unassigned("plain ascii") and not has_unassigned("東京 Rīga 🙂")
    assert has_unassigned("x\u0378y")  # unassigned in every Unicode version so far
    assert has_unassigned("東\u0378") and has_unassigned("🙂\U000e0080")  # in 2- and 4-byte strings
    ids, lengths = frame(np.array([5, 6, 7], np.int32), np.array([2, 0, 1]), [1], [2, 3])
    assert ids.tolist() == [1, 5, 6, 2, 3, 1, 2, 3, 1, 7, 2, 3] and lengths.tolist() == [5, 3, 4]
    keep = np.array([True, False, True])
    ids, lengths = frame(np.array([5, 6, 7], np.int32), np.array([2, 0, 1]), [1, 9], [2], keep)
    assert ids.tolist() == [1, 9, 5, 6, 2, 1, 9, 7, 2] and lengths.tolist() == [5, 4]
    ids, lengths = frame(np.array([5, 6, 7], np.int32), np.array([2, 0, 1]), keep=keep)
    assert ids.tolist() == [5, 6, 7] and lengths.tolist() == [2, 1]
    big = np.array([5, 65535, 70000], np.int32)
    ids, lengths = frame(big, np.array([2, 1]), [1], [2], keep[:2], np.uint16)  # the misfit dropped
    assert ids.dtype == np.uint16 and ids.tolist() == [1, 5, 65535, 2] and lengths.tolist() == [4]
    with pytest.raises(ValueError, match="token id 70000 does not fit 2 bytes"):
        frame(big, np.array([2, 1]), [1], [2], None, np.uint16)
    with pytest.raises(ValueError, match="token id -3 does not fit 4 bytes"):
        frame(np.array([-3], np.int32), np.array([1]))
    with pytest.raises(ValueError, match="token id 70000 does not fit 2 bytes"):
        frame(np.array([5], np.int32), np.array([1]), [70000], [], None, np.uint16)
    with pytest.raises(ValueError, match="lengths sum to 4 but 3 ids were given"):
        frame(np.array([5, 6, 7], np.int32), np.array([2, 2]))


def test_the_byte_level_vocabulary_is_gigatokens_reading(tok: HFTokenizer) -> None:
    engine, why = Gigatoken.start(tok.backend, [])
    assert engine is not None, why
    assert byte_engines.byte_level_vocab(tok.backend) == engine.impl.vocab
    backend = Tokenizer.from_str(tok.backend.to_str())
    backend.add_tokens(["▁x"])  # an added token: its content
    vocab = byte_engines.byte_level_vocab(backend)
    assert vocab[backend.token_to_id("▁x")] == "▁x".encode()


def test_a_vocabulary_of_another_kind_is_checked_everywhere() -> None:
    """A SentencePiece-style BPE (``▁`` for a space, byte fallback): its ``<0xE3>`` is that byte (a suspect:
    it may start an unassigned code point), its other non-ASCII tokens are suspect whatever they hold."""
    pieces = ["<unk>", "<0xE3>", "<0x41>", "▁", "a", "▁a", "東"]
    model = models.BPE(
        {p: i for i, p in enumerate(pieces)}, [("▁", "a")], unk_token="<unk>", byte_fallback=True
    )
    vocab = byte_engines.byte_level_vocab(Tokenizer(model))
    assert vocab[1] == b"\xe3" and vocab[2] == b"A" and vocab[4] == b"a"
    table = byte_engines.suspect_tokens(vocab, len(pieces))
    assert table.tolist() == [False, True, False, True, False, True, True]
    plain = byte_engines.byte_level_vocab(Tokenizer(models.BPE({p: i for i, p in enumerate(pieces)}, [])))
    assert plain[1] == b"<0xE3>"  # without byte fallback it is text


@pytest.mark.parametrize("name", list(ENGINES))
def test_suspect_tokens_find_every_text_with_an_unassigned_code_point(tok: HFTokenizer, name: str) -> None:
    assert is_suspect("x\u0378".encode()) and is_suspect(b"\xcd")  # whole, or its first byte (U+0340..)
    assert is_suspect("a\U000e0080".encode()[:3])  # cut after its third byte
    assert not is_suspect("東京 🙂".encode()) and not is_suspect(b"\xe6") and not is_suspect(b"\xb8\x80")
    sample = texts(4)
    encoder = chosen(tok, name)
    assert isinstance(encoder, EngineEncoder), encoder.why
    engine = encoder.engine
    suspected = set(engine.suspected(*engine.encode(sample)).tolist())
    holding = {i for i, t in enumerate(sample) if has_unassigned(t)}
    assert holding and holding <= suspected


def test_suspected_names_the_texts_of_suspect_ids() -> None:
    suspects = np.zeros(10, bool)
    suspects[7] = True
    lengths = np.full(300, 1000, np.int64)
    lengths[[5, 6]] = 0, 2000  # an empty text
    ids = np.zeros(int(lengths.sum()), np.int32)
    at = [0, 65_535, 65_536, 131_071, 299_999]  # texts' ends and starts, the first and the last id
    ids[at] = 7
    engine = byte_engines.Fastokens(Future(), "0", suspects)
    assert engine.suspected(ids, lengths).tolist() == [0, 65, 131, 299]
    assert engine.suspected(ids[:0], lengths[:0]).tolist() == []
    ids[10] = 10
    with pytest.raises(ValueError, match="token id 10 is outside the vocabulary"):
        engine.suspected(ids, lengths)


def test_the_stats_name_the_engine(tok: HFTokenizer) -> None:
    stats = chosen(tok, threads=1).stats(3)
    assert stats["enabled"] and stats["engine"].startswith("fastokens ") and "probe texts" in stats["why"]
    assert stats["memo"] == {"enabled": False, "why": "fastokens encodes whole documents (faster)"}
    assert stats["routed_to_tokenizers"] == 3  # the documents the caller counted
    off = {"enabled": False, "why": "turned off"}
    assert chosen(tok, threads=1, fast=False).stats(0) == {**off, "engine": "tokenizers", "memo": off}
    assert orjson.dumps(stats)


def test_every_engine_writes_the_same_files_and_counts_the_bytes(
    tok: HFTokenizer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """fastokens reads the strings (their UTF-8 sizes measured after encoding), gigatoken and the memo the
    reader's UTF-8 bytes; a long document is encoded in pieces by the library in every case."""
    from workflow_scripts.tokens import encode, reader
    from workflow_scripts.tokens.framing import resolve_settings

    monkeypatch.setattr(reader, "LONG_CHARS", 4000)
    sample = [t for t in texts(8) if t.strip()] + [" ".join(texts(9, 40))]  # the last one is long
    assert len(sample[-1]) > 4000 and all(len(t) <= 4000 for t in sample[:-1])
    path = write_jsonl(tmp_path / "in.jsonl", [{"text": t} for t in sample])
    settings = resolve_settings(tok, eod="auto")
    files, sizes = {}, sum(len(t.encode()) for t in sample)
    routed = [n for n, t in enumerate(sample[:-1], start=1) if has_unassigned(t)]  # the long one: the library
    assert routed
    for engine in ("fastokens", "gigatoken", "memo"):
        stats = encode.tokenize_file(  # fastokens: 3 batches at once
            str(path), str(tmp_path / engine), tok, settings, engine=engine, batch_bytes=900, workers=3
        )
        assert stats["docs_out"] == len(sample) and stats["bytes"] == sizes, engine
        assert stats["fast_encode"]["engine"].startswith(engine if engine != "memo" else "tokenizers"), stats
        if engine != "memo":  # the lines of the first ROUTED_LINES documents left to the library
            assert stats["fast_encode"]["routed_lines"] == routed[: encode.ROUTED_LINES]
            assert stats["fast_encode"]["routed_to_tokenizers"] == len(routed) > encode.ROUTED_LINES
        else:
            assert "routed_lines" not in stats["fast_encode"]
        files[engine] = [Path(f"{tmp_path / engine}_text_document{e}").read_bytes() for e in (".bin", ".idx")]
    assert files["fastokens"] == files["gigatoken"] == files["memo"]


def test_an_engine_frames_and_rejects_as_the_library_does(tok: HFTokenizer, tmp_path: Path) -> None:
    """The engine's ids get the template's tokens, BOS and EOD in one pass; ``min_tokens`` counts the
    template's tokens, as the library's encode gives them."""
    from workflow_scripts.tokens import encode
    from workflow_scripts.tokens.framing import resolve_settings

    sample = [t for t in texts(10, 60) if t.strip()]
    path = write_jsonl(tmp_path / "in.jsonl", [{"text": t} for t in sample])
    counts = [len(e.ids) for e in tok.backend.encode_batch(sample)]
    cut = sorted(counts)[len(counts) // 3]  # about a third of the texts fall short
    settings = resolve_settings(tok, eod="auto", bos="id:0", min_tokens=cut)
    out = {}
    for fast in (True, False):
        prefix = tmp_path / f"fast{fast}"
        stats = encode.tokenize_file(str(path), str(prefix), tok, settings, fast_encode=fast, batch_bytes=500)
        assert stats["rejected"]["too_few_tokens"] == sum(c < cut for c in counts), fast
        assert stats["fast_encode"]["engine"].startswith("fastokens" if fast else "tokenizers")
        doc = f"{prefix}_text_document"
        out[fast] = [Path(doc + e).read_bytes() for e in (".bin", ".idx", ".quarantine.jsonl")]
    assert out[True] == out[False]
    ds = IndexedDataset(f"{tmp_path / 'fastTrue'}_text_document")
    kept = [s for s, c in zip(sample, counts, strict=True) if c >= cut]
    for d, text in enumerate(kept):
        ids = tok.backend.encode(text).ids
        assert ds.document(d).tolist() == [0, *ids, settings.eod_id]


def test_sft_batches_encoded_at_once_give_the_librarys_files(tok: HFTokenizer, tmp_path: Path) -> None:
    """SFT records through fastokens, a batch a thread on 3 threads at once, give the files of the library
    on one thread, and the records with a span left to the library are each thread's own (``Encoded.routed``
    is each call's)."""
    from workflow_scripts.tokens import encode
    from workflow_scripts.tokens.framing import resolve_settings

    user, bot = "<<<|user|>>>", "<<<|assistant|>>>"
    sample = [t for t in texts(11, 150) if t.strip()]
    pairs = list(zip(sample[::2], sample[1::2], strict=False))
    path = write_jsonl(tmp_path / "in.jsonl", [{"text": f"{user}{a}{bot}{b}"} for a, b in pairs])
    settings = resolve_settings(tok, eod="auto", sft=True, sft_markers=[f"{user}=id:1", f"{bot}=id:2"])
    files, stats = {}, {}
    for fast, workers in ((True, 3), (False, 1)):
        prefix = tmp_path / f"fast{fast}"
        stats[fast] = encode.tokenize_file(
            str(path), str(prefix), tok, settings, fast_encode=fast, workers=workers, batch_bytes=700
        )
        files[fast] = [Path(f"{prefix}_text_document{e}").read_bytes() for e in (".bin", ".idx")]
    assert files[True] == files[False] and stats[True]["docs_out"] == len(pairs)
    routed = [n for n, (a, b) in enumerate(pairs, start=1) if has_unassigned(a) or has_unassigned(b)]
    assert stats[True]["fast_encode"]["engine"].startswith("fastokens")
    assert stats[True]["fast_encode"]["routed_lines"] == routed[: encode.ROUTED_LINES] and routed
