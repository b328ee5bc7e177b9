"""GPT-NeoX's own training code (the LUMI fork's and upstream's, ``../shared/trainers``) run on the workflow's
files for every segment the chain makes (tests/train/launches.py: first, fine-tune start, pack change,
resume, spare; and SFT's), as far as a CPU goes, one trainer subprocess per tree:

- the data pipeline: ``NeoXArgs.from_ymls`` on the segment's ``{config}``, then
  ``megatron/data/data_utils.py`` ``build_train_valid_test_data_loaders`` (``build_the_dataset``,
  ``GPT2Dataset`` over the pack's .bin/.idx with the config's ``seq_length`` and ``train_iters`` x batch
  samples; the fork's ``k_bin_packed`` for SFT) and ``shift_and_wrap_data_loaders`` at the iteration the
  trainer resumes at (the fork: the checkpoint's step minus ``iteration_offset``; upstream: the checkpoint's
  step). The first iteration's batch must be the pack's samples from the segment's own position (pack k+1's
  first segment: its sample 0), each one the pack's documents as our own reader (core/indexed_dataset) reads
  them where the trainer's index says;
- the checkpoint the fork resumes from (``megatron/checkpointing.py`` ``load_checkpoint``), after a save cut
  by a kill and after the segment's clean-up; the iteration the fork (``iteration_offset`` 0) and upstream
  take from a reference trainer's checkpoint; the precision and ZeRO stages the fork's ``load_checkpoint``
  fails on (the optimizer's ``clip_grad``), which the lint refuses.

Stubs, device calls only:
- ``torch.cuda.LongTensor`` is ``torch.LongTensor``: the data loaders' flags and ``GPT2Dataset``'s barrier
  count are put on the GPU before gloo reduces them (world size 1, real ``torch.distributed`` and ``mpu``).
Stand-ins, not stubs, for the checkpoint test (the fork's own model needs its fused GPU kernels, and the
checkpoints are the reference trainer's): ``load_checkpoint`` loads into a module with the checkpoint's
weight names and shapes in a real DeepSpeed engine on DeepSpeed's CPU accelerator, made from the config's
own DeepSpeed config as the trainer makes it (its precision and ZeRO stage decide the optimizer wrapper,
whose ``clip_grad`` the fork sets after each load), weights only (``no_load_optim``, ``no_load_rng``: the
optimizer and RNG states are the reference trainer's, not the fork's). What is tested, the trainer's choice
of the iteration and DeepSpeed's of the folder, reads the checkpoint folder only.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from tests.train.launches import Segment, segments
from tests.trainers import Trainers
from tests.utils import REPO, Workflow
from workflow_scripts.core.fsio import read_json, write_json
from workflow_scripts.core.indexed_dataset import IndexedDataset
from workflow_scripts.train import checkpoint_dirs, lint

pytestmark = pytest.mark.trainer

DATA = r"""
import contextlib, io, json, socket, sys
import torch
torch.cuda.LongTensor = torch.LongTensor  # device call (see the test's docstring)
from megatron import mpu
from megatron.data import data_utils
from megatron.neox_arguments import NeoXArgs
with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
torch.distributed.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
from deepspeed.runtime.pipe.topology import PipeModelDataParallelTopology
mpu.initialize_model_parallel(1, topology=PipeModelDataParallelTopology(num_pp=1, num_mp=1, num_dp=1))
with contextlib.redirect_stdout(io.StringIO()):
    data_utils.compile_helper()  # the dataset index helpers (C++), as initialize_megatron builds them
