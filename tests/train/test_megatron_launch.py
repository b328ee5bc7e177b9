"""config/train/megatron-launch.yaml's launch and evaluation launch start Megatron-LM's ranks in the job the
Slurm executor gives a segment, in both of its modes:

- ``mpi: srun`` (as profiles/lumi runs training rules): the rule runs in the batch step, the jobstep
  plugin having removed every ``SLURM_*`` variable but the job id;
- the plugin's normal mode: the rule runs inside the plugin's own ``srun -n1`` step, which holds the job's
  CPUs (and GPUs): a second srun in it waits for them forever unless it overlaps. The plugin asks such a
  job for one task (``tasks_per_node`` counts for MPI jobs only), so the test node, without GPUs, runs
  one rank.

Through the local Slurm (its one node, 2 tasks of a CPU with mpi: ``train.gpus_per_node: 2``, a rank per
task), the launch as written (only ``$MEGATRON_LM`` set, to the pinned Megatron-LM tree, and the trainers'
``python`` on PATH), filled in as train-segment and train-eval fill it for the sample's first pack,
starts a task a rank with srun, each the real ``pretrain_gpt.py``: each rank parses our pack's arguments,
joins the process group and
Megatron-LM's model-parallel groups, and dies at its first CUDA work, the CUDA RNG seeding
(``_set_random_seed``): torch here has no CUDA. Stand-ins, for ``pretrain_gpt.py``'s ranks only and only
where ``megatron/training/initialize.py`` calls them, each a device call (``STAND_INS``):

- ``torch.cuda.is_available()``: ``initialize_megatron`` asserts a GPU before anything else; yes.
- ``torch.cuda.device_count()``: the rank's node's GPUs (``_initialize_distributed`` builds the
  model-parallel groups only with GPUs, ``_set_random_seed`` seeds CUDA only with them): a GPU per rank
  of the node, the step's ``SLURM_NTASKS_PER_NODE``.
- ``torch.cuda.set_device(local_rank)``: selects the rank's GPU; it writes what Megatron-LM has parsed
  at that point (its args: rank, world size, local rank, the pack's values), with the rendezvous the rank
  got from the launch and its argv, to ``$STAND_IN_OUT/rank{RANK}.json``.
"""

from __future__ import annotations

import contextlib
import re
from pathlib import Path

import pytest
import yaml

from tests.train.slurm_jobs import job_environment, run_snakefile, slurm_cluster  # noqa: F401 (a fixture)
from tests.trainers import Trainers
from tests.utils import REPO, Workflow, snakemake_env, tail
from workflow_scripts.core.fsio import read_json
from workflow_scripts.train import checkpoint_eval, segment
from workflow_scripts.train.configs import megatron

pytestmark = pytest.mark.slurm

RECIPE = yaml.safe_load((REPO / "config" / "train" / "megatron-launch.yaml").read_text())["train"]

STAND_INS = '''\
"""Stand-ins for device calls of Megatron-LM's initialize, in pretrain_gpt.py's ranks only
(tests/train/test_megatron_launch.py says which and why); then this Python's own sitecustomize."""
import json, os, runpy, sys

here = os.path.dirname(os.path.abspath(__file__))
for folder in sys.path:
    shadowed = os.path.join(folder, "sitecustomize.py")
    if folder and os.path.abspath(folder) != here and os.path.isfile(shadowed):
        runpy.run_path(shadowed)
        break

if os.path.basename(sys.argv[0]) == "pretrain_gpt.py":
    import torch

    def where_initialize_calls(name, stand_in):
        real = getattr(torch.cuda, name)
        def call(*args, **kwargs):
            caller = sys._getframe(1).f_globals.get("__name__")
            return (stand_in if caller == "megatron.training.initialize" else real)(*args, **kwargs)
        setattr(torch.cuda, name, call)

    def set_device(device):
        from megatron.training.global_vars import get_args
        args = get_args()
        seen = {"device": device, "argv": sys.argv[1:], "args": vars(args)}
        seen["env"] = {k: os.environ.get(k) for k in ("MASTER_ADDR", "MASTER_PORT", "SLURM_JOB_ID",
                                                      "SLURM_STEP_ID", "SLURM_NODEID")}
        with open(os.path.join(os.environ["STAND_IN_OUT"], f"rank{args.rank}.json"), "w") as f:
            json.dump(seen, f, default=str)

    where_initialize_calls("is_available", lambda: True)
    where_initialize_calls("device_count", lambda: int(os.environ["SLURM_NTASKS_PER_NODE"]))
    where_initialize_calls("set_device", set_device)
'''

