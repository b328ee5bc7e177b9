"""The unit memo of a SentencePiece model (tokens/engines/sp_memo) gives exactly SentencePiece's ids, or
stands aside for models it cannot serve; the tokenize CLI writes the same files with every encoder."""

from __future__ import annotations

import io
import random
from pathlib import Path

import numpy as np
import orjson
import pytest
import sentencepiece as spm

from tests.utils import WORDS, Workflow, write_jsonl
from workflow_scripts.core.indexed_dataset import IndexedDataset
from workflow_scripts.tokens import encode as tok
from workflow_scripts.tokens.engines import sp_memo
from workflow_scripts.tokens.engines.sp_tokenizer import SentencePieceTokenizer
from workflow_scripts.tokens.framing import resolve_settings
from workflow_scripts.tokens.model_proto import read_options, with_dummy_prefix
from workflow_scripts.tokens.train_tokenizer import trainer_options

NO_SPACE = ("zh", "ja", "th")
ODD = [
    " ",
    "  ",
    "   ",
    "\t",
    "\n",
    "\n\n",
    " \n ",
    "\u00a0",
    " \u00a0 ",
    "\u3000",
    "\u200b",
    " \u200b ",
    "\ufeff",
]
ODD += ["\u200d", "\u2028", "\r\n", " \u0301", "\u0308", "      ", "\u2581", " \u2581 "]
RARE = ["🙂", "\U0001f9ea", "\U000e0041", "\x7f", "\x01", "ǅ", "ﬁ", "①", "\uff21\uff22", "\u00ad"]


def sentence(rng: random.Random, lang: str) -> str:
    words = rng.choices(WORDS[lang], k=rng.randint(3, 12))
    return ("" if lang in NO_SPACE else " ").join(words)


def adversarial(rng: random.Random, lang: str) -> str:
    """Text of ``lang`` with odd whitespace, rare characters, long unsplit runs and edge spaces."""
    parts = []
    for _ in range(rng.randint(1, 6)):
        parts.append(sentence(rng, lang))
        roll = rng.random()
        if roll < 0.5:
            parts.append(rng.choice(ODD))
        elif roll < 0.6:
            parts.append(rng.choice(RARE))
        elif roll < 0.65:
            parts.append("".join(rng.choices(WORDS[lang], k=60)))  # a unit over memo_unit_chars
        else:
            parts.append(" ")
    text = "".join(parts)
    if rng.random() < 0.3:
        text = rng.choice(ODD) + text
    if rng.random() < 0.3:
        text += rng.choice(ODD)
    return text


def random_unicode(rng: random.Random) -> str:
    """A random string, heavy in whitespace and its look-alikes, with any code point now and then."""
    pool = [
        " ",
        " ",
        " ",
        "\t",
        "\n",
        "\u00a0",
        "\u3000",
        "\u200b",
        "\u2581",
        "a",
        "b",
        "é",
        "\u0301",
        "中",
        "ก",
    ]
    chars = []
    for _ in range(rng.randint(1, 40)):
        if rng.random() < 0.15:
            cp = rng.randint(1, 0x10FFFF)
            while 0xD800 <= cp <= 0xDFFF:
                cp = rng.randint(1, 0x10FFFF)
            chars.append(chr(cp))
        else:
            chars.append(rng.choice(pool))
    return "".join(chars)


def train(**options: object) -> bytes:
    rng = random.Random(5)
    lines = [sentence(rng, lang) for lang in WORDS for _ in range(60)]
    lines += [adversarial(rng, lang).replace("\n", " ") for lang in WORDS for _ in range(20)]
    model = io.BytesIO()
    base = {"vocab_size": 800, "hard_vocab_limit": False, "minloglevel": 2, "num_threads": 1}
    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=model, **(base | options))
    return model.getvalue()


def ours(model_type: str, **extra: str) -> dict:
    """The options of the workflow's own trainer (identity, whitespace kept, byte fallback)."""
    options = trainer_options(
        vocab_size=800,
        model_type=model_type,
        character_coverage=0.9995,
        control_symbols=["<|endoftext|>", "<|user|>", "<|assistant|>"],
        user_defined_symbols=["<tab>", "@@"],
        threads=1,
        extra=dict(extra),
    )
    return options | {"minloglevel": 2}


