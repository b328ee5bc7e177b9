"""Shared fixtures of the train tests."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.train.launches import CONFIG, START
from tests.utils import Workflow, byte_level_bpe, gpt2_pair, write_jsonl
from workflow_scripts.cli import main as snakepack
from workflow_scripts.train import checkpoint_dirs


@pytest.fixture(scope="session")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("model")
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa"]
    texts = [" ".join(words[i % 7 :] + words[: i % 5]) for i in range(300)]
    src = write_jsonl(root / "corpus.jsonl", [{"text": t} for t in texts])
    args = [str(src), "--model-prefix", str(root / "spm"), "--vocab-size", "300", "--max-sentences", "1000"]
    assert snakepack(["train-tokenizer", *args]) == 0
    return root / "spm.model"


@pytest.fixture(scope="session")
def bpe_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Byte-level data tokenizers with ``<|endoftext|>``: ``hf`` (a tokenizer.json with its
    tokenizer_config.json) and ``gpt2`` (the same BPE as GPT-2's vocab.json + merges.txt); and ``llama3``
    (a tokenizer.json without ``<|endoftext|>``)."""
    root = tmp_path_factory.mktemp("bpe")
    texts = ["Größe alpha beta, gamma; Москва 東京 delta 12345.", "epsilon zeta eta  theta\tiota kappa"] * 50
    hf = byte_level_bpe(root / "hf", texts, vocab_size=400)
    return {
        "hf": hf,
        "gpt2": gpt2_pair(hf, root / "gpt2")[0],
        "llama3": byte_level_bpe(root / "llama3", texts, llama3=True, vocab_size=400),
    }


@pytest.fixture(scope="session")
def variants(sample_run: Workflow, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Workflow]:
    """The sample's trainer configs, rebuilt by the workflow for each trainer, with and without a start
    (shared by the trainer-compatibility and trainer-in-the-loop tests: tests/train/launches.py)."""
    root = tmp_path_factory.mktemp("compat")
    starts = {t: root / "start" / checkpoint_dirs.of(t).tag(START) for t in checkpoint_dirs.TRAINERS}
    for path in starts.values():
        path.mkdir(parents=True)
    built = {}
    for trainer, finetuned in [("neox", False), ("neox", True), ("megatron", False), ("megatron", True)]:
        name = f"{trainer}{'-finetune' if finetuned else ''}"
        wf = sample_run.clone(root / name)
        base = "config/train/neox-sample.yml" if trainer == "neox" else "config/train/megatron-sample.args"
        train = {
            "trainer": trainer,
            "base_config": base,
            "finetune_from": str(starts[trainer]) if finetuned else None,
        }
        (wf.root / "variant.yaml").write_text(yaml.safe_dump({"train": train}))
        wf.ok("--profile", "profiles/local", "--cores", "2", "train_configs", *CONFIG)
        built[name] = wf
    return built
