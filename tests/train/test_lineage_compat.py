"""Lineage against GPT-NeoX's own dataset code (the LUMI fork, ``../shared/trainers``): for every pack of the
sample (packed) and of an SFT run (``k_bin_packed``), every training sample's documents and token offsets,
as the fork's ``build_train_valid_test_data_loaders`` indexes them, are those ``lineage.steps`` names for it
(tests/lineage/test_steps.py: the steps of each sample, both ways)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.trainers import Trainers
from tests.utils import Workflow
from workflow_scripts.core import train_layout
from workflow_scripts.lineage.steps import StepMap
from workflow_scripts.train import segment
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
