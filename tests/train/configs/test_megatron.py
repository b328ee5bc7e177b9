"""Megatron-LM's arguments: packs chained by phase transitions over the run's samples, an LR schedule that
differs between packs refused (Megatron-LM's scheduler would assert on the resume), seed 004's schedule
refused naming the key; a Hugging Face LLaMA's shape as arguments the pinned Megatron-LM parses into it,
and the checkpoint format."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.train.configs.conftest import BATCH, SEED_000, SEQ, U1_TOKENS, plan, signature
from tests.trainers import MEGATRON_ARGS, Trainers
from workflow_scripts.core.fsio import read_json
from workflow_scripts.core.train_layout import TrainLayout
from workflow_scripts.datapacks.iterations import train_iters
from workflow_scripts.tokens.kinds import TokenizerFiles
from workflow_scripts.train.configs import megatron
from workflow_scripts.train.configs.checks import ConfigError
from workflow_scripts.train.configs.write import write_pack_config
from workflow_scripts.train.hf import start
from workflow_scripts.train.settings import TrainSettings


def test_megatron_arguments_chain_packs_by_phase_transitions(tmp_path: Path, model: Path) -> None:
    base = tmp_path / "base.args"
    base.write_text(
        "--num-layers 4 --hidden-size 512 --num-attention-heads 8 --seq-length 8192\n"
        "--max-position-embeddings 8192\n"
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
        "--max-position-embeddings 8192\n"
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
        "--max-position-embeddings 8192\n"
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


LLAMA = {  # a Hugging Face LLaMA config.json: grouped-query attention, untied, Llama 3's rotary base
    "model_type": "llama",
    "num_hidden_layers": 2,
    "hidden_size": 64,
    "intermediate_size": 176,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "rms_norm_eps": 1e-5,
    "rope_theta": 500000.0,
    "max_position_embeddings": 8192,
    "tie_word_embeddings": False,
}
TIED = {**LLAMA, "num_key_value_heads": 4, "rope_theta": 10000.0, "tie_word_embeddings": True}
FROM_HF_BASE = "--micro-batch-size 3 --tensor-model-parallel-size 2 --lr 1.6e-4 --lr-decay-style cosine\n"


def write_from_hf(tmp_path: Path, model: Path, llama: dict, base_text: str = FROM_HF_BASE, **train) -> Path:
    """warmup_0's and U1_1's arguments for a run that starts from a Hugging Face folder with ``llama``'s
    config.json (``train`` over seed 000's settings); the folder of the packs' arguments."""
    (tmp_path / "hf").mkdir(parents=True, exist_ok=True)
    (tmp_path / "hf" / "config.json").write_text(json.dumps(llama))
    base = tmp_path / "base.args"
    base.write_text(base_text)
    section = {**SEED_000, "trainer": "megatron", "base_config": str(base), "phase_overrides": {}}
    section = start.resolve(section | {"init_from": {"hf": str(tmp_path / "hf")}} | train, TrainLayout("t"))
    for pack in ("warmup_0", "U1_1"):
        write_pack_config(
            plan(tmp_path / "merged"), signature(3), pack, str(base), TrainSettings.from_config(section),
            TokenizerFiles.resolve(str(model)), str(tmp_path / "train"), "/scratch/ckpt", 1,
        )  # fmt: skip
    return tmp_path / "train"


PARSED = (  # each argv as Megatron-LM's parse_args + validate_args leave it, and parse_args' defaults
    MEGATRON_ARGS
    + r"""
import json
given = json.loads(sys.argv[1])
sys.argv = ["pretrain_gpt.py"]
defaults = vars(arguments.parse_args())
runs = []
for argv in given["argvs"]:
    args = parsed(argv, build_tokenizer=False)
    runs.append({k: getattr(args, k) for k in given["dests"]})
print(json.dumps({"defaults": {k: defaults[k] for k in given["defaults"]}, "runs": runs}))
"""
)
SHAPE = {  # what Megatron-LM builds the model from, for LLAMA and TIED
    "num_layers": (2, 2),
    "hidden_size": (64, 64),
    "ffn_hidden_size": (176, 176),  # with --swiglu, each half of linear_fc1: Hugging Face's intermediate_size
    "num_attention_heads": (4, 4),
    "group_query_attention": (True, True),
    "num_query_groups": (2, 4),
    "kv_channels": (16, 16),
    "position_embedding_type": ("rope", "rope"),
    "rotary_base": (500000, 10000),
    "rotary_percent": (1.0, 1.0),
    "rotary_interleaved": (False, False),
    "normalization": ("RMSNorm", "RMSNorm"),
    "layernorm_epsilon": (1e-5, 1e-5),  # --norm-epsilon
    "swiglu": (True, True),
    "add_bias_linear": (False, False),
    "add_qkv_bias": (False, False),
    "untie_embeddings_and_output_weights": (True, False),
    "max_position_embeddings": (8192, 8192),
    "ckpt_format": ("torch_dist", "torch_dist"),
}


def test_a_hugging_face_llama_becomes_megatron_lms_arguments(
    tmp_path: Path, model: Path, trainers: Trainers
) -> None:
    """The model's config.json fills each pack's arguments; the pinned Megatron-LM's parse_args and
    validate_args accept them and build the model's shape from them; the first pack fine-tunes from the
    import (iteration 0), the next resumes; hf-import's layout options have Megatron-LM's defaults."""
    argvs, dests = [], [*SHAPE, "finetune", "load"]
    for name, llama in (("gqa", LLAMA), ("tied", TIED)):
        folder = write_from_hf(tmp_path / name, model, llama)
        for pack in ("warmup_0", "U1_1"):
            argvs.append(megatron.argv(str(folder / pack / f"{pack}.args")))
        keys = read_json(folder / "warmup_0" / "keys.json")["set"]
        assert "train.init_from.hf" in keys["ffn_hidden_size"]["why"]
    assert start.import_args(str(tmp_path / "gqa" / "base.args"), "megatron") == (
        "--trainer megatron --tp 2 --divisible-by 128"
    )
    (tmp_path / "bare.args").write_text("--num-layers 2\n")
    assert start.import_args(str(tmp_path / "bare.args"), "megatron") == (
        "--trainer megatron --tp 1 --divisible-by 128"
    )
    given = {"argvs": argvs, "dests": dests, "defaults": list(start.MEGATRON_DEFAULTS)}
    env = {"WORLD_SIZE": "384"}  # seed 000's 48 nodes x 8 GPUs: validate_args divides it by TP x PP
    env["CUDA_DEVICE_MAX_CONNECTIONS"] = "1"  # validate_args asserts it with TP > 1 (before Blackwell)
    out = trainers.run("megatron", ["-c", PARSED, json.dumps(given)], env=env)
    assert out.returncode == 0, out.stderr[-4000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["defaults"] == start.MEGATRON_DEFAULTS
    runs = result["runs"]
    for i, run in enumerate(runs):
        which = i // 2  # LLAMA's two packs, then TIED's
        assert {k: run[k] for k in SHAPE} == {k: v[which] for k, v in SHAPE.items()}, i
        assert run["finetune"] == (i % 2 == 0) and run["load"] == "/scratch/ckpt"


def test_a_base_flag_the_model_sets_otherwise_is_an_error_naming_both(tmp_path: Path, model: Path) -> None:
    named = (
        r"--position-embedding-type learned_absolute, but the model \S+ gives --position-embedding-type rope"
    )
    with pytest.raises(ConfigError, match=named):
        write_from_hf(
            tmp_path / "a", model, LLAMA, FROM_HF_BASE + "--position-embedding-type learned_absolute\n"
        )
    untied = FROM_HF_BASE + "--untie-embeddings-and-output-weights\n"
    with pytest.raises(ConfigError, match=r"gives no --untie-embeddings-and-output-weights"):
        write_from_hf(tmp_path / "b", model, TIED, untied)
    agreeing = FROM_HF_BASE + "--num-layers 2 --swiglu --disable-bias-linear --normalization RMSNorm\n"
    write_from_hf(tmp_path / "c", model, LLAMA, agreeing)
    with pytest.raises(
        ConfigError, match="seq_length 8192 is longer than the model's max_position_embeddings"
    ):
        write_from_hf(tmp_path / "d", model, LLAMA | {"max_position_embeddings": 4096})


def test_the_checkpoint_format_is_torch_dist_and_another_is_refused_with_hugging_face(
    tmp_path: Path, model: Path
) -> None:
    """Every pack writes --ckpt-format torch_dist; a base file's other format stands in a run without
    Hugging Face models in or out, and is refused with one (hf-import and hf-export read torch_dist)."""
    legacy = FROM_HF_BASE + "--ckpt-format torch\n"
    with pytest.raises(ConfigError, match=r"--ckpt-format torch: train\.init_from\.hf and train\.export"):
        write_from_hf(tmp_path / "a", model, LLAMA, legacy)
    base = tmp_path / "base.args"
    for text, expected in ((legacy, "torch"), (FROM_HF_BASE, "torch_dist")):
        base.write_text(
            "--num-layers 4 --hidden-size 512 --num-attention-heads 8 --max-position-embeddings 8192 " + text
        )
        train = {**SEED_000, "trainer": "megatron", "base_config": str(base), "phase_overrides": {}}
        write_pack_config(
            plan(tmp_path / "merged"), signature(3), "warmup_0", str(base), TrainSettings.from_config(train),
            TokenizerFiles.resolve(str(model)), str(tmp_path / "train"), "/scratch/ckpt", 1,
        )  # fmt: skip
        lines = (tmp_path / "train" / "warmup_0" / "warmup_0.args").read_text().splitlines()
        assert f"--ckpt-format {expected}" in lines
