"""Lineage against the trainers' own dataset code (``../shared/trainers``): every training sample's documents
and token offsets, as the trainer indexes them, are those ``lineage.steps`` names for it
(tests/lineage/test_steps.py: the steps of each sample, both ways).

- GPT-NeoX (the LUMI fork): every pack of the sample (packed) and of an SFT run (``k_bin_packed``), through
  ``build_train_valid_test_data_loaders``.
- Megatron-LM: every pack of the sample's Megatron-LM run, each arguments file in its pack's phase, through
  ``pretrain_gpt``'s dataset provider at the phase's first iteration; and Megatron-LM's ``GPTDataset`` asked
  for two and a half epochs of a pack (its short final epoch shuffled apart) against ``IndexSpec.build``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.trainers import MEGATRON_ARGS, Trainers
from tests.utils import Workflow
from workflow_scripts.cli import main as snakepack
from workflow_scripts.core import train_layout
from workflow_scripts.datapacks.plan import Plan
from workflow_scripts.lineage.steps import StepMap, pack_config
from workflow_scripts.train import segment
from workflow_scripts.train.configs import megatron
from workflow_scripts.train.reference import data
from workflow_scripts.train.reference.config import load_config

pytestmark = pytest.mark.trainer

# every blended sample of the run: its dataset, and the index rows GPT-NeoX reads it through
SAMPLES = r"""
import contextlib, io, json, socket, sys
import torch
torch.cuda.LongTensor = torch.LongTensor  # device call (tests/train/test_neox_in_the_loop.py's docstring)
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
    data_utils.compile_helper()
out = []
for config in sys.argv[1:]:
    with contextlib.redirect_stdout(io.StringIO()):
        args = NeoXArgs.from_ymls([config], overwrite_values={"global_num_gpus": 1})
        args.iteration = 0
        blend = data_utils.build_train_valid_test_data_loaders(args)["train"].dataset
    k_bin = args.pack_impl == "k_bin_packed"
    samples = []
    for j in range(args.train_iters * args.train_batch_size):
        d, w = int(blend.dataset_index[j]), int(blend.dataset_sample_index[j])
        gpt = blend.datasets[d]
        i = int(gpt.shuffle_idx[w])
        (f, off_f), (l, off_l) = gpt.sample_idx[i].tolist(), gpt.sample_idx[i + 1].tolist()
        docs = gpt.doc_idx[f:l] if k_bin else gpt.doc_idx[f : l + 1]
        samples.append([d, off_f, off_l, [int(x) for x in docs]])
    out.append({"k_bin": k_bin, "samples": samples})
print(json.dumps(out))
"""


# each phase's training samples as Megatron-LM's dataset provider builds them; a GPTDataset of several epochs
MEGATRON_SAMPLES = (
    MEGATRON_ARGS
    + r"""
import contextlib, fcntl, io, json, socket
import numpy, torch
from megatron.core import mpu
from megatron.core.datasets.gpt_dataset import GPTDataset
from megatron.core.datasets.utils import Split, compile_helpers
from megatron.training import training
with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
torch.distributed.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
mpu.initialize_model_parallel()
with open(sys.argv[1], "w") as lock:  # one build at a time on this machine (tests on two workers)
    fcntl.flock(lock, fcntl.LOCK_EX)
    with contextlib.redirect_stdout(io.StringIO()):
        compile_helpers()
import pretrain_gpt
request = json.loads(sys.argv[2])
phases = []
for phase in request["phases"]:
    args = parsed(phase["argv"])
    training.update_train_iters(args)  # as setup_model_and_optimizer does: --train-samples to iterations
    args.data_cache_path = request["cache"]
    args.iteration = phase["iteration"]
    args.consumed_train_samples = args.iteration * args.global_batch_size
    with contextlib.redirect_stdout(io.StringIO()):
        sizes = training.get_train_valid_test_num_samples()
        train = pretrain_gpt.train_valid_test_datasets_provider(sizes)[0]
    samples = []
    for j in range(sizes[0]):
        i = int(train.shuffle_index[j])
        (f, off_f), (l, off_l) = train.sample_index[i].tolist(), train.sample_index[i + 1].tolist()
        samples.append([off_f, off_l, [int(x) for x in train.document_index[f : l + 1]]])
    phases.append(samples)
epochs = request["epochs"]
with contextlib.redirect_stdout(io.StringIO()):
    config = pretrain_gpt.core_gpt_dataset_config_from_args(parsed(epochs["argv"]))
    config.path_to_cache = request["cache"]
    low = GPTDataset.build_low_level_dataset(epochs["prefix"], config)
    every = numpy.arange(low.sequence_lengths.shape[0])
    gpt = GPTDataset(low, epochs["prefix"], every, epochs["samples"], Split.train, config)