# (rule, the launch's key, the plugin's mode): train_segment's and train_eval's resources for a node of
# train.gpus_per_node 2, cpus_per_task 1, no GPU request (the test cluster has none)
RULES = [(f"{key}_{mode}", key, mode) for key in ("launch", "eval_launch") for mode in ("mpi", "step")]
RULE = """
rule {name}:
    output: "{name}.done"
    resources: {mpi}nodes=1, tasks_per_node=2, cpus_per_task=1
    shell:
        "env > {name}.env; if STAND_IN_OUT=ranks/{name} timeout 180 bash {name}.sh > {name}.log 2>&1;"
        " then echo 0; else echo $?; fi > {name}.rc; touch {{output}}"
"""
# what Megatron-LM's initialize prints on the way (rank 0): the process group, the model-parallel groups
MEGATRON_LINES = (
    "> initializing torch distributed ...",
    "> initialized tensor model parallel with size 1",
    "> initialized pipeline model parallel with size 1",
    "> setting random seeds to",
)
# the pack's values the workflow computes, as Megatron-LM's args name them
PACK_VALUES = ("train_data_path", "valid_data_path", "load", "save", "tokenizer_model", "train_samples",
               "global_batch_size", "seq_length", "exit_interval", "save_interval", "seed")  # fmt: skip


def file_values(words: list[str]) -> dict[str, list[str]]:
    """A flag's values in an argv, by its args name (``--train-data-path A B`` -> ``train_data_path``)."""
    values: dict[str, list[str]] = {}
    for word in words:
        if word.startswith("--"):
            current = values.setdefault(word[2:].replace("-", "_"), [])
        else:
            current.append(word)
    return values


def commands(wf: Workflow) -> tuple[segment.PackKeys, dict[str, str], dict[str, list[str]]]:
    """The first pack's keys, and the launch's and the evaluation's commands as train-segment (its first
    segment) and train-eval (the pack's last checkpoint) fill them in, with the argv each gives
    pretrain_gpt.py."""
    first = read_json(wf.root / "results" / "plan.json")["packs"][0]["name"]
    with contextlib.chdir(wf.root):  # the segments run there: the keys' paths are relative to it
        keys = segment.PackKeys.read(str(wf.root / "results" / "train" / first / "keys.json"))
        config = segment.config_arguments(keys, wf.root / "record.json", 0, None)
        launch = segment.launch_command(RECIPE["launch"], keys, config)
        out = str(wf.root / "eval.json")
        evaluation = checkpoint_eval.evaluation_command(
            RECIPE["eval_launch"], keys, keys.checkpoints, keys.end, out
        )
        argv = {"launch": megatron.argv(keys.config)}
        argv["eval_launch"] = [*megatron.argv(keys.config, evaluation=True), "--skip-train", "--ckpt-step",
                               str(keys.end)]  # fmt: skip
    return keys, {"launch": launch, "eval_launch": evaluation}, argv