out = []
for job in json.loads(sys.argv[1]):
    with contextlib.redirect_stdout(io.StringIO()):
        args = NeoXArgs.from_ymls(job["files"], overwrite_values={"global_num_gpus": 1})
        args.iteration = job["iteration"]
        loaders = data_utils.build_train_valid_test_data_loaders(args)
        batches = data_utils.shift_and_wrap_data_loaders(args, loaders)[0]
    blend = loaders["train"].dataset
    (gpt,) = blend.datasets
    texts = [t for _ in range(args.gradient_accumulation_steps) for t in next(batches)["text"].tolist()]
    every = [blend[j]["text"].tolist() for j in range(len(blend))]
    samples = []
    for text in texts:  # which of the dataset's samples the iterator gave (its sampler skips start_iter)
        j = every.index(text)
        assert blend.dataset_index[j] == 0
        i = int(gpt.shuffle_idx[blend.dataset_sample_index[j]])
        (f, off_f), (l, off_l) = gpt.sample_idx[i].tolist(), gpt.sample_idx[i + 1].tolist()
        samples.append({"j": j, "text": text, "span": [f, off_f, l, off_l],
                        "docs": [int(d) for d in gpt.doc_idx[f : l + 1]]})
    doc_idx = [int(d) for d in gpt.doc_idx[: len(gpt.doc_idx) - (args.pack_impl == "k_bin_packed")]]
    out.append({"samples": samples, "len": len(blend), "doc_idx": doc_idx, "train_iters": args.train_iters,
                "batch": args.train_batch_size, "seq_length": args.seq_length, "pack_impl": args.pack_impl})
print(json.dumps(out))
"""

PICK = r"""
import contextlib, io, json, os, re, socket, sys
with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
os.environ.update(DS_ACCELERATOR="cpu", RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
                  MASTER_PORT=str(port))
import deepspeed, torch
from megatron import mpu
from megatron.checkpointing import load_checkpoint
from megatron.neox_arguments import NeoXArgs
torch.distributed.init_process_group("gloo", rank=0, world_size=1)
mpu.initialize_model_parallel(1)


class StandIn(torch.nn.Module):  # the checkpoint's weights' names and shapes (see the test's docstring)
    def __init__(self, weights):
        super().__init__()
        for name, tensor in weights.items():
            *path, leaf = name.split(".")
            module = self
            for part in path:
                if not hasattr(module, part):
                    module.add_module(part, torch.nn.Module())
                module = getattr(module, part)
            module.register_parameter(leaf, torch.nn.Parameter(torch.zeros_like(tensor)))


out = []
for config in sys.argv[1:]:
    with contextlib.redirect_stdout(io.StringIO()):
        args = NeoXArgs.from_ymls([config], overwrite_values={"global_num_gpus": 1, "no_load_rng": True,
                                                              "no_load_optim": True})
    weights = {"weight": torch.zeros(4, 4)}  # no checkpoint yet (a first segment): any module
    if os.path.isfile(os.path.join(args.load, "latest")):
        tag = open(os.path.join(args.load, "latest")).read().strip()
        states = torch.load(os.path.join(args.load, tag, "mp_rank_00_model_states.pt"), weights_only=False)
        weights = states["module"]
    model = StandIn(weights)
    optimizer = torch.optim.AdamW(model.parameters())
    # the engine as the trainer makes it (training.py): the config's own DeepSpeed config (precision, ZeRO)
    engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer, args=args, dist_init_required=False,
                                      mpu=mpu)
    log = io.StringIO()
    try:
        with contextlib.redirect_stdout(log):
            iteration = load_checkpoint(args, engine, optimizer, None)
    except Exception as error:
        out.append({"error": f"{type(error).__name__}: {error}"})
        continue
    loaded = re.findall(r"successfully loaded (\S+)", log.getvalue())
    out.append({"iteration": iteration, "loaded": [os.path.basename(os.path.dirname(p)) for p in loaded]})
