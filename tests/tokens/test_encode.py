"""TOKENIZE stage: tokenizer training, tokenization to Megatron files, rejects, SFT, inspection."""

from __future__ import annotations

import io
import threading
from pathlib import Path

import numpy as np
import orjson
import pytest
import sentencepiece as spm
import zstandard

from tests.utils import write_jsonl
from workflow_scripts.cli import main as snakepack
from workflow_scripts.core.dataset_verify import verify
from workflow_scripts.core.fsio import read_json
from workflow_scripts.core.indexed_dataset import IndexedDataset, best_dtype
from workflow_scripts.tokens import encode as tok
from workflow_scripts.tokens import inspection as inspect_tool
from workflow_scripts.tokens import reader as reader_module
from workflow_scripts.tokens import train_tokenizer
from workflow_scripts.tokens.engines import base, choose
from workflow_scripts.tokens.engines.base import Encoded, TokenizerError
from workflow_scripts.tokens.engines.sp_tokenizer import SentencePieceTokenizer
from workflow_scripts.tokens.framing import resolve_settings
from workflow_scripts.tokens.reader import prefetch
from workflow_scripts.tokens.settings import TokenizeSettings
from workflow_scripts.tokens.sft import MarkerSplitter, parse_marker_specs

USER, ASSISTANT = "<<<|user|>>>", "<<<|assistant|>>>"
MARKERS = [f"{USER}=<|user|>", f"{ASSISTANT}=<|assistant|>"]


def run_tokenize(tokenizer: SentencePieceTokenizer, src: Path, out: Path, **kwargs) -> tuple[dict, str]:
    workers = kwargs.pop("workers", 1)
    batch_bytes = kwargs.pop("batch_bytes", 1 << 20)
    settings = resolve_settings(tokenizer, **kwargs)
    stats = tok.tokenize_file(
        str(src), str(out), tokenizer, settings, workers=workers, batch_bytes=batch_bytes
    )
    return stats, tok.document_prefix(str(out))


# --- tokenizer training ---------------------------------------------------------------------------------


def test_training_is_deterministic_and_has_control_ids(
    corpus: list[Path], model: Path, tmp_path: Path
) -> None:
    again = tmp_path / "again"
    args = [
        *map(str, reversed(corpus)),
        "--model-prefix",
        str(again),
        "--vocab-size",
        "400",
        "--max-sentences",
        "2000",
    ]
    assert train_tokenizer.main(args) == 0
    assert again.with_suffix(".model").read_bytes() == model.read_bytes()
    sp = spm.SentencePieceProcessor(model_file=str(model))
    vocab = model.with_suffix(".vocab").read_text(encoding="utf-8").splitlines()
    assert len(vocab) == sp.vocab_size()
    for piece in ("<|endoftext|>", "<|user|>", "<|assistant|>"):
        assert sp.id_to_piece(sp.piece_to_id(piece)) == piece and sp.is_control(sp.piece_to_id(piece))
    assert sp.encode("<|endoftext|>") != [sp.piece_to_id("<|endoftext|>")]  # raw text cannot forge EOD
    # <|endoftext|> is the EOS, so Megatron-LM's rule (EOS) and GPT-NeoX's (the piece) agree
    assert sp.eos_id() == sp.piece_to_id("<|endoftext|>") == 3
    assert [sp.id_to_piece(i) for i in range(6)] == [
        "<unk>",
        "<s>",
        "</s>",
        "<|endoftext|>",
        "<|user|>",
        "<|assistant|>",
    ]


def test_reservoir_sample_is_seeded_and_bounded() -> None:
    texts = [f"line {i}\n\n  \nmore {i}" for i in range(100)]
    a, seen = train_tokenizer.sample_lines(texts, 10, seed=1)
    assert seen == 200 and len(a) == 10
    assert (
        a
        == train_tokenizer.sample_lines(texts, 10, seed=1)[0]
        != train_tokenizer.sample_lines(texts, 10, 2)[0]
    )
    assert train_tokenizer.sample_lines(texts, 1000, seed=1)[0] == [
        ln for t in texts for ln in t.split("\n") if ln.strip()
    ]


