"""Shared fixtures of the train tests."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from tests.train.launches import CONFIG, START
from tests.utils import Workflow, byte_level_bpe, gpt2_pair, sft_config, write_jsonl
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


# name -> the variant's train section (and other config sections): trainer, finetune_from (a start), GPT-NeoX
VARIANTS = {
    "neox": {"trainer": "neox"},
    "neox-finetune": {"trainer": "neox", "finetune_from": "start"},
    "megatron": {"trainer": "megatron"},
    "megatron-finetune": {"trainer": "megatron", "finetune_from": "start"},
    # upstream GPT-NeoX (train.neox: upstream) trains a one-pack plan only (configs/neox.py: check_tree)
    "neox-upstream": {"trainer": "neox", "neox": "upstream", "phases": [{"name": "warmup", "iters": 10}]},
}


class Variants(dict[str, Workflow]):
    """The variants of ``VARIANTS``, each built on first use (a test builds only those it reads)."""

    def __init__(self, sample_run: Workflow, root: Path) -> None:
        super().__init__()
        self.sample_run, self.root = sample_run, root

    def __missing__(self, name: str) -> Workflow:
        spec = dict(VARIANTS[name])
        trainer, phases = spec["trainer"], spec.pop("phases", None)
        base = "config/train/neox-sample.yml" if trainer == "neox" else "config/train/megatron-sample.args"
        if spec.get("finetune_from"):
            start = self.root / "start" / checkpoint_dirs.of(trainer).tag(START)
            start.mkdir(parents=True, exist_ok=True)
            spec["finetune_from"] = str(start)
        config: dict = {"train": {"base_config": base, "finetune_from": None, **spec}}
        if phases:
            config["datapacks"] = {"phases": [p | {"mixture": "main"} for p in phases]}
        wf = self[name] = self.sample_run.clone(self.root / name)
        if phases:  # another plan: none of the sample's packs' trainer configs
            shutil.rmtree(wf.root / "results" / "train")
        (wf.root / "variant.yaml").write_text(yaml.safe_dump(config))
        wf.ok("--profile", "profiles/local", "--cores", "2", "train_configs", *CONFIG)
        return wf


@pytest.fixture(scope="session")
def variants(sample_run: Workflow, tmp_path_factory: pytest.TempPathFactory) -> Variants:
    """The sample's trainer configs, rebuilt by the workflow for each trainer, with and without a start,
    and for upstream GPT-NeoX (shared by the trainer-compatibility and trainer-in-the-loop tests:
    tests/train/launches.py)."""
    return Variants(sample_run, tmp_path_factory.mktemp("compat"))


@pytest.fixture(scope="session")
def sft_run(tmp_path_factory: pytest.TempPathFactory) -> Workflow:
    """SFT chats (seed 003's markers) through the workflow to their trainer configs (k_bin_packed)."""
    root = tmp_path_factory.mktemp("compat-sft")
    wf = Workflow(root / "wf")
    config = sft_config(root / "raw") | {
        "training": {"seq_length": 512, "global_batch_size": 8},
        "train": {"base_config": "config/train/neox-sample.yml", "nodes": 1, "gpus_per_node": 1},
    }
    (wf.root / "variant.yaml").write_text(yaml.safe_dump(config))
    wf.ok("--profile", "profiles/local", "--cores", "2", "train_configs", "--configfile", "variant.yaml")
    return wf
