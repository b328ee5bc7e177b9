"""Shared settings of the trainer config tests: seed 000's 30B base config and cluster, a plan of its warmup
and U1_1 packs, and ``write``, which makes one pack's GPT-NeoX config and returns it with its keys file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from workflow_scripts.core.fsio import read_json
from workflow_scripts.datapacks.iterations import train_iters
from workflow_scripts.datapacks.plan import PackPlan, Plan
from workflow_scripts.tokens.kinds import TokenizerFiles
from workflow_scripts.train.configs.write import write_pack_config
from workflow_scripts.train.settings import TrainSettings

SEQ, BATCH = 8192, 576  # seed 000: 4,718,592 tokens per iteration
U1_TOKENS = 140_562_412_339  # the U1_1 pack seed 000 estimated at 29789.3 iterations

# Seed 000's 30B base config, as far as the runbook shows it.
BASE = {
    "pipe_parallel_size": 1,
    "model_parallel_size": 2,
    "num_layers": 4,
    "hidden_size": 512,
    "num_attention_heads": 8,
    "max_position_embeddings": SEQ,
    "seq_length": SEQ,
    "train_batch_size": BATCH,
    "train_micro_batch_size_per_gpu": 3,
    "gradient_accumulation_steps": 1,
    "optimizer": {"type": "Adam", "params": {"lr": 1.6e-4, "betas": [0.9, 0.95], "eps": 1.0e-8}},
    "gradient_clipping": 0.5,
    "lr_decay_style": "cosine",
    "eval_interval": 500,
    "data_impl": "mmap",
    "precision": "bfloat16",  # the LUMI fork cannot load with fp32 and no ZeRO (train/lint.py)
}

SEED_000 = {
    "nodes": 48,  # 48 x 8 GPUs / TP 2 = DP 192 = 576 / micro batch 3
    "gpus_per_node": 8,
    "seconds_per_iter": 17,
    "checkpoint_hours": 2.125,  # 450 iterations at 17 s/iter
    "time_limit_minutes": 2520,  # 42 h: exit_interval 8550 ("exit every ~40 h")
    "keep_last": 100_000,
    "phase_overrides": {
        "warmup": {
            "optimizer": {"type": "Adam", "params": {"lr": 1.8e-4, "betas": [0.9, 0.95], "eps": 1.0e-8}},
            "gradient_clipping": 0.4,
            "eval_interval": 250,
            "checkpoint_factor": 1750,
        }
    },
}


def small_plan(seq: int, batch: int, packs: list[tuple[str, str, int, int, str]]) -> Plan:
    """A plan of ``packs`` (name, phase, train_iters, iteration_offset, merged prefix) without validation
    packs; of each pack's data only what the trainer configs read (1 token, one source)."""
    return Plan(
        tokens_per_iter=seq * batch,
        seq_length=seq,
        global_batch_size=batch,
        epoch_rule="neox",
        max_tokens_per_pack=seq * batch,
        shuffle=False,
        seed=1,
        phases=(),
        packs=tuple(
            PackPlan(
                name=name,
                phase=phase,
                mixture="main",
                budget=1,
                tokens=1,
                documents=1,
                sources=1,
                upsampled_sources=0,
                train_iters=iters,
                iteration_offset=offset,
                trained_tokens=iters * seq * batch,
                wall_hours=None,
                merged_prefix=prefix,
            )
            for name, phase, iters, offset, prefix in packs
        ),
        validation=(),
        total_train_iters=sum(p[2] for p in packs),
    )


def plan(merged: Path) -> Plan:
    packs = [("warmup_0", "warmup", 2000, 0), ("U1_1", "U1", train_iters(U1_TOKENS, SEQ, BATCH), 2000)]
    return small_plan(SEQ, BATCH, [(n, ph, it, off, str(merged / n / n)) for n, ph, it, off in packs])


def signature(eod: int) -> dict[str, Any]:
    return {"prefixes": [{"identity": {"tokenizer": {"eod_id": eod}}}]}


def write(tmp_path: Path, model: Path, base: dict, train: dict, pack: str, eod: int = 3) -> tuple[dict, dict]:
    base_path = tmp_path / "base.yml"
    base_path.write_text(yaml.safe_dump(base))
    settings = TrainSettings.from_config({**train, "base_config": str(base_path)})
    write_pack_config(
        plan(tmp_path / "merged"),
        signature(eod),
        pack,
        str(base_path),
        settings,
        TokenizerFiles.resolve(str(model)),
        str(tmp_path / "train"),
        "/scratch/ckpt",
        1234,
    )
    config = yaml.safe_load((tmp_path / "train" / pack / f"{pack}.yml").read_text())
    return config, read_json(tmp_path / "train" / pack / "keys.json")
