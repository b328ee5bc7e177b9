"""The reference trainer in Megatron-LM mode writes and reads Megatron-LM's ``torch_dist`` checkpoints: the
weights under Megatron-core's names, the common state Megatron-LM's ``load_checkpoint`` reads, its own state
and DeepSpeed's optimizer in ``reference_trainer/``; a run cut into segments at exits and a phase transition
is an uninterrupted run's, bit for bit (a LLaMA shape, dropout on); the pinned Megatron-LM's own
``load_checkpoint`` (tests/train/hf/megatron_model.py: its GPTModel on CPU ranks) takes its iteration and
exactly its weights; an evaluation reads the weights back; a ``--finetune`` start is a folder of weights only
(an import), loaded strictly."""

from __future__ import annotations

import json
import os
import subprocess
from argparse import Namespace
from pathlib import Path

import torch

from tests.train.hf import megatron_model
from tests.train.reference.conftest import BATCH, TWO_RANKS, command, losses, run_trainer, trainer_env
from tests.train.reference.test_megatron_config import write_args
from tests.trainers import Trainers
from tests.utils import REPO, tail
from workflow_scripts.train import checkpoint_dirs, finetune, megatron_checkpoint
from workflow_scripts.train.hf.megatron_layout import from_megatron, to_megatron
from workflow_scripts.train.reference.checkpoints import CLIENT_KEY, SIDE
from workflow_scripts.train.reference.config import load_config
from workflow_scripts.train.reference.model import GPT

LAYOUT = checkpoint_dirs.MEGATRON
LLAMA = (
    "--normalization RMSNorm --swiglu --ffn-hidden-size 48 --position-embedding-type rope "
    "--group-query-attention --num-query-groups 2 --disable-bias-linear --untie-embeddings-and-output-weights"
)


def llama_args(
    root: Path, model: Path, packs: dict[str, str], extra: str = "", shape: str = LLAMA, pack: str = "pack_a"
) -> Path:
    """The run's arguments for the phase on ``pack`` (checkpoints in ``root/ckpt``)."""
    valid = f"--valid-data-path {packs['valid']} --eval-iters 2 --eval-interval 1000"
    return write_args(root / pack / "run.args", model, packs[pack], root / "ckpt", f"{shape} {valid} {extra}")


def test_segments_equal_an_uninterrupted_run_and_megatron_lm_loads_them(
    tmp_path: Path, model: Path, packs: dict[str, str], trainers: Trainers
) -> None:
    for name, runs in (("whole", 1), ("cut", 2)):  # the phases 0-4 and 4-8, in 1 or 2 segments each
        extra = "--exit-interval 3" if runs == 2 else ""
        for pack in ("pack_a", "pack_b"):
            args = llama_args(tmp_path / name, model, packs, extra, pack=pack)
            outputs = [run_trainer(args, "--out", str(tmp_path / name / "out")).output for _ in range(runs)]
    assert "resumed from iter_0000006: local iteration 2 of 4" in outputs[-1]  # exits at 3 and 6
    assert [LAYOUT.latest(str(tmp_path / n / "ckpt")) for n in ("whole", "cut")] == [8, 8]
    assert losses(tmp_path / "cut" / "out") == losses(tmp_path / "whole" / "out")  # dropout on: RNG restored

    folder = tmp_path / "cut" / "ckpt" / "iter_0000006"
    files = set(os.listdir(folder))
    assert {"metadata.json", "common.pt", ".metadata", SIDE} <= files
    assert not [f for f in files if f.startswith("mp_rank") or f.endswith("model_states.pt")], files
    common = megatron_checkpoint.load_common(str(folder))
    assert common["iteration"] == 6 and common["checkpoint_version"] == 3.0
    args = common["args"]
    assert (args.num_layers, args.hidden_size, args.num_query_groups, args.ffn_hidden_size) == (2, 32, 2, 48)
    assert args.consumed_train_samples == 6 * BATCH and args.no_save_optim and args.no_save_rng
    assert common["opt_param_scheduler"]["num_steps"] == 6 * BATCH  # OptimizerParamScheduler.state_dict
    assert common[CLIENT_KEY]["iteration"] == 6 and common[CLIENT_KEY]["local_iteration"] == 2
    with torch.serialization.safe_globals([Namespace]):  # Megatron-LM's safe globals have Namespace
        torch.load(folder / "common.pt", weights_only=True)  # and nothing else: what Megatron-LM reads

    whole = llama_args(tmp_path / "whole", model, packs, pack="pack_b")
    cfg = load_config([str(whole)], evaluation=True).model
    ends = [
        megatron_checkpoint.load_weights(str(tmp_path / n / "ckpt" / "iter_0000008"))
        for n in ("whole", "cut")
    ]
    assert ends[0].keys() == ends[1].keys() and all(torch.equal(ends[0][k], ends[1][k]) for k in ends[0])
    side = torch.load(
        folder.with_name("iter_0000008") / SIDE / "mp_rank_00_model_states.pt", weights_only=False
    )
    ours = from_megatron(ends[1], cfg)
    assert all(torch.equal(ours[k], side["module"][k]) for k in side["module"])  # the same weights twice

    # Megatron-LM's own load_checkpoint of the run's last checkpoint, at pipeline parallel sizes 1 and 2
    shape = (
        "--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 32 --max-position-embeddings 32"
    )
    argv = f"{shape} --vocab-size 300 {LLAMA} --ckpt-step 8".split()  # 300 padded to 384, as ours
    load = tmp_path / "megatron-load"  # the folder without the tracker: read_metadata's reduction is CUDA's
    load.mkdir()
    (load / "iter_0000008").symlink_to(tmp_path / "cut" / "ckpt" / "iter_0000008")
    for pp in (1, 2):
        spec = {"argv": argv, "load": str(load)}
        ranks = megatron_model.run(trainers, spec, tmp_path / f"megatron-pp{pp}", pp=pp)
        assert [r["iteration"] for r in ranks] == [8] * pp  # args checked, not --finetune: its iteration
        loaded = megatron_model.assembled(ranks)
        assert loaded.keys() == ends[1].keys() and all(torch.equal(loaded[k], ends[1][k]) for k in loaded)

    evaluated = [
        json.loads(line) for line in (tmp_path / "whole" / "out" / "eval.jsonl").read_text().splitlines()
    ]
    proc = run_trainer(whole, "--eval-only", "--out", str(tmp_path / "whole" / "eval"))
    record = json.loads(proc.stdout.strip().splitlines()[-1])
    assert record["iteration"] == 8 and record["valid_loss"] == evaluated[-1]["valid_loss"]


