"""Byte-for-byte against the real Megatron-LM and GPT-NeoX tools, when their checkouts are given.

Set ``SNAKEPACK_MEGATRON_GIT`` and ``SNAKEPACK_NEOX_GIT`` (git directories of the two repositories) and
``SNAKEPACK_COMPAT_PYTHON`` (a Python that can run their ``preprocess_data.py``: torch, sentencepiece and,
for GPT-NeoX, its requirements). Without them these tests are skipped, and the skip says what is missing.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import sentencepiece as spm

from tests.utils import REPO, export_git, write_jsonl

PYTHON = os.environ.get("SNAKEPACK_COMPAT_PYTHON", "")
REPOS = {
    "megatron": os.environ.get("SNAKEPACK_MEGATRON_GIT", ""),
    "neox": os.environ.get("SNAKEPACK_NEOX_GIT", ""),
}
PATHS = {"megatron": ["megatron", "tools"], "neox": ["megatron", "tools"]}


def checkout(tool: str, root: Path) -> Path:
    """The tool's sources exported from its git directory, or a skip naming what is missing."""
    missing = [
        name
        for name, value in (
            ("SNAKEPACK_COMPAT_PYTHON", PYTHON),
            (f"SNAKEPACK_{tool.upper()}_GIT", REPOS[tool]),
        )
        if not value or not os.path.exists(value)
    ]
    if missing:
        pytest.skip(
            f"{tool} compatibility NOT CHECKED: set {' and '.join(missing)} (see the module docstring)"
        )
    return export_git(REPOS[tool], PATHS[tool], root / tool)


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
    tool: str, options: dict, corpus: Path, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    src = checkout(tool, tmp_path_factory.getbasetemp() / "checkouts")
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
    cmd = [PYTHON, "tools/preprocess_data.py" if tool == "megatron" else "tools/datasets/preprocess_data.py"]
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
    subprocess.run(cmd, check=True, cwd=src, capture_output=True, env={**os.environ, "PYTHONPATH": str(src)})
    assert ours(corpus, model, tmp_path / "ours") == read(f"{theirs}_text_document")


READ = r"""
import sys
sys.path.insert(0, sys.argv[2])
if sys.argv[1] == "megatron":
    from megatron.core.datasets.indexed_dataset import IndexedDataset
    ds = IndexedDataset(sys.argv[3])
    docs = ds.document_indices
else:
    from megatron.data.indexed_dataset import MMapIndexedDataset
    ds = MMapIndexedDataset(sys.argv[3], skip_warmup=True)
    docs = ds.doc_idx
print(len(ds), list(docs)[-1], sum(int(ds[i].sum()) for i in range(len(ds))))
"""


@pytest.mark.parametrize("tool", ["megatron", "neox"])
@pytest.mark.parametrize("what", ["tokenized", "merged"])
def test_the_trainers_readers_load_our_files(
    tool: str, what: str, corpus: Path, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    src = checkout(tool, tmp_path_factory.getbasetemp() / "checkouts")
    model = train(corpus, tmp_path / "m", control_symbols=["<|endoftext|>"])
    ours(corpus, model, tmp_path / "ours")
    prefix = f"{tmp_path / 'ours'}_text_document"
    if what == "merged":  # a pack as the merge step writes it: two sources, in order
        merge = [sys.executable, "-m", "workflow_scripts", "merge", "--output", str(tmp_path / "pack")]
        subprocess.run([*merge, prefix, prefix], check=True, cwd=REPO, capture_output=True)
        prefix = str(tmp_path / "pack")
    out = subprocess.run(
        [PYTHON, "-c", READ, tool, str(src), prefix], check=True, cwd=src, capture_output=True, text=True
    ).stdout.split()
    from workflow_scripts.core.indexed_dataset import IndexedDataset

    ds = IndexedDataset(prefix)
    assert [int(x) for x in out[-3:]] == [
        ds.num_sequences,
        ds.num_documents,
        int(ds.tokens.sum(dtype="int64")),
    ]
