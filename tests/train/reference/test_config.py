"""The reference trainer's config: keys not implemented are listed, what would change the samples read is
refused, GPT-NeoX's LR schedule, and a clear message without DeepSpeed."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.train.reference.conftest import write_config
from workflow_scripts.train.reference import engine
from workflow_scripts.train.reference.config import load_config
from workflow_scripts.train.reference.lr import Schedule
from workflow_scripts.train.reference.run_config import ConfigError


def test_unimplemented_keys_and_values_are_listed(tmp_path: Path, model: Path) -> None:
    path = write_config(
        tmp_path / "c.yml",
        model,
        train_data_paths=["x"],
        train_iters=5,
        precision="bfloat16",
        zero_optimization={"stage": 2, "overlap_comm": True},
        rope_fusion=True,
    )
    cfg = load_config([str(path)])
    assert cfg.not_implemented == [
        "precision: bfloat16 (fp32: no GPU with bf16 here)",
        "zero_optimization.stage: 2 (stage 1 is used)",
        "zero_optimization: overlap_comm",
        "ignored: rope_fusion, test_data_paths",
    ]
    assert (cfg.precision, cfg.zero_stage, cfg.name, cfg.end) == ("fp32", 1, "c", 5)
    assert cfg.model.vocab_size == 384  # 300 padded to a multiple of 128, as GPT-NeoX does


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ({"train_batch_size": 8}, "train_batch_size 8 != train_micro_batch_size_per_gpu 2 x"),
        ({"model_parallel_size": 2}, "data parallel only"),
        ({"pack_impl": "unpacked"}, "pack_impl: unpacked"),
        ({"lr_decay_style": "Cosine"}, "lr_decay_style: Cosine"),
        ({"checkpoint_scale": "log"}, "only linear"),
        ({"pos_emb": "alibi"}, "pos_emb: alibi: the reference trainer builds learned or rotary or none"),
        ({"activation": "geglu"}, "activation: geglu: the reference trainer builds gelu or swiglu"),
        ({"num_kv_heads": 3}, "num_kv_heads 3 must divide num_attention_heads"),
    ],
)
def test_what_would_change_the_run_is_refused(tmp_path: Path, model: Path, keys: dict, message: str) -> None:
    path = write_config(tmp_path / "c.yml", model, train_data_paths=["x"], train_iters=5, **keys)
    with pytest.raises(ConfigError, match=message):
        load_config([str(path)])


def test_annealing_lr_follows_neox() -> None:
    warm = Schedule.of(1e-3, 1e-4, 1.0, 10, "cosine")  # seed 000's warmup pack: warmup 1
    assert [warm.lr(n) for n in (0, 5, 10)] == [0.0, 5e-4, 1e-3]
    cosine = Schedule.of(1e-3, 1e-4, 0.0, 10, "cosine")
    assert cosine.lr(0) == 1e-3 and cosine.lr(5) == pytest.approx(5.5e-4) and cosine.lr(10) == 1e-4
    linear = Schedule.of(1e-3, 1e-4, 0.0, 10, "linear")
    assert linear.lr(5) == pytest.approx(5e-4) and linear.lr(10) == 1e-4  # never below min_lr
    assert Schedule.of(1e-3, 0.0, 0.0, 10, "constant").lr(7) == 1e-3
    assert Schedule.from_state(cosine.state(7)) == cosine


def test_without_deepspeed_the_message_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    monkeypatch.setattr(os, "environ", dict(os.environ))  # import_deepspeed sets defaults in the environment
    monkeypatch.setitem(sys.modules, "deepspeed", None)  # import deepspeed -> ImportError
    with pytest.raises(
        engine.MissingDependency, match=r"deepspeed cannot be imported .*pip install torch==2\.13"
    ):
        engine.import_deepspeed()
