"""Per-pack trainer configs: seed 000's warmup and U1_1 configs reproduced key by key, and every impossible
setting refused with a message that says what to change."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.utils import byte_level_bpe, gpt2_pair
from workflow_scripts.core.fsio import read_json
from workflow_scripts.core.schedule import ScheduleError
from workflow_scripts.datapacks.iterations import train_iters
from workflow_scripts.tokens.hf_tokenizer import HFTokenizer
from workflow_scripts.tokens.kinds import TokenizerFiles
from workflow_scripts.train import configs
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
    "seq_length": SEQ,
    "train_batch_size": BATCH,
    "train_micro_batch_size_per_gpu": 3,
    "gradient_accumulation_steps": 1,
    "optimizer": {"type": "Adam", "params": {"lr": 1.6e-4, "betas": [0.9, 0.95], "eps": 1.0e-8}},
    "gradient_clipping": 0.5,
    "lr_decay_style": "cosine",
    "eval_interval": 500,
    "data_impl": "mmap",
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


def plan(merged: Path) -> dict[str, Any]:
    packs = [("warmup_0", "warmup", 2000, 0), ("U1_1", "U1", train_iters(U1_TOKENS, SEQ, BATCH), 2000)]
    return {
        "seq_length": SEQ,
        "global_batch_size": BATCH,
        "packs": [
            {
                "name": n,
                "phase": ph,
                "train_iters": it,
                "iteration_offset": off,
                "tokens": 1,
                "merged_prefix": str(merged / n / n),
            }
            for n, ph, it, off in packs
        ],
    }


def signature(eod: int) -> dict[str, Any]:
    return {"prefixes": [{"identity": {"tokenizer": {"eod_id": eod}}}]}


def write(tmp_path: Path, model: Path, base: dict, train: dict, pack: str, eod: int = 3) -> tuple[dict, dict]:
    base_path = tmp_path / "base.yml"
    base_path.write_text(yaml.safe_dump(base))
    settings = TrainSettings.from_config({**train, "base_config": str(base_path)})
    configs.write_pack_config(
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


@pytest.mark.parametrize(
    ("base", "train", "message"),
    [
        (
            {**BASE, "seq_length": 4096},
            SEED_000,
            "seq_length 4096, but the plan uses training.seq_length 8192",
        ),
        ({**BASE, "train_batch_size": 512}, SEED_000, "train batch size 512, but the plan uses"),
        ({**BASE, "train_micro_batch_size_per_gpu": 5}, SEED_000, r"use 0\|960|use 960"),
        ({**BASE, "gradient_accumulation_steps": 2}, SEED_000, "gradient_accumulation_steps 2, but 576"),
        ({**BASE, "num_attention_heads": 7}, SEED_000, "not the hidden size 512"),
        (BASE, {**SEED_000, "nodes": 47}, "not divisible by micro batch 3 x data parallel 188"),
        (BASE, {**SEED_000, "time_limit_minutes": 60}, "fewer than one checkpoint interval"),
    ],
)
def test_impossible_settings_say_what_to_change(
    tmp_path: Path, model: Path, base: dict, train: dict, message: str
) -> None:
    with pytest.raises((configs.ConfigError, ScheduleError), match=message):
        write(tmp_path, model, base, train, "U1_1")


def test_neox_eod_must_match_the_data(tmp_path: Path, model: Path) -> None:
    with pytest.raises(configs.ConfigError, match=r"ends documents with id 2 \('</s>'\), but GPT-NeoX"):
        write(tmp_path, model, BASE, SEED_000, "U1_1", eod=2)


def test_finetune_start_checkpoint_offsets_every_pack(tmp_path: Path, model: Path) -> None:
    train = {**SEED_000, "finetune_from": "/scratch/ckpt/final/global_step423858"}
    first, _ = write(tmp_path, model, BASE, train, "warmup_0")
    later, _ = write(tmp_path, model, BASE, train, "U1_1")
    assert (first["iteration_offset"], first["finetune"]) == (423858, True)
    assert (later["iteration_offset"], later["finetune"]) == (425858, False)


def test_megatron_arguments_chain_packs_by_phase_transitions(tmp_path: Path, model: Path) -> None:
    base = tmp_path / "base.args"
    base.write_text(
        "--num-layers 4 --hidden-size 512 --num-attention-heads 8 --seq-length 8192\n"
        "--global-batch-size 576 --micro-batch-size 3 --tensor-model-parallel-size 2\n"
        "--lr 1.6e-4 --lr-decay-style cosine --override-opt-param-scheduler\n"
    )
    settings = TrainSettings.from_config({**SEED_000, "trainer": "megatron", "base_config": str(base)})

    def write_u1(eod: int) -> None:
        configs.write_pack_config(
            plan(tmp_path / "merged"), signature(eod), "U1_1", str(base), settings,
            TokenizerFiles.resolve(str(model)), str(tmp_path / "train"), "/scratch/ckpt", 1234,
        )  # fmt: skip

    write_u1(3)
    lines = (tmp_path / "train" / "U1_1" / "U1_1.args").read_text().splitlines()
    n = train_iters(U1_TOKENS, SEQ, BATCH)
    for line in [
        f"--train-data-path {tmp_path}/merged/U1_1/U1_1",
        f"--train-iters {2000 + n}",  # the global step the pack ends at
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
    assert not any(x.startswith(("--iteration-offset", "--warmup", "--keep-last")) for x in lines)
    with pytest.raises(configs.ConfigError, match="Megatron-LM's GPTSentencePieceTokenizer takes EOD"):
        write_u1(2)


@pytest.mark.parametrize("llama3", [False, True], ids=["endoftext", "eos_token"])
def test_a_tokenizer_json_names_the_trainers_hf_tokenizer_and_its_eod(tmp_path: Path, llama3: bool) -> None:
    model = byte_level_bpe(tmp_path / "tok", ["some text to learn from, twice"] * 4, llama3=llama3)
    eod = HFTokenizer(model).eod()[0]
    if llama3:  # GPT-NeoX's HFTokenizer takes <|endoftext|>, which this tokenizer lacks
        with pytest.raises(configs.ConfigError, match=r"GPT-NeoX's HFTokenizer takes EOD = token_to_id"):
            write(tmp_path, model, BASE, SEED_000, "U1_1", eod=eod)
    else:
        config, _ = write(tmp_path, model, BASE, SEED_000, "U1_1", eod=eod)
        assert (config["tokenizer_type"], config["vocab_file"]) == ("HFTokenizer", str(model))
        with pytest.raises(configs.ConfigError, match=r"ends documents with id 5 .*HFTokenizer takes EOD"):
            write(tmp_path, model, BASE, SEED_000, "U1_1", eod=5)
    base = tmp_path / "base.args"
    base.write_text(
        "--num-layers 4 --hidden-size 512 --num-attention-heads 8 --seq-length 8192\n"
        "--global-batch-size 576 --micro-batch-size 3 --tensor-model-parallel-size 2\n"
    )
    settings = TrainSettings.from_config({**SEED_000, "trainer": "megatron", "base_config": str(base)})
    files = TokenizerFiles.resolve(str(model))
    args = [plan(tmp_path / "merged"), signature(eod), "U1_1", str(base), settings, files]
    configs.write_pack_config(*args, str(tmp_path / "train"), "/scratch/ckpt", 1234)
    lines = (tmp_path / "train" / "U1_1" / "U1_1.args").read_text().splitlines()
    assert "--tokenizer-type HuggingFaceTokenizer" in lines and f"--tokenizer-model {model.parent}" in lines
    with pytest.raises(configs.ConfigError, match="Megatron-LM's HuggingFaceTokenizer takes EOD = eos_token"):
        configs.write_pack_config(*args[:1], signature(eod + 1), *args[2:], str(tmp_path / "t2"), "/c", 1)


def test_a_gpt2_pair_names_the_trainers_gpt2_bpe_tokenizer_and_both_files(tmp_path: Path) -> None:
    vocab, merges = gpt2_pair(byte_level_bpe(tmp_path / "tok", ["some text to learn from"] * 4), tmp_path)
    files = TokenizerFiles.resolve(str(vocab))
    eod = files.load().eod()[0]
    config, _ = write(tmp_path, vocab, BASE, SEED_000, "U1_1", eod=eod)
    assert (config["tokenizer_type"], config["vocab_file"], config["merge_file"]) == (
        "GPT2BPETokenizer",
        str(vocab),
        str(merges),
    )
    with pytest.raises(configs.ConfigError, match=r"GPT-NeoX's GPT2BPETokenizer takes EOD = token_to_id"):
        write(tmp_path, vocab, BASE, SEED_000, "U1_1", eod=eod + 1)
    base = tmp_path / "base.args"
    base.write_text(
        "--num-layers 4 --hidden-size 512 --num-attention-heads 8 --seq-length 8192\n"
        "--global-batch-size 576 --micro-batch-size 3 --tensor-model-parallel-size 2\n"
    )
    settings = TrainSettings.from_config({**SEED_000, "trainer": "megatron", "base_config": str(base)})
    args = [plan(tmp_path / "merged"), signature(eod), "U1_1", str(base), settings, files]
    configs.write_pack_config(*args, str(tmp_path / "train"), "/scratch/ckpt", 1234)
    lines = (tmp_path / "train" / "U1_1" / "U1_1.args").read_text().splitlines()
    for line in ["--tokenizer-type GPT2BPETokenizer", f"--vocab-file {vocab}", f"--merge-file {merges}"]:
        assert line in lines, line
    assert not any(line.startswith("--tokenizer-model") for line in lines)


SEED_004_ROUNDS = [{"interval": 10, "until": 100}, {"interval": 18, "until": 1000}, {"interval": 1500}]


@pytest.mark.parametrize(
    ("extra", "rounds", "named"),
    [
        ("--rampup-batch-size 16 16 5000000", (), "--rampup-batch-size"),
        ("--train-samples 300000000", (), "--train-samples"),
        ("--lr-warmup-samples 216320 --lr-decay-samples 126953125", (), "--lr-warmup-samples"),
        ("", SEED_004_ROUNDS, "train.checkpoint_rounds"),
    ],
)
def test_seed_004_schedule_for_megatron_is_refused_naming_the_key(
    tmp_path: Path, model: Path, extra: str, rounds: list, named: str
) -> None:
    """Seed 004 (Megatron-LM): batch ramp-up over samples, LR warmup and decay in samples, three checkpoint
    rounds. Packs need a fixed batch and --train-iters; Megatron-LM saves at one interval only."""
    base = tmp_path / "base.args"
    base.write_text(
        "--num-layers 4 --hidden-size 512 --num-attention-heads 8 --seq-length 8192 --global-batch-size 576\n"
        f"--micro-batch-size 3 --tensor-model-parallel-size 2 --lr 1e-4 {extra}\n"
    )
    train = {**SEED_000, "trainer": "megatron", "base_config": str(base), "checkpoint_rounds": rounds}
    train["phase_overrides"] = {}
    with pytest.raises(configs.ConfigError, match=named):
        configs.write_pack_config(
            plan(tmp_path / "merged"), signature(3), "warmup_0", str(base), TrainSettings.from_config(train),
            TokenizerFiles.resolve(str(model)), str(tmp_path / "train"), "/scratch/ckpt", 1,
        )  # fmt: skip