EXACT = {
    "ours_bpe": ours("bpe"),
    "ours_bpe_no_dummy": ours("bpe", add_dummy_prefix="false"),
    "default_bpe": {"model_type": "bpe"},
    "default_bpe_user_symbols": {"model_type": "bpe", "user_defined_symbols": ["<u>", "▁x"]},
    "nfkc_bytes_no_dummy": {"model_type": "bpe", "byte_fallback": True, "add_dummy_prefix": False},
    "identity_ws_kept": {
        "model_type": "bpe",
        "normalization_rule_name": "identity",
        "remove_extra_whitespaces": False,
    },
    "nfkc_ws_kept_no_dummy": {
        "model_type": "bpe",
        "remove_extra_whitespaces": False,
        "add_dummy_prefix": False,
    },
    "char": {"model_type": "char"},
    "nfkc_cf_split_digits": {
        "model_type": "bpe",
        "normalization_rule_name": "nmt_nfkc_cf",
        "split_digits": True,
    },
}
FALLBACK = {
    "unigram": ({"model_type": "unigram"}, "unigram"),
    "ours_unigram": (ours("unigram"), "unigram"),
    "no_whitespace_split": ({"model_type": "unigram", "split_by_whitespace": False}, "split_by_whitespace"),
    "whitespace_suffix": ({"model_type": "bpe", "treat_whitespace_as_suffix": True}, "treat_whitespace"),
    "nfkc_ws_pieces_kept": (
        {"model_type": "bpe", "remove_extra_whitespaces": False, "allow_whitespace_only_pieces": True},
        "normalizer",
    ),
    "inner_space_piece": ({"model_type": "bpe", "user_defined_symbols": ["a▁b"]}, "crosses a word boundary"),
}


@pytest.fixture(scope="module", params=sorted(EXACT))
def exact_model(request: pytest.FixtureRequest) -> bytes:
    return train(**EXACT[request.param])


def texts(seed: int) -> list[str]:
    rng = random.Random(seed)
    out = [adversarial(rng, lang) for lang in WORDS for _ in range(40)]
    return out + [random_unicode(rng) for _ in range(400)]


def test_fast_ids_equal_sentencepiece(exact_model: bytes) -> None:
    """Adversarial text per language and random Unicode, batched through a tiny memo (evicting)."""
    plan, note = sp_memo.plan(exact_model)
    assert plan is not None, note
    sp = spm.SentencePieceProcessor(model_proto=exact_model)
    encoder = sp_memo.SpUnits(plan, 1, max_entries=64, max_unit_chars=16)
    docs = [t for t in texts(11) if t]
    for start in range(0, len(docs), 97):
        batch = docs[start : start + 97]
        flat, lengths = encoder.encode(batch)
        got = np.split(flat, np.cumsum(lengths)[:-1])
        for text, ids in zip(batch, got, strict=True):
            assert ids.tolist() == sp.encode(text), text
    stats = encoder.memo.stats()
    assert stats["memo_entries"] <= 64 and stats["units_encoded"] < stats["units"]


def test_threads_and_repeated_batches_equal_sentencepiece() -> None:
    """Two SentencePiece threads for the missing units, every text seen twice, a small memo."""
    model = train(**ours("bpe"))
    plan, _ = sp_memo.plan(model)
    assert plan is not None
    sp = spm.SentencePieceProcessor(model_proto=model)
    encoder = sp_memo.SpUnits(plan, 2, max_entries=200, max_unit_chars=32)
    docs = [t for t in texts(12) if t] * 2
    for start in range(0, len(docs), 150):
        batch = docs[start : start + 150]
        flat, lengths = encoder.encode(batch)
        assert flat.dtype == np.int32
        assert [ids.tolist() for ids in np.split(flat, np.cumsum(lengths)[:-1])] == sp.encode(batch)
    assert 0 < encoder.memo.stats()["hit_rate"] < 1


@pytest.mark.parametrize("name", sorted(FALLBACK))
def test_models_the_split_is_not_exact_for_fall_back(name: str) -> None:
    options, reason = FALLBACK[name]
    plan, note = sp_memo.plan(train(**options))
    assert plan is None and reason in note


def test_model_options_read_from_the_proto() -> None:
    model = train(**ours("unigram"))
    opts = read_options(model)
    assert (opts.model_type, opts.byte_fallback, opts.allow_whitespace_only_pieces) == (1, True, True)
    assert (opts.add_dummy_prefix, opts.remove_extra_whitespaces, opts.charsmap) == (True, False, False)
    default = read_options(train(model_type="bpe"))
    assert (default.model_type, default.remove_extra_whitespaces, default.charsmap) == (2, True, True)
    plain = spm.SentencePieceProcessor(model_proto=with_dummy_prefix(model, False))
    assert not read_options(with_dummy_prefix(model, False)).add_dummy_prefix
    assert plain.id_to_piece(plain.encode("zz")[0])[0] != "▁"


def test_memo_stays_bounded_on_unique_garbage() -> None:
    plan, _ = sp_memo.plan(train(**ours("bpe")))
    assert plan is not None
    encoder = sp_memo.SpUnits(plan, 1, max_entries=1000, max_unit_chars=64)
    rng = random.Random(3)
    for _ in range(20):
        batch = [" ".join(f"{rng.getrandbits(40):x}" for _ in range(200)) for _ in range(10)]
        encoder.encode(batch)
        assert encoder.memo.stats()["memo_entries"] <= 1000
    assert encoder.memo.stats()["units_encoded"] == encoder.memo.stats()["units"] == 20 * 10 * 200


