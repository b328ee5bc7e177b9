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
from tests.utils import REPO, write_jsonl


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


def ours(corpus: Path, model: Path, out: Path) -> bytes:
    argv = [
        "--input",
        str(corpus),
        "--output-prefix",
        str(out),
        "--tokenizer-model",
        str(model),
        "--append-eod",
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
