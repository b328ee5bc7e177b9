"""Shared fixtures of the train tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.utils import write_jsonl
from workflow_scripts.cli import main as snakepack


@pytest.fixture(scope="session")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("model")
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa"]
    texts = [" ".join(words[i % 7 :] + words[: i % 5]) for i in range(300)]
    src = write_jsonl(root / "corpus.jsonl", [{"text": t} for t in texts])
    args = [str(src), "--model-prefix", str(root / "spm"), "--vocab-size", "300", "--max-sentences", "1000"]
    assert snakepack(["train-tokenizer", *args]) == 0
    return root / "spm.model"