def test_a_finetune_start_is_a_folder_of_weights_only_loaded_strictly(
    tmp_path: Path, model: Path, packs: dict[str, str]
) -> None:
    """A start as ``hf-import --trainer megatron`` writes it (weights and ``import_common``); with the LR at
    0 the run's checkpoint holds the start's weights exactly."""
    args = llama_args(tmp_path / "run", model, packs, "--finetune --lr 0 --min-lr 0")
    cfg = load_config([str(args)]).model
    torch.manual_seed(7)
    start = tmp_path / "import" / "iter_0000000"
    weights = to_megatron(GPT(cfg).state_dict(), cfg)
    megatron_checkpoint.save(str(start), weights, megatron_checkpoint.import_common(cfg))
    finetune.prepare(str(tmp_path / "run" / "ckpt"), str(start), "megatron")
    proc = run_trainer(args)
    assert "finetune: weights of iter_0000000, fresh optimizer, local iteration 0" in proc.output
    saved = megatron_checkpoint.load_weights(str(tmp_path / "run" / "ckpt" / "iter_0000004"))
    assert saved.keys() == weights.keys() and all(torch.equal(saved[k], weights[k]) for k in weights)

    four = LLAMA.replace("--num-query-groups 2", "--num-query-groups 4")
    other = llama_args(tmp_path / "other", model, packs, "--finetune", four)
    finetune.prepare(str(tmp_path / "other" / "ckpt"), str(start), "megatron")
    refused = run_trainer(other, ok=False)
    assert refused.returncode != 0
    assert "its weights are not this model's" in refused.output
    assert (
        "decoder.layers.0.self_attention.linear_qkv.weight" in refused.output
        or "size mismatch" in refused.output
    )


def test_a_folder_that_is_not_torch_dist_is_refused(
    tmp_path: Path, model: Path, packs: dict[str, str]
) -> None:
    args = llama_args(tmp_path / "run", model, packs, "--finetune")
    start = tmp_path / "start" / "iter_0000000"
    (start / "mp_rank_00").mkdir(parents=True)  # the legacy torch format's folder
    finetune.prepare(str(tmp_path / "run" / "ckpt"), str(start), "megatron")
    refused = run_trainer(args, ok=False)
    assert refused.returncode != 0 and "not a torch_dist checkpoint (no metadata.json)" in refused.output


def test_two_ranks_save_and_resume_as_they_train(tmp_path: Path, model: Path, packs: dict[str, str]) -> None:
    """Rank 0 writes the torch_dist files, every rank its DeepSpeed state; a resume on two ranks equals an
    uninterrupted run on two (dropout off: the trainer's RNG state is rank 0's)."""
    launch = list(TWO_RANKS)
    for name, runs in (("whole", 1), ("cut", 2)):
        extra = "--attention-dropout 0 --hidden-dropout 0" + (" --exit-interval 3" if runs == 2 else "")
        args = llama_args(tmp_path / name, model, packs, extra)
        for _ in range(runs):
            argv = [
                *launch,
                "--master_port",
                str(megatron_model.free_port()),
                *command(args, "--out", str(tmp_path / name))[1:],
            ]
            proc = subprocess.run(
                argv, cwd=REPO, env=trainer_env(), capture_output=True, text=True, timeout=300
            )
            assert proc.returncode == 0 and "data parallel 2" in proc.stdout, tail(proc.stdout + proc.stderr)
    assert "resumed from iter_0000003: local iteration 3 of 4" in proc.stdout
    assert losses(tmp_path / "cut") == losses(tmp_path / "whole")
    ends = [
        megatron_checkpoint.load_weights(str(tmp_path / n / "ckpt" / "iter_0000004"))
        for n in ("whole", "cut")
    ]
    assert all(torch.equal(ends[0][k], ends[1][k]) for k in ends[0])
