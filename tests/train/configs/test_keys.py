"""The keys computed for a pack: seed 000's warmup and U1_1 configs reproduced key by key, and a fine-tune's
start checkpoint offsetting every pack."""

from __future__ import annotations

from pathlib import Path

from tests.train.configs.conftest import BASE, BATCH, SEED_000, SEQ, U1_TOKENS, write
from workflow_scripts.datapacks.iterations import train_iters


def test_seed_000_u1_1_key_by_key(tmp_path: Path, model: Path) -> None:
    config, record = write(tmp_path, model, BASE, SEED_000, "U1_1")
    n = train_iters(U1_TOKENS, SEQ, BATCH)
    assert n < 29790  # the seed rounded 29789.3 up: a second, reshuffled epoch under GPT-NeoX
    expected = {
        "train_data_paths": [str(tmp_path / "merged" / "U1_1" / "U1_1")],  # no .bin
        "lr_decay_style": "constant",
        "warmup": 0,
        "train_iters": n,
        "iteration_offset": 2000,
        "override_lr_scheduler": True,
        "checkpoint_factor": 450,
        "exit_interval": 8550,
        "keep_last_n_checkpoints": None,  # retention is the workflow's: GPT-NeoX deletes nothing
        "save": "/scratch/ckpt",
        "load": "/scratch/ckpt",
    }
    assert {k: config[k] for k in expected} == expected
    assert config["optimizer"]["params"]["lr"] == 1.6e-4 and config["gradient_clipping"] == 0.5
    assert config["eval_interval"] == 500
    assert record["summary"]["segments"] == -(-n // 8550) + 1  # one spare segment
    assert record["replaced_from_base"] == {"lr_decay_style": "cosine"}


def test_seed_000_warmup_key_by_key(tmp_path: Path, model: Path) -> None:
    config, _ = write(tmp_path, model, BASE, SEED_000, "warmup_0")
    expected = {
        "train_iters": 2000,
        "iteration_offset": 0,
        "warmup": 1,
        "checkpoint_factor": 1750,
        "exit_interval": 8750,
        "eval_interval": 250,
        "gradient_clipping": 0.4,
    }
    assert {k: config[k] for k in expected} == expected
    assert config["optimizer"]["params"]["lr"] == 1.8e-4
    assert "override_lr_scheduler" not in config  # seed 000: absent for the warmup pack


def test_finetune_start_checkpoint_offsets_every_pack(tmp_path: Path, model: Path) -> None:
    train = {**SEED_000, "finetune_from": "/scratch/ckpt/final/global_step423858"}
    first, _ = write(tmp_path, model, BASE, train, "warmup_0")
    later, _ = write(tmp_path, model, BASE, train, "U1_1")
    assert (first["iteration_offset"], first["finetune"]) == (423858, True)
    assert (later["iteration_offset"], later["finetune"]) == (425858, False)
