"""Megatron-LM's arguments: packs chained by phase transitions over the run's samples, an LR schedule that
differs between packs refused (Megatron-LM's scheduler would assert on the resume), and seed 004's schedule
refused naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.train.configs.conftest import BATCH, SEED_000, SEQ, U1_TOKENS, plan, signature
from workflow_scripts.datapacks.iterations import train_iters
from workflow_scripts.tokens.kinds import TokenizerFiles
from workflow_scripts.train.configs.checks import ConfigError
from workflow_scripts.train.configs.write import write_pack_config
from workflow_scripts.train.settings import TrainSettings


def test_megatron_arguments_chain_packs_by_phase_transitions(tmp_path: Path, model: Path) -> None:
    base = tmp_path / "base.args"
    base.write_text(
        "--num-layers 4 --hidden-size 512 --num-attention-heads 8 --seq-length 8192\n"
        "--global-batch-size 576 --micro-batch-size 3 --tensor-model-parallel-size 2\n"
        "--lr 1.6e-4 --lr-decay-style cosine --override-opt-param-scheduler\n"
    )
    settings = TrainSettings.from_config({**SEED_000, "trainer": "megatron", "base_config": str(base)})

    def write_u1(eod: int) -> None:
        write_pack_config(
            plan(tmp_path / "merged"), signature(eod), "U1_1", str(base), settings,
            TokenizerFiles.resolve(str(model)), str(tmp_path / "train"), "/scratch/ckpt", 1234,
        )  # fmt: skip

    write_u1(3)
    lines = (tmp_path / "train" / "U1_1" / "U1_1.args").read_text().splitlines()
    n = train_iters(U1_TOKENS, SEQ, BATCH)
    for line in [
        f"--train-data-path {tmp_path}/merged/U1_1/U1_1",
        f"--train-samples {(2000 + n) * BATCH}",  # the whole run's, in every pack
        "--phase-transition-iterations 2000",
        "--save-interval 450",
        "--exit-interval 8550",
        "--exit-duration-in-mins 2510",
        "--exit-signal-handler",
        "--tokenizer-type GPTSentencePieceTokenizer",
        "--override-opt_param-scheduler",
        "--save /scratch/ckpt",
    ]:
        assert line in lines, line
    assert not any(
        x.startswith(("--iteration-offset", "--warmup", "--keep-last", "--train-iters")) for x in lines
    )
    with pytest.raises(ConfigError, match="Megatron-LM's GPTSentencePieceTokenizer takes EOD"):
        write_u1(2)


SEED_004_ROUNDS = [{"interval": 10, "until": 100}, {"interval": 18, "until": 1000}, {"interval": 1500}]


@pytest.mark.parametrize(
    ("extra", "rounds", "named"),
    [
        ("--rampup-batch-size 16 16 5000000", (), "--rampup-batch-size"),
        ("--lr-decay-style WSD --lr-wsd-decay-iters 1000", (), "--lr-wsd-decay-iters"),
        ("--lr-warmup-iters 2000 --lr-decay-iters 220000", (), "--lr-warmup-iters"),
        ("", SEED_004_ROUNDS, "train.checkpoint_rounds"),
    ],
)
def test_seed_004_schedule_for_megatron_is_refused_naming_the_key(
    tmp_path: Path, model: Path, extra: str, rounds: list, named: str
) -> None:
    """Seed 004 (Megatron-LM): batch ramp-up over samples, three checkpoint rounds; and an LR schedule in
    iterations. Packs need a fixed batch, phases count samples (--train-samples), and Megatron-LM saves at
    one interval only."""
    base = tmp_path / "base.args"
    base.write_text(
        "--num-layers 4 --hidden-size 512 --num-attention-heads 8 --seq-length 8192 --global-batch-size 576\n"
        f"--micro-batch-size 3 --tensor-model-parallel-size 2 --lr 1e-4 {extra}\n"
    )
    train = {**SEED_000, "trainer": "megatron", "base_config": str(base), "checkpoint_rounds": rounds}
    train["phase_overrides"] = {}
    with pytest.raises(ConfigError, match=named):
        write_pack_config(
            plan(tmp_path / "merged"), signature(3), "warmup_0", str(base), TrainSettings.from_config(train),
            TokenizerFiles.resolve(str(model)), str(tmp_path / "train"), "/scratch/ckpt", 1,
        )  # fmt: skip


@pytest.mark.parametrize(
    ("keys", "refused"),
    [
        ({"later_packs": {"lr_decay_style": "constant"}}, "learning rate decay style"),
        ({"first_pack": {"lr_warmup_fraction": 0.01}}, "warmup iterations"),
        ({"phase_overrides": {"U1": {"lr": 2e-4}}}, "learning rate"),
        ({"phase_overrides": {"U1": {"lr": 2e-4, "override_opt_param_scheduler": True}}}, None),
        ({"later_packs": {"lr_decay_style": "constant", "use_checkpoint_opt_param_scheduler": True}}, None),
        ({"first_pack": {"lr_warmup_fraction": 0.01}, "later_packs": {"lr_warmup_fraction": 0.01}}, None),
        ({"later_packs": {"weight_decay": 0.1}}, "start weight decay"),
        # left out in one pack, Megatron-LM's default in the other: the same values, the resume loads
        ({"later_packs": {"min_lr": 0.0, "weight_decay": 0.01, "lr_warmup_samples": 0}}, None),
        ({"first_pack": {"lr_decay_style": "linear"}, "later_packs": {"lr_decay_style": "linear"}}, None),
        ({"first_pack": {"lr_warmup_fraction": 0.0}}, None),  # 0.0 x the decay samples: no warmup either
        ({"later_packs": {"lr_warmup_init": 0.0, "weight_decay_incr_style": "constant"}}, None),
    ],
)
def test_a_schedule_that_differs_between_packs_is_refused_as_megatron_would(
    tmp_path: Path, model: Path, keys: dict, refused: str | None
) -> None:
    """U1_1 resumes warmup_0's last checkpoint: OptimizerParamScheduler.load_state_dict asserts that its LR
    and weight-decay values match the checkpoint's unless one of the two scheduler flags says whose win."""
    base = tmp_path / "base.args"
    base.write_text(
        "--num-layers 4 --hidden-size 512 --num-attention-heads 8 --seq-length 8192 --global-batch-size 576\n"
        "--micro-batch-size 3 --tensor-model-parallel-size 2 --lr 1.6e-4 --lr-decay-style cosine\n"
    )
    train = {**SEED_000, "trainer": "megatron", "base_config": str(base), "phase_overrides": {}, **keys}

    def write_u1() -> None:
        write_pack_config(
            plan(tmp_path / "merged"), signature(3), "U1_1", str(base), TrainSettings.from_config(train),
            TokenizerFiles.resolve(str(model)), str(tmp_path / "train"), "/scratch/ckpt", 1,
        )  # fmt: skip

    if refused is None:
        write_u1()
    else:
        with pytest.raises(ConfigError, match=f"checkpoint value for {refused} do not match"):
            write_u1()