print(json.dumps(out))
"""


def pick(trainers: Trainers, tree: str, configs: list[Path]) -> list[dict[str, Any]]:
    """``tree``'s ``load_checkpoint`` on each config's ``load`` folder, in one subprocess: the iteration it
    returns and the checkpoint folder it loaded, or the error it raised."""
    out = trainers.run(tree, ["-c", PICK, *map(str, configs)])
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def resumes_at(seg: Segment, tree: str) -> int:
    """The iteration the trainer's ``load_checkpoint`` sets for ``seg``'s tracker (the fork: the newest
    ``global_step*`` minus ``iteration_offset``, the newest being the tracker's once the segment has removed
    what lies above it; upstream: the checkpoint's own step); the fork's reading is run for real in
    test_a_save_cut_by_a_kill_is_removed_and_the_fork_resumes_from_latest."""
    if seg.tracker is None or seg.kind == "finetune start":  # no checkpoint, or finetune: iteration 0
        return 0
    return seg.tracker - seg.keys.offset if tree == "fork" else seg.tracker


def expected_text(reader: IndexedDataset, sample: dict[str, Any], seq: int, k_bin: bool) -> list[int]:
    """The sample's tokens from our reader: the documents (sequences) the trainer's index names, from the
    first one's offset to the last one's (k_bin_packed: whole documents, the last index an end), padded
    with 0 or cut to seq + 1."""
    first, off_f, last, off_l = sample["span"]
    docs = [np.asarray(reader[d]) for d in sample["docs"]]
    if first == last:
        tokens = docs[0][off_f : off_l + 1]
    else:
        last = [docs[-1][: off_l + 1]] if not k_bin or off_l > 0 else []
        tokens = np.concatenate([docs[0][off_f:], *docs[1:-1], *last])
    tokens = tokens[: seq + 1]
    return [*tokens.tolist(), *[0] * (seq + 1 - len(tokens))]


def check_data(wf: Workflow, tree: str, trainers: Trainers, sft_epochs: int | None = None) -> list[str]:
    """Every segment of ``wf`` through ``tree``'s data pipeline (one subprocess); returns the segment kinds
    checked."""
    plan = read_json(wf.root / "results" / "plan.json")
    prefixes = {p["name"]: p["merged_prefix"] for p in plan["packs"]}
    segs = list(segments(wf))
    jobs = [{"files": s.files, "iteration": resumes_at(s, tree)} for s in segs]
    path = f"{Path(trainers.python).parent}{os.pathsep}{os.environ['PATH']}"  # its Makefile's python3
    out = trainers.run(tree, ["-c", DATA, json.dumps(jobs)], env={"PATH": path})
    assert out.returncode == 0, out.stderr[-3000:]
    results = json.loads(out.stdout.strip().splitlines()[-1])
    for seg, job, got in zip(segs, jobs, results, strict=True):
        where = f"{tree} {seg.keys.pack} {seg.kind}"
        batch, train_iters = got["batch"], got["train_iters"]
        assert train_iters == seg.keys.train_iters and got["len"] >= train_iters * batch, where
        if seg.kind == "spare":  # the pack is finished: the training loop does not run
            assert job["iteration"] == train_iters, where
        else:  # the iteration's samples from the pack's own position; its first segment: sample 0
            start = job["iteration"] * batch
            assert [s["j"] for s in got["samples"]] == list(range(start, start + batch)), where
            assert start == 0 or seg.kind == "resume", where
        reader = IndexedDataset(wf.root / prefixes[seg.keys.pack])
        k_bin = got["pack_impl"] == "k_bin_packed"
        for sample in got["samples"]:
            assert sample["text"] == expected_text(reader, sample, got["seq_length"], k_bin), where
        counts = np.bincount(got["doc_idx"], minlength=len(reader))
        if k_bin:  # whole documents in bins, at most sft_epochs passes over the pack
            assert sft_epochs and counts.max() <= sft_epochs and counts.min() >= 1, where
        else:  # the plan's train_iters read the pack once: one epoch of GPT2Dataset's documents
            assert len(counts) == len(reader) and set(counts.tolist()) == {1}, where
    return sorted({s.kind for s in segs})


@pytest.mark.parametrize(("variant", "tree"), [("neox", "fork"), ("neox-upstream", "neox")])
def test_every_segment_reads_its_pack_from_its_position(
    variant: str, tree: str, variants: dict[str, Workflow], sft_run: Workflow, trainers: Trainers
) -> None:
    """The fork: the sample's packs, a fine-tuning run's and SFT's (one subprocess); upstream: its one-pack
    plan (it refuses the others: configs/neox.py)."""
    if tree == "fork":
        kinds = check_data(variants["neox"], tree, trainers)
        kinds += check_data(variants["neox-finetune"], tree, trainers)
        sft_epochs = yaml.safe_load((sft_run.root / "variant.yaml").read_text())["train"].get("sft_epochs", 1)
        kinds += check_data(sft_run, tree, trainers, sft_epochs)
        assert {"first", "pack change", "resume", "spare", "finetune start"} <= set(kinds)
    else:
        assert check_data(variants[variant], tree, trainers) == ["first", "resume", "spare"]


def isolated(wf: Workflow, pack: str, checkpoints: Path, dest: Path) -> Path:
    """A copy of ``pack``'s config and keys file that save to and load from ``checkpoints``; its keys."""
    keys = read_json(wf.root / "results" / "train" / pack / "keys.json")
    config = yaml.safe_load((wf.root / keys["config"]).read_text())
    config |= {"save": str(checkpoints), "load": str(checkpoints)}
    keys["config"] = str(dest / f"{pack}.yml")
    keys["set"]["save"]["value"] = keys["set"]["load"]["value"] = str(checkpoints)
    Path(keys["config"]).write_text(yaml.safe_dump(config, sort_keys=False))
    write_json(dest / f"{pack}.keys.json", keys)
    return dest / f"{pack}.keys.json"


def trainer_env() -> dict[str, str]:
    return os.environ | {"OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(REPO)}


def train_segment(keys: Path, record: Path, launch: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "workflow_scripts", "train-segment", "--keys", str(keys), "--segment", "0"]
    cmd += ["--segments", "3", "--record", str(record), "--launch", launch]
    return subprocess.run(cmd, cwd=REPO, env=trainer_env(), capture_output=True, text=True, timeout=300)


def first_save(config: dict[str, Any]) -> int:
    """The first global step the reference trainer saves at in this pack (train/reference/train.py
    save_due, exit_due)."""
    offset, end = config["iteration_offset"], config["iteration_offset"] + config["train_iters"]
    return next(
        s
        for s in range(offset + 1, end + 1)
        if s % config["checkpoint_factor"] == 0
        or s in config.get("extra_save_iters", ())
        or (s - offset) % config["exit_interval"] == 0
        or s == end
    )


def test_a_save_cut_by_a_kill_is_removed_and_the_fork_resumes_from_latest(
    variants: dict[str, Workflow], trainers: Trainers, tmp_path: Path
) -> None:
    """The sample's first two packs with the reference trainer: the second pack's first save is killed
    (SIGKILL) while it writes, leaving ``global_stepN`` without ``latest`` naming it. The fork's own
    ``load_checkpoint`` then loads ``latest``'s weights but takes its iteration from that partial folder
    (the first pack's config, ``iteration_offset`` 0, the ``iteration`` the checkpoint holds); the next
    segment removes the folder (logged, in its record) and the fork, run as its launch, resumes at
    ``latest``."""
    wf, checkpoints = variants["neox"], tmp_path / "checkpoints"
    layout = checkpoint_dirs.of("neox")
    first, second = (p["name"] for p in read_json(wf.root / "results" / "plan.json")["packs"][:2])
    keys = {pack: isolated(wf, pack, checkpoints, tmp_path) for pack in (first, second)}
    reference = f"{shlex.quote(sys.executable)} -m workflow_scripts train-reference --config {{config}}"
    done = train_segment(keys[first], tmp_path / "first.json", reference)
    assert done.returncode == 0 and read_json(tmp_path / "first.json")["finished"], done.stdout[-3000:]
    config_path = Path(read_json(keys[second])["config"])
    config = yaml.safe_load(config_path.read_text())
    offset, step = config["iteration_offset"], first_save(config)
    assert layout.latest(str(checkpoints)) == offset
    states = checkpoints / layout.tag(step) / "mp_rank_00_model_states.pt"
    states.parent.mkdir()
    os.mkfifo(states)  # DeepSpeed's save blocks in its write until the test reads: the kill lands mid-save
    proc = subprocess.Popen(
        [sys.executable, "-m", "workflow_scripts", "train-reference", "--config", str(config_path)],
        cwd=REPO,
        env=trainer_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    written: list[bytes] = []
    reader = threading.Thread(target=lambda: written.append(states.open("rb").read(4096)), daemon=True)
    reader.start()
    reader.join(300)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert written and written[0], "the trainer never reached its save"
    states.unlink()
    states.write_bytes(written[0])  # the part of the file the save wrote before the kill
    assert layout.latest(str(checkpoints)) == offset and layout.steps(str(checkpoints))[-1] == step
    first_config = Path(read_json(keys[first])["config"])
    picked = pick(trainers, "fork", [first_config, config_path])
    assert picked[0] == {"iteration": offset, "loaded": [layout.tag(offset)]}  # offset 0: the checkpoint's
    assert picked[1] == {"iteration": step - offset, "loaded": [layout.tag(offset)]}  # out of step
    script = tmp_path / "pick.py"
    script.write_text(PICK)
    fork = trainers.tree("fork")
    launch = (
        f"(cd {shlex.quote(str(fork))} && PYTHONPATH={shlex.quote(str(fork))} PYTHONWARNINGS=ignore "
        f"{shlex.quote(trainers.python)} {script} {{config}} > {tmp_path / 'picked.txt'}) && {reference}"
    )
    resumed = train_segment(keys[second], tmp_path / "second.json", launch)
    assert resumed.returncode == 0, resumed.stdout[-3000:]
    picked = json.loads((tmp_path / "picked.txt").read_text().strip().splitlines()[-1])
    assert picked == [{"iteration": 0, "loaded": [layout.tag(offset)]}]  # pack 2's iteration 0 at latest
    record = read_json(tmp_path / "second.json")
    assert record["removed_partial"] == [layout.tag(step)] and record["first_step"] == offset
    assert f"removed {layout.tag(step)}" in resumed.stdout and record["last_step"] > offset
    assert layout.latest(str(checkpoints)) == record["last_step"]


def test_upstream_resumes_the_reference_trainers_checkpoint(
    variants: dict[str, Workflow], trainers: Trainers, tmp_path: Path
) -> None:
    """Upstream's ``load_checkpoint`` (no ``iteration_offset``) takes the iteration the checkpoint holds: the
    reference trainer's, after its one-pack plan's first segment, is the step it saved at."""
    wf, checkpoints = variants["neox-upstream"], tmp_path / "checkpoints"
    (pack,) = (p["name"] for p in read_json(wf.root / "results" / "plan.json")["packs"])
    keys = isolated(wf, pack, checkpoints, tmp_path)
    reference = f"{shlex.quote(sys.executable)} -m workflow_scripts train-reference --config {{config}}"
    done = train_segment(keys, tmp_path / "record.json", reference)
    assert done.returncode == 0, done.stdout[-3000:]
    step, tag = read_json(tmp_path / "record.json")["last_step"], checkpoint_dirs.of("neox").tag
    assert step > 0 and pick(trainers, "neox", [Path(read_json(keys)["config"])]) == [
        {"iteration": step, "loaded": [tag(step)]}
    ]


def test_the_fork_loads_only_with_an_optimizer_that_clips(
    variants: dict[str, Workflow], trainers: Trainers, tmp_path: Path
) -> None:
    """The fork's ``load_checkpoint`` sets ``model.optimizer.clip_grad`` (printing it first) whenever
    ``load`` is set, a first segment's too (no checkpoint yet): DeepSpeed's engine, made from the config as
    the fork makes it, on its CPU accelerator, for every precision and ZeRO stage a CPU runs (fp16 is
    refused there; DeepSpeed's fp16 optimizers have ``clip_grad``). The lint refuses exactly the configs the
    fork fails on: fp32 without ZeRO, the plain torch optimizer."""
    wf = variants["neox"]
    pack = read_json(wf.root / "results" / "plan.json")["packs"][0]["name"]
    base = yaml.safe_load(
        (wf.root / read_json(wf.root / "results" / "train" / pack / "keys.json")["config"]).read_text()
    )
    combos = [(precision, stage) for precision in ("fp32", "bfloat16") for stage in (0, 1, 2, 3)]
    configs = []
    for precision, stage in combos:
        config = base | {"precision": precision, "zero_optimization": {"stage": stage},
                         "load": str(tmp_path / "none"), "save": str(tmp_path / "none")}  # fmt: skip
        configs.append(tmp_path / f"{precision}-{stage}.yml")
        configs[-1].write_text(yaml.safe_dump(config))
    results = pick(trainers, "fork", configs)
    for (precision, stage), config, got in zip(combos, configs, results, strict=True):
        refused = [e for e in lint.lint_neox(yaml.safe_load(config.read_text())).errors if "clip_grad" in e]
        if precision == "fp32" and stage == 0:
            assert got["error"] == "AttributeError: 'AdamW' object has no attribute 'clip_grad'", got
            assert refused, (precision, stage)
        else:
            assert got == {"iteration": 0, "loaded": []} and not refused, (precision, stage, got, refused)
