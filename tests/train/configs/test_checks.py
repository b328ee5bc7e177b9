"""Every impossible setting refused with a message that says what to change, the batch, parallel layout and
positions refused exactly where the trainers' own argument code refuses them, and the end of document each
trainer takes with each kind of tokenizer checked against the data's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.train.configs.conftest import BASE, SEED_000, plan, signature, write
from tests.trainers import MEGATRON_ARGS, Trainers
from tests.utils import byte_level_bpe, gpt2_pair
from workflow_scripts.core.schedule import ScheduleError
from workflow_scripts.tokens.engines.hf_tokenizer import HFTokenizer
from workflow_scripts.tokens.kinds import TokenizerFiles
from workflow_scripts.train.configs.checks import ConfigError, check_base
from workflow_scripts.train.configs.write import write_pack_config
from workflow_scripts.train.settings import TrainSettings


@pytest.mark.parametrize(
    ("base", "train", "message"),
    [
        (
            {**BASE, "seq_length": 4096},
            SEED_000,
            "seq_length 4096, but the plan uses training.seq_length 8192: leave seq_length out",
        ),
        ({**BASE, "train_batch_size": 512}, SEED_000, "train_batch_size 512, but the plan uses"),
        (
            {**BASE, "max_position_embeddings": 4096},
            SEED_000,
            "max_position_embeddings 4096 < training.seq_length 8192, which GPT-NeoX refuses. Would work: "
            "max_position_embeddings 8192, or training.seq_length 4096",
        ),
        (
            {k: v for k, v in BASE.items() if k != "max_position_embeddings"},
            SEED_000,
            "max_position_embeddings is not set, which GPT-NeoX requires",
        ),
        (
            {**BASE, "train_micro_batch_size_per_gpu": 5},
            SEED_000,
            r"576 must equal train_micro_batch_size_per_gpu 5 x gradient_accumulation_steps 1 x data "
            r"parallel 192 = 960 .* Would work: training.global_batch_size 960, or "
            r"train_micro_batch_size_per_gpu 3$",
        ),
        (
            {**BASE, "gradient_accumulation_steps": 2},
            SEED_000,
            r"gradient_accumulation_steps 2 x data parallel 192 = 1152 .* Would work: "
            r"training.global_batch_size 1152, or train.gpus_per_node 4, or gradient_accumulation_steps 1",
        ),
        (
            {**BASE, "gradient_accumulation_steps": "two"},
            SEED_000,
            "gradient_accumulation_steps 'two' is not",
        ),
        (
            {**BASE, "train_micro_batch_size_per_gpu": 0},
            SEED_000,
            "train_micro_batch_size_per_gpu 0: at least 1",
        ),
        ({**BASE, "num_attention_heads": 7}, SEED_000, "not the hidden size 512"),
        (
            BASE,
            {**SEED_000, "nodes": 47},
            r"must equal train_micro_batch_size_per_gpu 3 x gradient_accumulation_steps 1 x data parallel "
            r"188 = 564 .* Would work: training.global_batch_size 564, or train.nodes 48$",
        ),
        (
            {**BASE, "model_parallel_size": 5},
            SEED_000,
            r"train.nodes 48 x train.gpus_per_node 8 GPUs do not split into model replicas of "
            r"model_parallel_size 5 x pipe_parallel_size 1 = 5 GPUs .* Would work: train.gpus_per_node 10, "
            r"or a model parallel layout that divides 384",
        ),
        (BASE, {**SEED_000, "time_limit_minutes": 60}, "fewer than one checkpoint interval"),
    ],
)
def test_impossible_settings_say_what_to_change(
    tmp_path: Path, model: Path, base: dict, train: dict, message: str
) -> None:
    with pytest.raises((ConfigError, ScheduleError), match=message):
        write(tmp_path, model, base, train, "U1_1")


# nodes, GPUs per node, TP, PP, CP, micro batch, gradient accumulation, global batch, positions, seq_length
LAYOUTS = [
    (1, 1, 1, 1, 1, 4, 2, 8, 512, 512),  # the sample
    (1, 8, 1, 1, 1, 4, 2, 8, 512, 512),  # the sample with gpus_per_node's default, 8
    (1, 1, 1, 1, 1, 4, 2, 16, 512, 512),  # a batch of 16 wants accumulation 4
    (1, 8, 1, 1, 1, 1, None, 8, 512, 512),
    (1, 8, 1, 1, 1, 2, None, 8, 512, 512),
    (1, 8, 1, 1, 1, 2, None, 24, 512, 512),  # accumulation derived: 24 = 2 x 8 x 1.5
    (1, 8, 1, 1, 1, None, None, 16, 512, 512),  # GPT-NeoX derives the micro batch (Megatron-LM refuses)
    (1, 8, 1, 1, 1, None, None, 12, 512, 512),
    (1, 8, 1, 1, 1, None, 2, 16, 512, 512),
    (1, 8, 1, 1, 1, None, 4, 16, 512, 512),
    (1, 8, 3, 1, 1, 1, None, 8, 512, 512),  # 8 GPUs in replicas of 3
    (2, 8, 2, 2, 1, 1, None, 8, 512, 512),  # data parallel 4
    (2, 4, 2, 2, 1, 3, None, 6, 512, 512),  # data parallel 2
    (2, 4, 2, 2, 1, 3, None, 9, 512, 512),
    (1, 8, 1, 1, 2, 1, None, 4, 512, 512),  # Megatron-LM's context parallel: data parallel 4
    (1, 8, 1, 1, 2, 1, None, 6, 512, 512),
    (1, 1, 1, 1, 1, 4, None, 4, 256, 512),  # fewer positions than tokens
    (1, 1, 1, 1, 1, 4, None, 4, 512, 256),
    (1, 1, 1, 1, 1, 4, None, 4, None, 512),  # no positions
    (48, 8, 2, 1, 1, 3, None, 576, 8192, 8192),  # seed 000
    (47, 8, 2, 1, 1, 3, None, 576, 8192, 8192),
    (48, 8, 2, 1, 1, 3, 2, 576, 8192, 8192),
]
NEOX_ARGS = r"""
import contextlib, io, json, sys
from megatron.neox_arguments import NeoXArgs
out = []
for config in json.loads(sys.argv[1]):
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            NeoXArgs.from_dict(config)
        out.append(None)
    except BaseException as error:
        out.append(f"{type(error).__name__}: {error}")