@pytest.fixture(scope="module")
def model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("fast") / "ours.model"
    path.write_bytes(train(**ours("bpe")))
    return path


@pytest.mark.parametrize("sft", [False, True])
def test_cli_output_identical_with_and_without_the_fast_path(
    model_path: Path, tmp_path: Path, sft: bool
) -> None:
    rng = random.Random(9)
    docs = texts(4) + ["control pieces spelled: <s> and </s>", "<|endoftext|>", "<tab>@@ user-defined"] * 3
    if sft:
        docs = [f"<<<|user|>>>{a}\n<<<|assistant|>>>{b}" for a, b in zip(docs[::2], docs[1::2], strict=False)]
    records = [{"id": i, "text": t} for i, t in enumerate(docs) if t.strip()]
    rng.shuffle(records)
    src = write_jsonl(tmp_path / "in.jsonl", records)
    tokenizer = SentencePieceTokenizer(model_path)
    settings = resolve_settings(
        tokenizer,
        eod="auto",
        bos="<s>",
        sft=sft,
        sft_markers=["<<<|user|>>>=<|user|>", "<<<|assistant|>>>=<|assistant|>"],
    )
    outputs = []
    variants = [("plain", False, 1, "auto"), ("memo1", True, 1, "memo"), ("memo2", True, 2, "memo")]
    variants += [("gigatoken1", True, 1, "auto"), ("gigatoken2", True, 2, "gigatoken")]
    variants += [("fastokens", True, 1, "fastokens")]  # it reads no SentencePiece model: the memo
    fast_stats = {}
    for name, fast, workers, engine in variants:
        stats = tok.tokenize_file(
            str(src),
            str(tmp_path / name),
            tokenizer,
            settings,
            workers=workers,
            batch_bytes=4000,
            fast_encode=fast,
            engine=engine,
        )
        prefix = tok.document_prefix(str(tmp_path / name))
        outputs.append([Path(prefix + ext).read_bytes() for ext in (".bin", ".idx")])
        assert stats["fast_encode"]["enabled"] == fast
        fast_stats[name] = stats["fast_encode"]
    assert all(output == outputs[0] for output in outputs)
    memo, engine = fast_stats["memo2"], fast_stats["gigatoken2"]
    assert memo["engine"] == "unit memo" and 0 < memo["hit_rate"] < 1 and memo["memo_entries"] > 0
    assert engine["engine"].startswith("gigatoken ") and engine["routed_to_sentencepiece"] > 0
    spelled = ("<s>", "</s>", "<|endoftext|>", "<tab>")  # the model's added pieces, written in the texts
    named = [n for n, r in enumerate(records, start=1) if any(p in r["text"] for p in spelled)]
    assert engine["routed_lines"] == named  # the input lines of the documents left to SentencePiece
    assert engine["routed_to_sentencepiece"] == len(named)  # documents, not an SFT record's spans
    assert fast_stats["fastokens"]["engine"] == "unit memo"
    ds = IndexedDataset(tok.document_prefix(str(tmp_path / "plain")))
    assert ds.num_documents == stats["docs_out"] > 0


def test_sample_ids_equal_sentencepiece(sample_run: Workflow) -> None:
    """Every document the embedded sample's run tokenized, through the fast path (gigatoken for the
    workflow's own model), is ``sp.encode`` + EOD."""
    root = sample_run.root
    checked = 0
    for stats_path in sorted((root / "results" / "tokenized").glob("*_text_document.stats.json")):
        stats = orjson.loads(stats_path.read_bytes())
        fast = stats["fast_encode"]
        assert fast["enabled"] and fast["engine"].startswith("gigatoken "), stats_path
        sp = spm.SentencePieceProcessor(model_file=str(root / stats["tokenizer_model"]))
        quarantine = Path(stats["output_prefix"] + ".quarantine.jsonl")
        rejected = {orjson.loads(r)["line"] for r in (root / quarantine).read_bytes().splitlines()}
        lines = (root / stats["input"]).read_bytes().splitlines()
        kept = [raw for n, raw in enumerate(lines, 1) if raw.strip() and n not in rejected]
        texts = [orjson.loads(raw)["text"] for raw in kept]
        ds = IndexedDataset(str(root / stats["output_prefix"]))
        assert ds.num_documents == len(texts) == stats["docs_out"]
        for i, ids in enumerate(sp.encode(texts)):
            assert ds.document(i).tolist() == [*ids, stats["eod_id"]], (stats_path, i)
        checked += len(texts)
    assert checked > 1000
