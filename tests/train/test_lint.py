"""Trainer configs linted against the trainers' own argument definitions (vendored key lists)."""

from __future__ import annotations

from pathlib import Path

import pytest

from workflow_scripts.train import lint
from workflow_scripts.train.configs import megatron
from workflow_scripts.train.configs.megatron import MEGATRON_NAMES, NEOX_ONLY, WEIGHTED


def test_neox_dead_unknown_and_miscased_keys() -> None:
    seed_003 = {
        "clip_grad": 1.0,
        "gradient_clipping": 1.0,
        "pack_impl": "k_bin_packed",
        "iteration_offset": 5,
    }
    found = lint.lint_neox(seed_003)
    assert found.errors[0] == (
        "clip_grad: ignored by GPT-NeoX: clip_grad (NeoX) is unconditionally overwritten with "
        "gradient_clipping in calculate_derived; set gradient_clipping"
    )
    assert len(found.errors) == 2 and "no attribute 'clip_grad'" in found.errors[1]  # fp32, ZeRO 0: defaults
    assert any("no clipping" in w for w in found.warnings) and any("LUMI fork" in w for w in found.warnings)
    found = lint.lint_neox({"ffn_hidden_size": 4096, "lr_decay_style": "Cosine", "num_layer": 2})
    assert (
        found.errors[0].startswith("ffn_hidden_size: not a GPT-NeoX key")
        and "intermediate_size" in found.errors[0]
    )
    assert "'Cosine' is not one of" in found.errors[1]
    assert "did you mean num_layers?" in found.errors[2]
    both = {"weight_decay": 0.1, "optimizer": {"type": "Adam", "params": {"lr": 1e-4, "weight_decay": 0.1}}}
    assert "multiple values" in lint.lint_neox(both).errors[0]
    assert (
        "needs cd_start_iter" in lint.lint_neox({"lr_decay_style": "sqrt", "iteration_offset": 10}).errors[0]
    )


@pytest.mark.parametrize(
    ("config", "refused"),
    [
        ({}, True),  # GPT-NeoX's defaults: fp32, ZeRO stage 0
        ({"precision": "fp32", "zero_optimization": {"stage": 0}}, True),
        ({"zero_optimization": {"stage": 0, "overlap_comm": True}}, True),
        ({"precision": "bfloat16", "zero_optimization": {"stage": 0}}, False),
        ({"bf16": {"enabled": True}}, False),
        ({"precision": "fp16"}, False),
        ({"fp16": {"enabled": True}}, False),
        ({"fp16": {"enabled": False}}, True),
        ({"zero_optimization": {"stage": 1}}, False),
        ({"precision": "fp32", "zero_optimization": {"stage": 3}}, False),
    ],
)
def test_the_fork_needs_an_optimizer_with_clip_grad(config: dict[str, object], refused: bool) -> None:
    """The LUMI fork's load_checkpoint sets the optimizer's clip_grad, which DeepSpeed's plain fp32 optimizer
    (no ZeRO) lacks: refused for the fork, with the way out; upstream does not set it (the fork's own code
    on these configs: tests/train/test_neox_in_the_loop.py)."""
    errors = [e for e in lint.lint_neox(config).errors if "clip_grad" in e]
    assert bool(errors) == refused, errors
    if refused:
        assert "bfloat16" in errors[0] and "zero_optimization.stage 1" in errors[0], errors
    assert not [e for e in lint.lint_neox(config, upstream=True).errors if "clip_grad" in e]


def test_megatron_flags(tmp_path: Path) -> None:
    base = tmp_path / "args"
    base.write_text(
        "--num-layers 40 --hidden-size 5120 --num-attention-heads 32\n"
        "#    --ffn_hidden_size $FFN_HIDDEN_SIZE \\\n"
        "--ffn_hidden_size 20480\n--rampup-batch-size 16 16 5_000_000\n--override-opt-param-scheduler\n"
    )
    parsed = megatron.read_base(str(base))
    assert parsed["num_layers"] == 40 and parsed["rampup_batch_size"] == [16, 16, "5_000_000"]
    assert parsed["override_opt_param_scheduler"] is True and parsed["--ffn_hidden_size"] == 20480
    errors = lint.lint_megatron(parsed).errors
    assert (
        errors[0].startswith("--ffn_hidden_size: Megatron-LM rejects it")
        and "write --ffn-hidden-size" in errors[0]
    )
    assert (
        errors[1].startswith("--rampup-batch-size: a batch ramp-up changes the tokens") and len(errors) == 2
    )
    assert megatron.render({"override_opt_param_scheduler": True, "train_data_path": ["a", "b"]}) == (
        "--override-opt_param-scheduler\n--train-data-path a b\n"
    )


@pytest.mark.parametrize("trainer", ["neox", "megatron"])
def test_every_key_the_workflow_sets_is_the_trainers_own(trainer: str) -> None:
    names = [
        "train_data_paths",
        "valid_data_paths",
        "train_iters",
        "iteration_offset",
        "seq_length",
        "train_batch_size",
        "save",
        "load",
        "vocab_file",
        "tokenizer_type",
        "seed",
        "checkpoint_factor",
        "extra_save_iters",
        "exit_interval",
        "keep_last_n_checkpoints",
        "finetune",
        "warmup",
        "lr_decay_style",
        "override_lr_scheduler",
        "train_data_weights",
        "valid_data_weights",
    ]
    if trainer == "neox":
        assert set(names) <= set(lint.trainer_keys("neox")["keys"])
    else:
        megatron = {MEGATRON_NAMES.get(n, n) for n in names} - set(NEOX_ONLY) - set(WEIGHTED.values())
        megatron -= {"keep_last_n_checkpoints", "warmup", "lr_decay_style", "override_lr_scheduler"}
        assert megatron | {
            "phase_transition_iterations",
            "exit_duration_in_mins",
            "exit_signal_handler",
        } <= set(lint.trainer_keys("megatron")["keys"])
