"""Byte-for-byte against the real Megatron-LM and GPT-NeoX tools: their own ``preprocess_data.py`` and
their readers, from ``../shared/trainers``' pinned sources (the ``trainers`` fixture, tests/trainers.py)."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest
import sentencepiece as spm

from tests.trainers import Trainers
from tests.utils import REPO, byte_level_bpe, gpt2_pair, write_jsonl


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Multilingual text with the whitespace SentencePiece models keep: newlines, tabs, runs of spaces."""
    rng = random.Random(3)
    words = ["the", "of", "data", "Straße", "läuft", "über", "Rīga", "ģimene", "šodien", "東京", "データ"]
    words += ["", "spaces\tand\ttabs"]
    texts = [
        (" " if i % 7 == 0 else "") + " ".join(rng.choices(words, k=rng.randint(3, 40))) + ("\n" * (i % 3))
        for i in range(300)
    ]
    return write_jsonl(tmp_path_factory.mktemp("compat") / "corpus.jsonl", [{"text": t} for t in texts])


def train(corpus: Path, prefix: Path, **options: object) -> Path:
    texts = [json.loads(line)["text"] for line in corpus.read_text(encoding="utf-8").splitlines()]
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(texts),
        model_prefix=str(prefix),
        vocab_size=300,
        byte_fallback=True,
        hard_vocab_limit=False,
        minloglevel=2,
        num_threads=1,
        **options,
    )
    return prefix.with_suffix(".model")


def ours(corpus: Path, model: Path, out: Path, *options: str) -> bytes:
    argv = [
        "--input",
        str(corpus),
        "--output-prefix",
        str(out),
        "--tokenizer-model",
        str(model),
        "--append-eod",
        *options,
    ]
    subprocess.run(
        [sys.executable, "-m", "workflow_scripts", "tokenize", *argv],
        check=True,
        cwd=REPO,
        capture_output=True,
    )
    return read(f"{out}_text_document")


def read(prefix: str) -> bytes:
    return Path(prefix + ".bin").read_bytes() + Path(prefix + ".idx").read_bytes()


@pytest.mark.parametrize(
    ("tool", "options"),
    [
        ("megatron", {}),  # a default-options model: </s> is the EOS, no <|endoftext|>
        ("neox", {"user_defined_symbols": ["<|endoftext|>"]}),  # a model with <|endoftext|>
    ],
)
def test_tokenize_equals_the_trainers_own_preprocessing(
    tool: str, options: dict, corpus: Path, tmp_path: Path, trainers: Trainers
) -> None:
    model = train(corpus, tmp_path / "m", **options)
    theirs = tmp_path / tool
    if tool == "megatron":
        args = [
            "--tokenizer-type",
            "GPTSentencePieceTokenizer",
            "--tokenizer-model",
            str(model),
            "--json-keys",
        ]
    else:
        args = ["--tokenizer-type", "SPMTokenizer", "--vocab-file", str(model), "--jsonl-keys"]
    cmd = ["tools/preprocess_data.py" if tool == "megatron" else "tools/datasets/preprocess_data.py"]
    cmd += [
        "--input",
        str(corpus),
        "--output-prefix",
        str(theirs),
        "--append-eod",
        "--workers",
        "1",
        *args,
        "text",
    ]
    out = trainers.run("megatron" if tool == "megatron" else "neox", cmd)
    assert out.returncode == 0, out.stderr[-3000:]
    assert ours(corpus, model, tmp_path / "ours") == read(f"{theirs}_text_document")


SCRIPTS = ["Ελληνικά κείμενα", "русский текст", "العربية", "हिन्दी भाषा", "🙂 emoji👍🏽", "ĀāĒē"]
SCRIPTS += ["\u2115\u2211\u222b"]  # mathematical letters and operators
ODD = [
    "<|endoftext|>",
    "<|begin_of_text|>",
    "a\u00a0b",
    "c\u2028d",
    "e\r\nf",
    "g\u3000h",
    "  \t ",
    "x.y",
    "z!!",
]