built = {k: getattr(gpt, f"{k}_index").tolist() for k in ("document", "sample", "shuffle")}
print(json.dumps({"phases": phases, "epochs": built}))
"""
)


def pack_configs(wf: Workflow) -> list[str]:
    """Each pack's own trainer config (absolute paths inside)."""
    keys = sorted((wf.root / "results" / "train").glob(f"*/{train_layout.KEYS}"))
    return [str(wf.root / segment.PackKeys.read(str(k)).config) for k in keys]


def check(wf: Workflow, trainers: Trainers) -> int:
    configs = pack_configs(wf)
    path = f"{Path(trainers.python).parent}{os.pathsep}{os.environ['PATH']}"  # its Makefile's python3
    out = trainers.run("fork", ["-c", SAMPLES, *configs], env={"PATH": path})
    assert out.returncode == 0, out.stderr[-3000:]
    checked = 0
    for config, got in zip(configs, json.loads(out.stdout.strip().splitlines()[-1]), strict=True):
        steps = StepMap(load_config([config]))
        for k, (d, off_first, off_last, docs) in enumerate(got["samples"]):
            spans = steps.sample_spans(k)
            assert [(p, doc) for p, doc, _, _ in spans] == [(d, doc) for doc in docs], (config, k)
            if not got["k_bin"]:  # from the first document's offset to the last one's, inclusive
                assert spans[0][2] == off_first and spans[-1][3] == off_last + 1, (config, k)
            checked += 1
    return checked


def test_every_samples_documents_are_gpt_neoxs(
    variants: dict[str, Workflow], sft_run: Workflow, trainers: Trainers
):
    assert check(variants["neox"], trainers) > 0
    assert check(sft_run, trainers) > 0


def test_every_samples_documents_are_megatron_lms(
    variants: dict[str, Workflow],
    trainers: Trainers,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    wf = variants["megatron"]
    plan = Plan.read(str(wf.root / "results" / "plan.json"))
    cfgs = sorted((pack_config(c, plan) for c in pack_configs(wf)), key=lambda c: c.offset)
    assert [c.offset for c in cfgs] == [p.iteration_offset for p in plan.packs]  # each in its own phase
    first = cfgs[1].offset + 1  # the command reads the second pack's file in its phase, as pack_config
    cli = ["lineage", "--config", cfgs[1].path, "--plan", str(wf.root / "results" / "plan.json")]
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(wf.root)
        assert snakepack([*cli, "--steps", f"{first}:{first}"]) == 0
    listed = [(d["sequence"], d["tokens"]) for d in json.loads(capsys.readouterr().out)["documents"]]
    assert listed == [(r.sequence, r.tokens) for r in StepMap(cfgs[1]).sequences(first, first)]
    phases = [{"argv": megatron.argv(c.path), "iteration": c.offset} for c in cfgs]
    prefix, seed = cfgs[0].train_paths[0], cfgs[0].seed
    per_epoch = data.IndexSpec(prefix, "train", 0, cfgs[0].seq_length, seed, "packed").one_epoch_samples
    epochs = {"argv": phases[0]["argv"], "prefix": prefix, "samples": 2 * per_epoch + per_epoch // 2}
    request = {"phases": phases, "epochs": epochs, "cache": str(tmp_path / "cache")}
    argv = ["-c", MEGATRON_SAMPLES, trainers.helpers_lock, json.dumps(request)]
    out = trainers.run("megatron", argv, env=trainers.helpers_env())
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    for cfg, samples in zip(cfgs, got["phases"], strict=True):
        steps = StepMap(cfg)
        assert len(samples) == cfg.train_iters * cfg.batch, cfg.path
        for k, (off_first, off_last, docs) in enumerate(samples):
            spans = steps.sample_spans(k)
            assert [doc for _, doc, _, _ in spans] == docs, (cfg.path, k)
            assert spans[0][2] == off_first and spans[-1][3] == off_last + 1, (cfg.path, k)
    spec = data.IndexSpec(prefix, "train", epochs["samples"], cfgs[0].seq_length, seed, "packed", "megatron")
    assert data.final_epoch_start(spec.tokens, spec.seq_length, spec.num_samples, spec.epochs()) is not None
    ours = spec.build()
    for kind, name in (("doc", "document"), ("sample", "sample"), ("shuffle", "shuffle")):
        assert ours[kind].tolist() == got["epochs"][name], kind
