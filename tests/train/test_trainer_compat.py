"""Every config a segment hands its launch loads in the trainers' own argument code: GPT-NeoX's
``NeoXArgs.from_ymls`` (upstream and the LUMI fork) and Megatron-LM's ``parse_args`` + ``validate_args``,
from ``../shared/trainers``' pinned sources (the ``trainers`` fixture, tests/trainers.py).

The configs are the workflow's own (the sample's trainer configs, rebuilt by Snakemake for each variant),
and the file lists are the ones ``train-segment`` builds for each state of the checkpoint folder: the first
segment, a resume, a spare segment, a fine-tune's start and the segments after its first save; and SFT's.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
import yaml

from tests.train.launches import launch_files
from tests.trainers import Trainers
from tests.utils import REPO, Workflow
from workflow_scripts.core.fsio import read_json

NEOXARGS = r"""
import contextlib, io, json, sys
from megatron.neox_arguments import NeoXArgs
out = []
for files in json.loads(sys.argv[1]):
    with contextlib.redirect_stdout(io.StringIO()):
        a = NeoXArgs.from_ymls(files, overwrite_values={"global_num_gpus": 1})
    out.append({k: getattr(a, k, None) for k in
                ("train_iters", "iteration_offset", "finetune", "keep_last_n_checkpoints", "train_batch_size",
                 "checkpoint_factor", "exit_interval", "train_data_paths", "load")})
print(json.dumps(out))
"""
MEGATRON = r"""
import contextlib, io, json, os, shlex, sys
from megatron.training import arguments
arguments.get_device_arch_version = lambda: 9  # validate_args asks the GPU's architecture: none here
out = []
for path, *appended in json.loads(sys.argv[1]):  # a pack's file, and what a launch recipe appends to it
    sys.argv = ["pretrain_gpt.py", *shlex.split(open(path).read(), comments=True), *appended]
    with contextlib.redirect_stdout(io.StringIO()):
        args = arguments.parse_args()
        arguments.validate_args(args)
    out.append({k: getattr(args, k, None) for k in
                ("train_iters", "train_samples", "phase_transition_iterations", "finetune", "save_interval",
                 "exit_interval", "exit_signal", "exit_signal_handler", "global_batch_size",
                 "train_data_path", "load", "transformer_impl", "gradient_accumulation_fusion",
                 "masked_softmax_fusion", "apply_rope_fusion", "distributed_backend")})
print(json.dumps(out))
"""


@pytest.mark.parametrize(
    ("variant", "tree"),
    [
        ("neox", "fork"),
        ("neox-finetune", "fork"),
        ("neox-upstream", "neox"),
        ("sft", "fork"),
    ],
)  # tree neox: upstream GPT-NeoX, given the files as written (train.neox: upstream: one pack)
def test_every_gpt_neox_launch_loads_in_neoxargs(
    variant: str, tree: str, request: pytest.FixtureRequest, trainers: Trainers
) -> None:
    wf = (
        request.getfixturevalue("sft_run")
        if variant == "sft"
        else request.getfixturevalue("variants")[variant]
    )
    lists = launch_files(wf)
    packs = sorted(p.parent.name for p in (wf.root / "results" / "train").glob("*/keys.json"))
    assert len(lists) == len(packs) + (variant == "neox-finetune")  # + the first pack's finetune-off copy
    out = trainers.run(tree, ["-c", NEOXARGS, json.dumps(lists)])
    assert out.returncode == 0, out.stderr[-3000:]
    loaded = json.loads(out.stdout.strip().splitlines()[-1])
    for files, args in zip(lists, loaded, strict=True):
        assert len(files) == 1  # one file: NeoXArgs refuses a key given twice
        config = yaml.safe_load(Path(files[0]).read_text())
        assert args["train_iters"] == config["train_iters"] and args["load"] == config["load"]
        assert args["keep_last_n_checkpoints"] is None  # retention is the workflow's
        assert args["iteration_offset"] == config.get("iteration_offset")  # upstream: none written
        assert args["finetune"] == config.get("finetune", False)
    if variant == "sft":
        assert {yaml.safe_load(Path(f[0]).read_text())["pack_impl"] for f in lists} == {"k_bin_packed"}
    if variant == "neox-finetune":
        flags = [a["finetune"] for a in loaded]
        assert flags.count(True) == 1 and flags.count(False) == len(flags) - 1


def recipe_flags(recipe: str) -> list[str]:
    """What a launch recipe (config/train/RECIPE) gives pretrain_gpt.py after the pack's arguments."""
    launch = yaml.safe_load((REPO / "config" / "train" / recipe).read_text())["train"]["launch"]
    return shlex.split(launch.split("{args}", 1)[1].replace("\\\n", " "))