def test_training_without_text_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = write_jsonl(tmp_path / "x.jsonl", [b"not json", {"id": 1, "text": "  \n "}])
    assert snakepack(["train-tokenizer", str(src), "--model-prefix", str(tmp_path / "m")]) == 2
    assert "snakepack train-tokenizer: error: no training text" in capsys.readouterr().err
    assert not (tmp_path / "m.model").exists()


# --- tokenization ------------------------------------------------------------------------------------------

ROUND_TRIP = [
    "Hello  world,\n\ttabs and  double spaces ",
    " leading space and trailing newline\n",
    "быстрая лиса прыгает",
    "我们今天学习语言模型。日本語の文章です",
    "rare chars: \u2603 \U0001f600 \U0001d518 \u00fcn\u00efc\u00f6d\u00e9",
    "literal <|endoftext|> inside text",
]


def test_round_trip_eod_and_bos(tokenizer: SentencePieceTokenizer, tmp_path: Path) -> None:
    src = write_jsonl(tmp_path / "in.jsonl", [{"id": i, "text": t} for i, t in enumerate(ROUND_TRIP)])
    stats, prefix = run_tokenize(tokenizer, src, tmp_path / "out", eod="<|endoftext|>", bos="<s>")
    eod, bos = tokenizer.token_id("<|endoftext|>"), tokenizer.token_id("<s>")
    ds = IndexedDataset(prefix)
    assert verify(prefix)["documents"] == len(ROUND_TRIP) == ds.num_sequences
    assert list(ds.doc_idx) == list(range(len(ROUND_TRIP) + 1))
    for i, text in enumerate(ROUND_TRIP):
        ids = ds.document(i).tolist()
        assert ids[0] == bos and ids[-1] == eod and eod not in ids[1:-1]
        assert tokenizer.sp.decode(ids[1:-1]) == text
    assert stats["tokens"] == ds.num_tokens and stats["bytes"] == sum(len(t.encode()) for t in ROUND_TRIP)
    assert stats["docs_in"] == stats["docs_out"] == len(ROUND_TRIP) and stats["eod_id"] == eod
    assert ds.dtype == np.uint16 == best_dtype(tokenizer.vocab_size)