@pytest.fixture(scope="module")
def bpe_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Multilingual text with special tokens written in it and odd whitespace (no whitespace-only record:
    those are quarantined here, where the trainers' tools keep them)."""
    rng = random.Random(5)
    words = ["the", "of", "data", "Straße", "läuft", "Rīga", "東京", "データ", "1234567", *SCRIPTS, *ODD]
    texts = [
        "w" + "".join(rng.choice([" ", "", "  ", "\n"]) + rng.choice(words) for _ in range(30))
        for _ in range(300)
    ]
    return write_jsonl(tmp_path_factory.mktemp("bpe") / "corpus.jsonl", [{"text": t} for t in texts])


@pytest.mark.parametrize(
    ("tool", "llama3"),
    [("neox", False), ("megatron", False), ("megatron", True)],  # GPT-NeoX's EOD is <|endoftext|> only
)
def test_a_tokenizer_json_encodes_as_the_trainers_own_preprocessing(
    tool: str, llama3: bool, bpe_corpus: Path, tmp_path: Path, trainers: Trainers
) -> None:
    texts = [json.loads(line)["text"] for line in bpe_corpus.read_text(encoding="utf-8").split("\n") if line]
    model = byte_level_bpe(tmp_path / "tok", texts[:100], llama3=llama3)
    theirs = tmp_path / tool
    if tool == "megatron":
        args = ["tools/preprocess_data.py", "--tokenizer-type", "HuggingFaceTokenizer"]
        args += ["--tokenizer-model", str(model.parent), "--json-keys", "text"]
    else:
        args = ["tools/datasets/preprocess_data.py", "--tokenizer-type", "HFTokenizer"]
        args += ["--vocab-file", str(model), "--jsonl-keys", "text"]
    args += ["--input", str(bpe_corpus), "--output-prefix", str(theirs), "--append-eod", "--workers", "1"]
    out = trainers.run(tool, args)
    assert out.returncode == 0, out.stderr[-3000:]
    assert ours(bpe_corpus, model, tmp_path / "ours") == read(f"{theirs}_text_document")
    stats = json.loads(Path(f"{tmp_path / 'ours'}_text_document.stats.json").read_text())
    assert stats["fast_encode"]["engine"].startswith("fastokens "), stats["fast_encode"]
    for engine in ("gigatoken", "memo"):
        got = ours(bpe_corpus, model, tmp_path / engine, "--engine", engine)
        assert got == read(f"{theirs}_text_document"), engine
    from workflow_scripts.core.indexed_dataset import IndexedDataset
    from workflow_scripts.tokens.engines.hf_tokenizer import HFTokenizer

    tok = HFTokenizer(model)
    docs = IndexedDataset(f"{tmp_path / 'ours'}_text_document")
    first = [int(i) for i in docs[0]]
    assert first[-1] == tok.eod()[0] and (first[0] == tok.backend.token_to_id("<|begin_of_text|>")) == llama3
    spelled = sum(int((docs[i] == tok.token_id(ODD[int(llama3)])).sum()) for i in range(len(docs)))
    assert spelled > len(docs) * (not llama3)  # a special token written in the text is that token


@pytest.mark.parametrize("llama3", [False, True], ids=["gpt2", "llama3"])
def test_megatrons_fast_preprocessing_gives_our_ids(
    llama3: bool, bpe_corpus: Path, tmp_path: Path, trainers: Trainers
) -> None:
    """Megatron-LM's ``tools/preprocess_data_fast.py --use-gigatoken`` (gigatoken reads the jsonl): our ids,
    less the template's BOS, which it does not add (its ``preprocess_data.py`` does, as we do)."""
    texts = [json.loads(line)["text"] for line in bpe_corpus.read_text(encoding="utf-8").split("\n") if line]
    model = byte_level_bpe(tmp_path / "tok", texts[:100], llama3=llama3)
    theirs = tmp_path / "fast"
    args = ["tools/preprocess_data_fast.py", "--tokenizer-type", "HuggingFaceTokenizer", "--use-gigatoken"]
    args += ["--tokenizer-model", str(model.parent), "--json-keys", "text", "--append-eod"]
    out = trainers.run("megatron", [*args, "--input", str(bpe_corpus), "--output-prefix", str(theirs)])
    assert out.returncode == 0, out.stderr[-3000:]
    ours(bpe_corpus, model, tmp_path / "ours")
    from workflow_scripts.core.indexed_dataset import IndexedDataset

    mine, fast = (
        IndexedDataset(f"{tmp_path / 'ours'}_text_document"),
        IndexedDataset(f"{theirs}_text_document"),
    )
    assert len(mine) == len(fast) == len(texts)
    for d in range(len(mine)):
        assert mine[d][int(llama3) :].tolist() == fast[d].tolist(), texts[d]


def hub_gpt2(cache: Path) -> dict[str, str]:
    """An offline Hugging Face hub cache holding ``gpt2``'s config files only (no tokenizer.json), and the
    variables that make transformers read it: Megatron-LM's ``GPT2BPETokenizer`` at this pin is
    ``AutoTokenizer.from_pretrained("gpt2", vocab_file=..., merges_file=...)``."""
    snapshot = cache / "models--gpt2" / "snapshots" / "0"
    snapshot.mkdir(parents=True)
    (cache / "models--gpt2" / "refs").mkdir()
    (cache / "models--gpt2" / "refs" / "main").write_text("0")
    (snapshot / "config.json").write_text('{"model_type": "gpt2"}')
    (snapshot / "tokenizer_config.json").write_text('{"model_max_length": 1024}')
    return {"HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


@pytest.mark.parametrize("tool", ["neox", "megatron"])
def test_a_gpt2_vocab_and_merges_encode_as_the_trainers_gpt2_bpe_tokenizer(
    tool: str, bpe_corpus: Path, tmp_path: Path, trainers: Trainers
) -> None:
    texts = [json.loads(line)["text"] for line in bpe_corpus.read_text(encoding="utf-8").split("\n") if line]
    vocab, merges = gpt2_pair(byte_level_bpe(tmp_path / "tok", texts[:100]), tmp_path / "gpt2")
    theirs = tmp_path / tool
    script = "tools/preprocess_data.py" if tool == "megatron" else "tools/datasets/preprocess_data.py"
    args = [script, "--tokenizer-type", "GPT2BPETokenizer", "--vocab-file", str(vocab), "--merge-file"]
    args += [str(merges), "--json-keys" if tool == "megatron" else "--jsonl-keys", "text"]
    args += ["--input", str(bpe_corpus), "--output-prefix", str(theirs), "--append-eod", "--workers", "1"]
    out = trainers.run(tool, args, env=hub_gpt2(tmp_path / "hub"))
    assert out.returncode == 0, out.stderr[-3000:]
    assert ours(bpe_corpus, vocab, tmp_path / "ours") == read(f"{theirs}_text_document")
    from workflow_scripts.core.indexed_dataset import IndexedDataset
    from workflow_scripts.tokens.kinds import TokenizerFiles

    tok = TokenizerFiles.resolve(str(vocab)).load()
    assert tok.kind == "gpt2" and tok.merges == str(merges)
    docs = IndexedDataset(f"{tmp_path / 'ours'}_text_document")
    eod = tok.eod()[0]
    assert int(docs[0][-1]) == eod
    assert sum(int((docs[i] == eod).sum()) for i in range(len(docs))) > 2 * len(docs)  # spelled in text


READ = r"""
import sys
if sys.argv[1] == "megatron":
    from megatron.core.datasets.indexed_dataset import IndexedDataset
    ds = IndexedDataset(sys.argv[2])
    docs = ds.document_indices
else:
    from megatron.data.indexed_dataset import MMapIndexedDataset
    ds = MMapIndexedDataset(sys.argv[2], skip_warmup=True)
    docs = ds.doc_idx
print(len(ds), list(docs)[-1], sum(int(ds[i].sum()) for i in range(len(ds))))
"""


@pytest.mark.parametrize("tool", ["megatron", "neox"])
@pytest.mark.parametrize("what", ["tokenized", "merged"])
def test_the_trainers_readers_load_our_files(
    tool: str, what: str, corpus: Path, tmp_path: Path, trainers: Trainers
) -> None:
    model = train(corpus, tmp_path / "m", control_symbols=["<|endoftext|>"])
    ours(corpus, model, tmp_path / "ours")
    prefix = f"{tmp_path / 'ours'}_text_document"
    if what == "merged":  # a pack as the merge step writes it: two sources, in order
        merge = [sys.executable, "-m", "workflow_scripts", "merge", "--output", str(tmp_path / "pack")]
        subprocess.run([*merge, prefix, prefix], check=True, cwd=REPO, capture_output=True)
        prefix = str(tmp_path / "pack")
    read_back = trainers.run("megatron" if tool == "megatron" else "neox", ["-c", READ, tool, prefix])
    assert read_back.returncode == 0, read_back.stderr[-3000:]
    out = read_back.stdout.split()
    from workflow_scripts.core.indexed_dataset import IndexedDataset

    ds = IndexedDataset(prefix)
    assert [int(x) for x in out[-3:]] == [
        ds.num_sequences,
        ds.num_documents,
        int(ds.tokens.sum(dtype="int64")),
    ]