@pytest.mark.parametrize(
    ("variant", "recipe"),
    [("megatron", None), ("megatron-finetune", None), ("megatron", "megatron-rocm.yaml")],
)  # recipe: the pack's arguments with what that launch appends (ROCm: no TE, no apex fusions, RCCL)
def test_every_megatron_launch_parses_in_megatron_lm(
    variant: str, recipe: str | None, variants: dict[str, Workflow], trainers: Trainers
) -> None:
    wf = variants[variant]
    lists = launch_files(wf)
    assert all(len(files) == 1 for files in lists)
    appended = recipe_flags(recipe) if recipe else []
    out = trainers.run("megatron", ["-c", MEGATRON, json.dumps([[f[0], *appended] for f in lists])])
    assert out.returncode == 0, out.stderr[-3000:]
    loaded = json.loads(out.stdout.strip().splitlines()[-1])
    plan = read_json(wf.root / "results" / "plan.json")
    boundaries = [p["iteration_offset"] for p in plan["packs"][1:]]  # Megatron's --finetune starts at 0
    samples = plan["total_train_iters"] * plan["global_batch_size"]  # the whole run's, in every pack
    for args in loaded:
        assert args["train_iters"] is None and args["train_samples"] == samples
        assert args["phase_transition_iterations"] == boundaries
        assert args["exit_signal_handler"] and args["exit_signal"] == 10  # SIGUSR1: what segments send
        assert args["global_batch_size"] == plan["global_batch_size"]
    if variant == "megatron-finetune":
        assert sorted(a["finetune"] for a in loaded) == [False] * (len(loaded) - 1) + [True]
    if recipe == "megatron-rocm.yaml":  # the sample's file says gloo; the recipe's flags come last and win
        assert appended and all(a["transformer_impl"] == "local" for a in loaded)
        assert not any(a["gradient_accumulation_fusion"] or a["masked_softmax_fusion"] for a in loaded)
        assert not any(a["apply_rope_fusion"] for a in loaded)
        assert {a["distributed_backend"] for a in loaded} == {"nccl"}


def test_megatron_lm_itself_refuses_what_the_workflow_refuses(trainers: Trainers, tmp_path: Path) -> None:
    """The refusal of iteration counts beside the workflow's --train-samples mirrors Megatron-LM's own
    validate_args (seed 004's ramp-up is refused for another reason: phase transitions need a fixed global
    batch size)."""
    base = "--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 128"
    base += " --max-position-embeddings 128 --micro-batch-size 1 --global-batch-size 16 --lr 1e-4"
    base += " --train-samples 1600"
    paths = []
    for i, extra in enumerate(["--train-iters 100", "--lr-warmup-iters 20", "--lr-decay-iters 90"]):
        paths.append(tmp_path / f"{i}.args")
        paths[-1].write_text(f"{base} {extra}\n")
    for path in paths:
        out = trainers.run("megatron", ["-c", MEGATRON, json.dumps([[str(path)]])])
        assert out.returncode != 0 and "AssertionError" in out.stderr, (path.read_text(), out.stderr[-2000:])