print(json.dumps(out))
"""
MEGATRON_RUNS = (
    MEGATRON_ARGS
    + r"""
import json, os
out = []
for world, argv in json.loads(sys.argv[1]):
    os.environ["WORLD_SIZE"] = str(world)
    try:
        parsed(argv, build_tokenizer=False)  # validate_args, then the micro-batch calculator
        out.append(None)
    except BaseException as error:
        out.append(f"{type(error).__name__}: {error}")
print(json.dumps(out))
"""
)


@pytest.mark.parametrize("tree", ["neox", "fork", "megatron"])
def test_the_checks_refuse_what_the_trainers_own_argument_code_refuses(trainers: Trainers, tree: str) -> None:
    """Each layout's pack config, as the workflow writes it (``seq_length`` and the global batch set), goes
    to the pinned trainer's argument code with ``nodes x GPUs`` ranks: ``check_base`` refuses exactly the
    ones it refuses, and for the same reason (positions, or the batch over the GPUs)."""
    megatron = tree == "megatron"
    rows = [r for r in LAYOUTS if (r[6] is None if megatron else r[4] == 1)]
    configs, ours = [], []
    for nodes, gpus, tp, pp, cp, micro, accumulation, batch, positions, seq in rows:
        base = {"num_layers": 4, "hidden_size": 96, "num_attention_heads": 12, "seq_length": seq}
        if megatron:
            base |= {"tensor_model_parallel_size": tp, "pipeline_model_parallel_size": pp}
            base |= {"context_parallel_size": cp, "micro_batch_size": micro, "global_batch_size": batch}
        else:
            base |= {"model_parallel_size": tp, "pipe_parallel_size": pp, "train_batch_size": batch}
            base |= {"train_micro_batch_size_per_gpu": micro, "gradient_accumulation_steps": accumulation}
        base = {k: v for k, v in (base | {"max_position_embeddings": positions}).items() if v is not None}
        train = {"trainer": "megatron" if megatron else "neox", "nodes": nodes, "gpus_per_node": gpus}
        try:
            check_base(base, seq, batch, TrainSettings.from_config(train), "base")
            ours.append(None)
        except ConfigError as error:
            ours.append(str(error))
        if megatron:
            argv = [a for k, v in base.items() for a in (f"--{k.replace('_', '-')}", str(v))]
            configs.append([nodes * gpus, argv])
        else:
            configs.append(base | {"global_num_gpus": nodes * gpus})
    script = MEGATRON_RUNS if megatron else NEOX_ARGS
    env = {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}  # validate_args asserts it with TP > 1 (before Blackwell)
    run = trainers.run(tree, ["-c", script, json.dumps(configs)], env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    theirs = json.loads(run.stdout.strip().splitlines()[-1])
    assert len(theirs) == len(rows) >= 15
    for row, mine, trainer in zip(rows, ours, theirs, strict=True):
        assert (mine is None) == (trainer is None), (row, mine, trainer)
        if mine is not None:
            assert ("position" in mine) == ("position" in trainer), (row, mine, trainer)


def test_neox_eod_must_match_the_data(tmp_path: Path, model: Path) -> None:
    with pytest.raises(ConfigError, match=r"ends documents with id 2 \('</s>'\), but GPT-NeoX"):
        write(tmp_path, model, BASE, SEED_000, "U1_1", eod=2)


@pytest.mark.parametrize("llama3", [False, True], ids=["endoftext", "eos_token"])
def test_a_tokenizer_json_names_the_trainers_hf_tokenizer_and_its_eod(tmp_path: Path, llama3: bool) -> None:
    model = byte_level_bpe(tmp_path / "tok", ["some text to learn from, twice"] * 4, llama3=llama3)
    eod = HFTokenizer(model).eod()[0]
    if llama3:  # GPT-NeoX's HFTokenizer takes <|endoftext|>, which this tokenizer lacks
        with pytest.raises(ConfigError, match=r"GPT-NeoX's HFTokenizer takes EOD = token_to_id"):
            write(tmp_path, model, BASE, SEED_000, "U1_1", eod=eod)
    else:
        config, _ = write(tmp_path, model, BASE, SEED_000, "U1_1", eod=eod)
        assert (config["tokenizer_type"], config["vocab_file"]) == ("HFTokenizer", str(model))
        with pytest.raises(ConfigError, match=r"ends documents with id 5 .*HFTokenizer takes EOD"):
            write(tmp_path, model, BASE, SEED_000, "U1_1", eod=5)
    base = tmp_path / "base.args"
    base.write_text(
        "--num-layers 4 --hidden-size 512 --num-attention-heads 8 --seq-length 8192\n"
        "--max-position-embeddings 8192\n"
        "--global-batch-size 576 --micro-batch-size 3 --tensor-model-parallel-size 2\n"
    )
    settings = TrainSettings.from_config({**SEED_000, "trainer": "megatron", "base_config": str(base)})
    files = TokenizerFiles.resolve(str(model))
    args = [plan(tmp_path / "merged"), signature(eod), "U1_1", str(base), settings, files]
    write_pack_config(*args, str(tmp_path / "train"), "/scratch/ckpt", 1234)
    lines = (tmp_path / "train" / "U1_1" / "U1_1.args").read_text().splitlines()
    assert "--tokenizer-type HuggingFaceTokenizer" in lines and f"--tokenizer-model {model.parent}" in lines
    with pytest.raises(ConfigError, match="Megatron-LM's HuggingFaceTokenizer takes EOD = eos_token"):
        write_pack_config(*args[:1], signature(eod + 1), *args[2:], str(tmp_path / "t2"), "/c", 1)


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
    with pytest.raises(ConfigError, match=r"GPT-NeoX's GPT2BPETokenizer takes EOD = token_to_id"):
        write(tmp_path, vocab, BASE, SEED_000, "U1_1", eod=eod + 1)
    base = tmp_path / "base.args"
    base.write_text(
        "--num-layers 4 --hidden-size 512 --num-attention-heads 8 --seq-length 8192\n"
        "--max-position-embeddings 8192\n"
        "--global-batch-size 576 --micro-batch-size 3 --tensor-model-parallel-size 2\n"
    )
    settings = TrainSettings.from_config({**SEED_000, "trainer": "megatron", "base_config": str(base)})
    args = [plan(tmp_path / "merged"), signature(eod), "U1_1", str(base), settings, files]
    write_pack_config(*args, str(tmp_path / "train"), "/scratch/ckpt", 1234)
    lines = (tmp_path / "train" / "U1_1" / "U1_1.args").read_text().splitlines()
    for line in ["--tokenizer-type GPT2BPETokenizer", f"--vocab-file {vocab}", f"--merge-file {merges}"]:
        assert line in lines, line
    assert not any(line.startswith("--tokenizer-model") for line in lines)