def test_output_independent_of_batching_workers_and_numpy_path(
    tokenizer: SentencePieceTokenizer, corpus: list[Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reference, prefix = run_tokenize(tokenizer, corpus[0], tmp_path / "a", eod="<|endoftext|>")
    expected = [Path(prefix + ext).read_bytes() for ext in (".bin", ".idx", ".stats.json")]
    _, prefix = run_tokenize(
        tokenizer, corpus[0], tmp_path / "b", eod="<|endoftext|>", workers=2, batch_bytes=500
    )
    assert [Path(prefix + ext).read_bytes() for ext in (".bin", ".idx")] == expected[:2]
    monkeypatch.setattr(tokenizer, "numpy_output", False)
    stats, prefix = run_tokenize(tokenizer, corpus[0], tmp_path / "c", eod="<|endoftext|>", batch_bytes=3000)
    assert [Path(prefix + ext).read_bytes() for ext in (".bin", ".idx")] == expected[:2]
    assert {k: v for k, v in stats.items() if k not in ("output_prefix", "run")} == {
        k: v for k, v in reference.items() if k not in ("output_prefix", "run")
    }
    assert set(stats["run"]) == {
        "seconds",
        "mb_per_s",
        "docs_per_s",
        "peak_rss_mb",
        "workers",
        "tokens_per_s",
    }


def test_every_reject_reason(tokenizer: SentencePieceTokenizer, tmp_path: Path) -> None:
    long_text = "the quick brown fox jumps over the lazy dog " * 20
    records: list[dict | bytes] = [
        {"id": "ok", "text": long_text},
        b'{"id": "cut", "text": "no end',
        b"[1, 2, 3]",
        b"",  # a blank line is not a record
        {"id": "notext", "body": "x"},
        {"id": "nonstr", "text": 42},
        {"id": "empty", "text": ""},
        {"id": "blank", "text": " \n\t "},
        {"id": "marker", "text": f"chat {USER} inside a pretraining doc " * 10},
        {"id": "short", "text": "tiny"},
        {"id": "ok2", "text": long_text},
    ]
    src = write_jsonl(tmp_path / "in.jsonl", records)
    stats, prefix = run_tokenize(
        tokenizer, src, tmp_path / "out", eod="<|endoftext|>", min_tokens=20, sft_markers=MARKERS
    )
    quarantine = [orjson.loads(x) for x in Path(prefix + ".quarantine.jsonl").read_bytes().splitlines()]
    assert [(q["line"], q["id"], q["reason"]) for q in quarantine] == [
        (2, None, "malformed_json"),
        (3, None, "malformed_json"),
        (5, "notext", "missing_text"),
        (6, "nonstr", "missing_text"),
        (7, "empty", "empty_text"),
        (8, "blank", "empty_text"),
        (9, "marker", "marker_in_pretraining"),
        (10, "short", "too_few_tokens"),
    ]
    assert stats["docs_in"] == 10 and stats["docs_out"] == 2
    assert stats["rejected"] == {
        "malformed_json": 2,
        "missing_text": 2,
        "empty_text": 2,
        "marker_in_pretraining": 1,
        "no_sft_marker": 0,
        "too_few_tokens": 1,
    }
    assert read_json(prefix + ".stats.json") == stats
    assert IndexedDataset(prefix).num_documents == 2


def test_text_that_encodes_to_nothing_is_empty(
    tokenizer: SentencePieceTokenizer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = choose.choose

    def chosen(tokenizer: SentencePieceTokenizer, options: TokenizeSettings) -> base.Encoder:
        encoder = real(tokenizer, options)
        encode = encoder.encode

        def drop_second(texts, utf8=None, specials=True):
            encoded = encode(texts, utf8, specials)
            keep = np.repeat(np.arange(len(texts)) != 1, encoded.lengths)
            return Encoded(encoded.ids[keep], np.where(np.arange(len(texts)) == 1, 0, encoded.lengths))

        encoder.encode = drop_second
        return encoder

    monkeypatch.setattr(choose, "choose", chosen)
    src = write_jsonl(tmp_path / "in.jsonl", [{"id": i, "text": f"doc {i}"} for i in range(3)])
    stats, prefix = run_tokenize(tokenizer, src, tmp_path / "out")
    assert stats["rejected"]["empty_text"] == 1 and stats["docs_out"] == 2
    assert [tokenizer.sp.decode(IndexedDataset(prefix).document(i).tolist()) for i in range(2)] == [
        "doc 0",
        "doc 2",
    ]


def test_sft_markers_become_control_ids(tokenizer: SentencePieceTokenizer, tmp_path: Path) -> None:
    text = f"{USER}Translate: hello{USER}\n{ASSISTANT}Sveiki{ASSISTANT}"
    records = [{"id": "chat", "text": text}, {"id": "plain", "text": "no markers here"}]
    src = write_jsonl(tmp_path / "in.jsonl", records)
    markers = [f"{USER}=<|user|>", f"{ASSISTANT}=id:5"]
    stats, prefix = run_tokenize(
        tokenizer, src, tmp_path / "out", eod="<|endoftext|>", sft=True, sft_markers=markers
    )
    user, eod, enc = tokenizer.token_id("<|user|>"), tokenizer.token_id("<|endoftext|>"), tokenizer.sp.encode
    assert IndexedDataset(prefix).document(0).tolist() == [
        user, *enc("Translate: hello"), user, 5, *enc("Sveiki"), 5, eod
    ]  # fmt: skip
    assert stats["rejected"]["no_sft_marker"] == 1 and stats["docs_out"] == 1
    assert stats["mode"] == "sft" and stats["sft_markers"] == {USER: user, ASSISTANT: 5}
    with pytest.raises(TokenizerError, match="not in"):
        resolve_settings(tokenizer, sft=True, sft_markers=[f"{USER}=<|nobody|>"])


def test_marker_specs_and_splitting() -> None:
    assert parse_marker_specs(["<<<|a=b|>>>=<|x|>", "M=id:7"]) == {"<<<|a=b|>>>": "<|x|>", "M": "id:7"}
    for bad in (["nomarker"], ["=piece"], ["M="], ["M=a", "M=b"]):
        with pytest.raises(ValueError):
            parse_marker_specs(bad)
    splitter = MarkerSplitter(["<u>", "<u><u>"])
    assert splitter.split(" a<u><u> \n<u>b ") == [
        (" a", False),
        ("<u><u>", True),
        ("<u>", True),
        ("b ", False),
    ]
    assert splitter.contains_marker("x<u>") and not splitter.contains_marker("<v>")


def test_vocabulary_over_65500_writes_int32(
    tokenizer: SentencePieceTokenizer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert best_dtype(65499) == np.uint16 and best_dtype(65500) == np.int32
    monkeypatch.setattr(tokenizer, "vocab_size", 70000)
    src = write_jsonl(tmp_path / "in.jsonl", [{"id": 1, "text": "hello world"}])
    stats, prefix = run_tokenize(tokenizer, src, tmp_path / "out", eod="id:69999")
    ds = IndexedDataset(prefix)
    assert stats["dtype"] == "int32" and ds.dtype == np.int32 and ds.dtype_code == 4
    assert ds.document(0).tolist() == [*tokenizer.sp.encode("hello world"), 69999]


def test_cli_megatron_names_and_zst_input(
    tokenizer: SentencePieceTokenizer, model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "en_web_cc_split_0001.jsonl.zst"
    src.write_bytes(zstandard.ZstdCompressor().compress(b'{"id": 1, "text": "hello world"}\n'))
    out = tmp_path / "tok" / "en_web_cc_split_0001"
    argv = ["--input", str(src), "--output-prefix", str(out), "--tokenizer-model", str(model)]
    assert snakepack(["tokenize", *argv, "--append-eod", "--json-keys", "text", "--workers", "2"]) == 0
    names = sorted(p.name for p in out.parent.iterdir())
    assert names == [
        f"en_web_cc_split_0001_text_document.{ext}"
        for ext in ("bin", "idx", "ledger.npz", "quarantine.jsonl", "stats.json")
    ]
    assert IndexedDataset(f"{out}_text_document").document(0).tolist()[-1] == tokenizer.token_id(
        "<|endoftext|>"
    )
    capsys.readouterr()
    assert snakepack(["tokenize", *argv, "--append-eod", "--eod-piece", "<|nope|>"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("snakepack tokenize: error: ") and "'<|nope|>' is not in" in err
    assert len(err.splitlines()) == 1  # one line, no traceback
    with pytest.raises(SystemExit) as exit_info:
        snakepack(["tokenize", *argv, "--json-keys", "text", "title"])
    assert exit_info.value.code == 2
    assert "exactly one --json-keys value is supported" in capsys.readouterr().err


def test_failed_run_leaves_no_output(model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out" / "x"
    argv = [
        "--input",
        str(tmp_path / "missing.jsonl"),
        "--output-prefix",
        str(out),
        "--tokenizer-model",
        str(model),
    ]
    assert snakepack(["tokenize", *argv]) == 2
    assert "missing.jsonl" in capsys.readouterr().err
    assert not out.parent.exists() or list(out.parent.iterdir()) == []


def test_prefetch_stops_its_thread_when_closed_early() -> None:
    gen = prefetch((i for i in range(100)), depth=1)
    assert next(gen) == 0
    gen.close()
    assert not any(t.name == "tokenize-reader" for t in threading.enumerate())


def test_prefetch_reraises_producer_errors() -> None:
    def items():
        yield 1
        raise OSError("disk gone")

    got = []
    with pytest.raises(OSError, match="disk gone"):
        for x in prefetch(items()):
            got.append(x)
    assert got == [1]


# --- inspection --------------------------------------------------------------------------------------------


def test_inspect_shows_text_pieces_ids_and_counts(
    tokenizer: SentencePieceTokenizer, model: Path, tmp_path: Path
) -> None:
    src = write_jsonl(
        tmp_path / "in.jsonl", [{"id": 1, "text": "hello world"}, {"id": 2, "text": "river stone"}]
    )
    _, prefix = run_tokenize(tokenizer, src, tmp_path / "out", eod="<|endoftext|>")
    out = io.StringIO()
    inspect_tool.show(IndexedDataset(prefix), 1, tokenizer, out)
    lines = out.getvalue().splitlines()
    ids = [*tokenizer.sp.encode("hello world"), tokenizer.token_id("<|endoftext|>")]
    assert lines == [
        f"=== document 0: {len(ids)} tokens ===",
        "--- text ---",
        "hello world<|endoftext|>",
        "--- pieces ---",
        " ".join(tokenizer.sp.id_to_piece(ids)),
        "--- ids ---",
        " ".join(map(str, ids)),
    ]
    counts = tmp_path / "counts.txt"
    assert inspect_tool.main([prefix + ".bin", "-n", "0", "--counts-out", str(counts)]) == 0
    assert counts.read_text().split() == [str(n) for n in IndexedDataset(prefix).lengths]


LONG_TEXTS = [
    "alpha beta  gamma   delta\nepsilon \tzeta eta.  " * 40,
    "  leading and trailing spaces   " * 30,
    "Straße läuft über Rīgas ģimenes šodien " * 30,
    "東京の天気は晴れです。" * 30 + " and then some words " * 5,
]


def test_a_long_document_streams_to_the_same_bytes(
    tokenizer: SentencePieceTokenizer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    texts = ["short first", *LONG_TEXTS[:3], "x y", LONG_TEXTS[0]]  # texts with spaces: safe cuts only
    records = [{"id": i, "text": t} for i, t in enumerate(texts)]
    src = write_jsonl(tmp_path / "in.jsonl", records)
    _, prefix = run_tokenize(tokenizer, src, tmp_path / "whole", eod="auto", batch_bytes=100)
    for module in (base, reader_module):  # the encoder and the batches' long-document check
        monkeypatch.setattr(module, "LONG_CHARS", 37)
    _, streamed = run_tokenize(tokenizer, src, tmp_path / "pieces", eod="auto", bos="<s>", batch_bytes=100)
    pieces_again, again = run_tokenize(tokenizer, src, tmp_path / "again", eod="auto", batch_bytes=100)
    assert [Path(prefix + e).read_bytes() for e in (".bin", ".idx")] == [
        Path(again + e).read_bytes() for e in (".bin", ".idx")
    ]
    assert pieces_again["long_document_unsafe_cuts"] == 0 and pieces_again["docs_out"] == len(records)
    ds = IndexedDataset(streamed)
    assert ds.document(1).tolist() == [
        tokenizer.sp.bos_id(),
        *tokenizer.sp.encode(LONG_TEXTS[0]),
        tokenizer.eod()[0],
    ]
    _, few = run_tokenize(tokenizer, src, tmp_path / "few", eod="auto", min_tokens=10_000, batch_bytes=100)
    quarantine = [orjson.loads(x) for x in Path(few + ".quarantine.jsonl").read_bytes().splitlines()]
    assert {q["reason"] for q in quarantine} == {"too_few_tokens"} and len(quarantine) == len(records)
