"""Helpers of the reference trainer's tests: tiny packs, tiny configs, the trainer as a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import sentencepiece as spm
import yaml

from tests.utils import REPO, build_dataset, tail
from workflow_scripts.train.reference.metrics import read_loss_csv

SEQ = 32
# torchrun with two local ranks
TORCHRUN = (sys.executable, "-m", "torch.distributed.run", "--master_addr", "127.0.0.1")
TWO_RANKS = (*TORCHRUN, "--nproc_per_node", "2")
BATCH = 4


@pytest.fixture(scope="session")
def eod(model: Path) -> int:
    return spm.SentencePieceProcessor(model_file=str(model)).piece_to_id("<|endoftext|>")


def pattern_docs(n: int, seed: int, eod: int, low: int = 20, high: int = 70) -> list[list[list[int]]]:
    """Learnable documents: counting sequences with a per-document step, ending with EOD."""
    rng = np.random.default_rng(seed)
    docs = []
    for _ in range(n):
        start, step, length = int(rng.integers(0, 40)), int(rng.integers(1, 4)), int(rng.integers(low, high))
        docs.append([[10 + (start + step * k) % 40 for k in range(length)] + [eod]])
    return docs


def make_pack(path: Path, docs: list[list[list[int]]]) -> str:
    return build_dataset(path, docs)


@pytest.fixture(scope="session")
def packs(tmp_path_factory: pytest.TempPathFactory, eod: int) -> dict[str, str]:
    """Three training packs and a validation pack (about 15k tokens each)."""
    root = tmp_path_factory.mktemp("packs")
    return {
        name: make_pack(root / name / name, pattern_docs(300, seed, eod))
        for seed, name in enumerate(["pack_a", "pack_b", "pack_c", "valid"])
    }


def write_config(path: Path, model: Path, **keys: Any) -> Path:
    """A tiny GPT-NeoX config (dropout on, so that a resume must restore the RNG); ``keys`` override."""
    config = {
        "num_layers": 2,
        "hidden_size": 32,
        "num_attention_heads": 4,
        "seq_length": SEQ,
        "max_position_embeddings": SEQ,
        "pos_emb": "learned",
        "norm": "layernorm",
        "attention_dropout": 0.1,
        "hidden_dropout": 0.1,
        "optimizer": {"type": "Adam", "params": {"lr": 0.003, "betas": [0.9, 0.95], "eps": 1.0e-8}},
        "min_lr": 0.0003,
        "lr_decay_style": "cosine",
        "warmup": 0.1,
        "weight_decay": 0.01,
        "gradient_clipping": 1.0,
        "zero_optimization": {"stage": 0},
        "train_batch_size": BATCH,
        "train_micro_batch_size_per_gpu": 2,
        "gradient_accumulation_steps": 2,
        "precision": "fp32",
        "eval_interval": 1000,
        "eval_iters": 2,
        "log_interval": 1,
        "seed": 1234,
        "vocab_file": str(model),
        "tokenizer_type": "SPMTokenizer",
        "iteration_offset": 0,
        "checkpoint_factor": 4,
        "test_data_paths": [],
    }
    config.update(keys)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def trainer_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT")
    }
    env.update(OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", PYTHONPATH=str(REPO))
    env.update(extra or {})
    return env


def command(config: Path, *extra: str) -> list[str]:
    args = ["--config", str(config), "--threads", "1", "--deterministic", *extra]
    return [sys.executable, "-m", "workflow_scripts.train.reference", *args]


def run_trainer(
    config: Path, *extra: str, env: dict[str, str] | None = None, ok: bool = True
) -> subprocess.CompletedProcess:
    """Run the trainer to its end; with ``ok``, assert that it exits 0."""
    proc = subprocess.run(
        command(config, *extra), cwd=REPO, env=trainer_env(env), capture_output=True, text=True, timeout=300
    )
    proc.output = proc.stdout + proc.stderr
    if ok:
        assert proc.returncode == 0, f"rc {proc.returncode}:\n{tail(proc.output)}"
    return proc


def start_trainer(config: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        command(config),
        cwd=REPO,
        env=trainer_env(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def wait_for(proc: subprocess.Popen, found: Callable[[str], bool], timeout: float = 120) -> list[str]:
    """Read the trainer's output until a line satisfies ``found``; return the lines read."""
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if found(line):
            return lines
    proc.kill()
    raise AssertionError("the trainer ended or stalled before the expected line:\n" + "".join(lines[-40:]))


def losses(out: Path) -> list[tuple[int, str, str]]:
    """(iteration, loss, lr) of a run's ``loss.csv``, as written (exact)."""
    return [(int(r["iteration"]), r["loss"], r["lr"]) for r in read_loss_csv(out / "loss.csv")]


def latest(checkpoints: Path) -> str:
    return (checkpoints / "latest").read_text().strip()
