"""The tokens tests' shared corpus and the SentencePiece model the workflow's trainer makes of it."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tests.utils import WORDS as ALL_WORDS
from tests.utils import write_jsonl
from workflow_scripts.tokens import train_tokenizer
from workflow_scripts.tokens.engines.sp_tokenizer import SentencePieceTokenizer

WORDS = {lang: ALL_WORDS[lang] for lang in ("en", "ru", "zh", "ja")}


def make_text(rng: random.Random, lang: str, sentences: int) -> str:
    joiner = "" if lang in ("zh", "ja") else " "
    return "\n".join(
        joiner.join(rng.choices(WORDS[lang], k=rng.randint(4, 12))) + "." for _ in range(sentences)
    )


@pytest.fixture(scope="session")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    rng = random.Random(7)
    root = tmp_path_factory.mktemp("corpus")
    paths = []
    for lang in WORDS:
        records = [{"id": f"{lang}-{i}", "text": make_text(rng, lang, 6)} for i in range(150)]
        paths.append(write_jsonl(root / f"{lang}_web_cc_split_0001.jsonl", records))
    return paths


@pytest.fixture(scope="session")
def model(corpus: list[Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    prefix = tmp_path_factory.mktemp("tok") / "spm"
    args = [
        *map(str, corpus),
        "--model-prefix",
        str(prefix),
        "--vocab-size",
        "400",
        "--max-sentences",
        "2000",
    ]
    assert train_tokenizer.main(args) == 0
    return prefix.with_suffix(".model")


@pytest.fixture(scope="session")
def tokenizer(model: Path) -> SentencePieceTokenizer:
    return SentencePieceTokenizer(model)