def test_megatron_launches_start_pretrain_gpt_ranks_in_both_slurm_modes(
    slurm_cluster,  # noqa: F811
    variants: dict[str, Workflow],
    trainers: Trainers,
    tmp_path: Path,
) -> None:
    """The launch and the evaluation launch, each with `mpi: srun` and in the plugin's own step: 2 ranks of
    pretrain_gpt.py with our pack's arguments reach Megatron-LM's initialize and its first CUDA work."""
    keys, launches, argv = commands(variants["megatron"])
    work = tmp_path / "wf"
    (work / "ranks").mkdir(parents=True)
    stand_ins, tools = tmp_path / "stand-ins", tmp_path / "bin"
    stand_ins.mkdir()
    (stand_ins / "sitecustomize.py").write_text(STAND_INS)
    tools.mkdir()
    (tools / "python").write_text(f'#!/bin/sh\nexec {trainers.python} "$@"\n')  # the trainers' Python
    (tools / "python").chmod(0o755)
    rules = []
    for name, key, mode in RULES:
        (work / f"{name}.sh").write_text(launches[key])
        (work / "ranks" / name).mkdir()
        rules.append(RULE.format(name=name, mpi='mpi="srun", ' if mode == "mpi" else ""))
    env = {
        "PATH": f"{tools}:{snakemake_env()['PATH']}",
        "PYTHONPATH": f"{REPO}:{stand_ins}",
        "MEGATRON_LM": str(trainers.tree("megatron")),
    }
    every = "rule all:\n    input: " + ", ".join(f'"{name}.done"' for name, _, _ in RULES) + "\n"
    proc = run_snakefile(work, every + "".join(rules), env)
    assert proc.returncode == 0, tail(proc.stdout + proc.stderr)

    for name, key, mode in RULES:
        log = (work / f"{name}.log").read_text()
        where = f"{name}: exit {(work / f'{name}.rc').read_text().strip()}\n{tail(log, 80)}"
        job_env = job_environment(work / f"{name}.env")
        if mode == "mpi":  # the batch step, the job's variables stripped
            assert "SLURM_STEP_ID" not in job_env and "SLURM_NTASKS" not in job_env, name
        else:  # the plugin's srun step
            assert job_env["SLURM_STEP_ID"] == "0", name
        job = job_env["SLURM_JOB_ID"]
        # a rank per task of the node: with mpi the job has tasks_per_node's 2; without, the plugin asks
        # --ntasks=1 (it reads tasks_per_node for MPI jobs only), and the test node has no GPU
        world = 2 if mode == "mpi" else 1
        ranks = sorted((read_json(p) for p in (work / "ranks" / name).glob("rank*.json")),
                       key=lambda r: r["args"]["rank"])  # fmt: skip
        assert [(r["args"]["rank"], r["args"]["local_rank"], r["args"]["world_size"], r["device"])
                for r in ranks] == [(i, i, world, i) for i in range(world)], where  # fmt: skip
        for r in ranks:
            # the job's first node (the test cluster's one); the rank in a step of its own, not the rule's
            assert r["env"]["MASTER_ADDR"] == "localhost" and r["env"]["SLURM_JOB_ID"] == job, where
            assert r["env"]["SLURM_STEP_ID"] not in (None, "batch", job_env.get("SLURM_STEP_ID")), where
            assert r["argv"] == argv[key], where  # the pack's file, word for word, through srun
            given = file_values(argv[key])
            for value in PACK_VALUES:  # as Megatron-LM parsed them, the file's
                if value not in given:  # an evaluation reads no training data (no index built for it)
                    assert key == "eval_launch" and value == "train_data_path" and r["args"][value] is None
                    continue
                got = r["args"][value]
                assert [str(v) for v in (got if isinstance(got, list) else [got])] == given[value], where
            assert r["args"]["skip_train"] == (key == "eval_launch"), where
            if key == "eval_launch":
                assert r["args"]["ckpt_step"] == keys.end and not r["args"]["finetune"], where
        # Megatron-LM's own lines: its arguments, the process group and the model-parallel groups, then
        # each rank's first CUDA work, and no failure before it
        assert f"using world size: {world}, data-parallel size: {world}," in log, where
        for line in MEGATRON_LINES:
            assert line in log, where
        errors = re.findall(r"^\[rank(\d)\]: (\w+Error.*)$", log, re.MULTILINE)
        cuda = "AssertionError: Torch not compiled with CUDA enabled"
        assert sorted(errors) == [(str(i), cuda) for i in range(world)], where
        for rank in range(world):
            trace = [s for s in log.splitlines() if s.startswith(f"[rank{rank}]:")]
            assert any("model_parallel_cuda_manual_seed" in s for s in trace), where
