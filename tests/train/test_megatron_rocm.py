"""config/train/megatron-rocm.yaml, the ROCm / no-TE recipe for Megatron-LM on AMD nodes (LUMI-G):

- its launch and evaluation launch, filled in as train-segment and train-eval fill them for the sample's
  first pack, run through the local Slurm's executor with ``mpi: srun`` (as profiles/lumi runs training
  rules; 2 tasks of a CPU: the test node has no GPU, and no CPU binding, so srun ignores the LUMI mask)
  start a rank per task, each with RANK, LOCAL_RANK and WORLD_SIZE of its Slurm task, MASTER_ADDR and
  MASTER_PORT, LUMI's RCCL/libfabric/MIOpen environment and its own MIOpen folder, and the pack's arguments
  word for word with the recipe's device flags after them. ``$MEGATRON_LM`` is a folder whose
  ``pretrain_gpt.py`` is a stand-in that writes what it was given (Megatron-LM's own parse of the same argv
  is tests/train/test_trainer_compat.py's ``test_every_megatron_launch_parses_in_megatron_lm``);
- LUMI-G's CPU mask, as data: 8 tasks, 7 cores each, none shared, every CCD's first core left out, task i
  on the CCD closest to GCD i.
"""

from __future__ import annotations

import contextlib
import shlex
from pathlib import Path

import pytest
import yaml

from tests.train.slurm_jobs import job_environment, run_snakefile, slurm_cluster  # noqa: F401 (a fixture)
from tests.utils import REPO, Workflow, tail
from workflow_scripts.core.fsio import read_json
from workflow_scripts.train import checkpoint_eval, segment
from workflow_scripts.train.configs import megatron

RECIPE = yaml.safe_load((REPO / "config" / "train" / "megatron-rocm.yaml").read_text())["train"]
# LUMI-G: the CCD (8 cores each) closest to each GCD, GCD 0..7 (LUMI's documentation, GPU binding)
CCD_OF_GCD = [6, 7, 2, 3, 0, 1, 4, 5]
ENV = ("NCCL_SOCKET_IFNAME", "NCCL_NET_GDR_LEVEL", "CXI_FORK_SAFE", "CXI_FORK_SAFE_HP",
       "FI_CXI_DISABLE_CQ_HUGETLB", "MIOPEN_USER_DB_PATH", "MIOPEN_CUSTOM_CACHE_DIR", "OMP_NUM_THREADS",
       "RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "SLURM_PROCID", "SLURM_LOCALID",
       "SLURM_JOB_ID", "SLURM_STEP_ID")  # fmt: skip
PRETRAIN_GPT = f"""\
import json, os, sys
seen = {{"argv": sys.argv[1:], "env": {{k: os.environ.get(k) for k in {ENV!r}}}}}
seen["miopen_folder"] = os.path.isdir(os.environ.get("MIOPEN_USER_DB_PATH", "/nonexistent"))
with open(os.path.join(os.environ["STAND_IN_OUT"], "rank%s.json" % os.environ["RANK"]), "w") as f:
    json.dump(seen, f)
"""
RULE = """
rule {name}:
    output: "{name}.done"
    resources: mpi="srun", nodes=1, tasks_per_node=2, cpus_per_task=1
    shell:
        "env > {name}.env; if STAND_IN_OUT=ranks/{name} timeout 180 bash {name}.sh > {name}.log 2>&1;"
        " then echo 0; else echo $?; fi > {name}.rc; touch {{output}}"
"""


def appended(key: str) -> list[str]:
    """The words the recipe's launch (``key``) gives pretrain_gpt.py after the pack's arguments."""
    text = RECIPE[key].split("{args}", 1)[1].replace("\\\n", " ")
    return shlex.split(text.replace("{step}", "STEP"))


def test_the_cpu_mask_is_lumis_binding_of_eight_tasks() -> None:
    launch = shlex.split(RECIPE["launch"].replace("\\\n", " "), comments=True)
    (bind,) = [w for w in launch if w.startswith("--cpu-bind=")]
    assert bind in RECIPE["eval_launch"]
    masks = [int(m, 16) for m in bind.removeprefix("--cpu-bind=mask_cpu:").split(",")]
    cores = [{c for c in range(64) if m >> c & 1} for m in masks]
    assert len(cores) == RECIPE["gpus_per_node"] == 8
    assert all(len(c) == RECIPE["cpus_per_task"] == 7 for c in cores)
    assert len(set().union(*cores)) == 56 and not set().union(*cores) & set(range(0, 64, 8))
    assert [{c // 8 for c in task} for task in cores] == [{ccd} for ccd in CCD_OF_GCD]


def test_the_recipe_appends_the_no_te_flags_after_the_packs_arguments() -> None:
    flags = ["--transformer-impl", "local", "--no-gradient-accumulation-fusion", "--no-masked-softmax-fusion",
             "--no-rope-fusion", "--distributed-backend", "nccl"]  # fmt: skip
    assert appended("launch") == flags
    assert appended("eval_launch") == [*flags, "--skip-train", "--ckpt-step", "STEP"]


@pytest.mark.slurm
def test_the_rocm_launches_start_a_rank_per_task_with_its_place_in_the_job(
    slurm_cluster,  # noqa: F811
    variants: dict[str, Workflow],
    tmp_path: Path,
) -> None:
    wf = variants["megatron"]
    first = read_json(wf.root / "results" / "plan.json")["packs"][0]["name"]
    with contextlib.chdir(wf.root):  # the segments run there: the keys' paths are relative to it
        keys = segment.PackKeys.read(str(wf.root / "results" / "train" / first / "keys.json"))
        config = segment.config_arguments(keys, wf.root / "record.json", 0, None)
        launches = {
            "launch": segment.launch_command(RECIPE["launch"], keys, config),
            "eval_launch": checkpoint_eval.evaluation_command(
                RECIPE["eval_launch"], keys, keys.checkpoints, keys.end, str(wf.root / "eval.json")
            ),
        }
        argv = {
            "launch": [*megatron.argv(keys.config), *appended("launch")],
            "eval_launch": [
                *megatron.argv(keys.config, evaluation=True),
                *[str(keys.end) if w == "STEP" else w for w in appended("eval_launch")],
            ],
        }
    work, stand_in = tmp_path / "wf", tmp_path / "megatron"
    stand_in.mkdir()
    (stand_in / "pretrain_gpt.py").write_text(PRETRAIN_GPT)
    for key, text in launches.items():
        (work / "ranks" / key).mkdir(parents=True)
        (work / f"{key}.sh").write_text(text)
    snakefile = 'rule all:\n    input: "launch.done", "eval_launch.done"\n'
    snakefile += "".join(RULE.format(name=key) for key in launches)
    proc = run_snakefile(work, snakefile, {"MEGATRON_LM": str(stand_in)})
    assert proc.returncode == 0, tail(proc.stdout + proc.stderr)
    for key in launches:
        log = (work / f"{key}.log").read_text()
        where = f"{key}: exit {(work / f'{key}.rc').read_text().strip()}\n{tail(log)}"
        assert (work / f"{key}.rc").read_text().strip() == "0", where
        job_env = job_environment(work / f"{key}.env")
        assert "SLURM_NTASKS" not in job_env, (
            where
        )  # the batch step: the executor stripped the job's variables
        job = job_env["SLURM_JOB_ID"]
        ranks = [read_json(work / "ranks" / key / f"rank{r}.json") for r in range(2)]
        for r, seen in enumerate(ranks):
            env = seen["env"]
            assert (env["RANK"], env["LOCAL_RANK"], env["WORLD_SIZE"]) == (str(r), str(r), "2"), where
            assert (env["SLURM_PROCID"], env["SLURM_LOCALID"], env["SLURM_JOB_ID"]) == (str(r), str(r), job)
            assert env["SLURM_STEP_ID"] not in (None, "batch"), where  # a step of its own: srun's tasks
            assert env["MASTER_ADDR"] == "localhost" and env["MASTER_PORT"] == str(20000 + int(job) % 10000)
            assert env["NCCL_SOCKET_IFNAME"] == "hsn0,hsn1,hsn2,hsn3" and env["NCCL_NET_GDR_LEVEL"] == "PHB"
            assert (env["CXI_FORK_SAFE"], env["CXI_FORK_SAFE_HP"], env["FI_CXI_DISABLE_CQ_HUGETLB"]) == (
                "1",
                "1",
                "1",
            )
            assert env["MIOPEN_USER_DB_PATH"] == env["MIOPEN_CUSTOM_CACHE_DIR"] == f"/tmp/miopen-{job}"
            assert seen["miopen_folder"] and env["OMP_NUM_THREADS"] == "1"
            assert seen["argv"] == argv[key], where  # the pack's file, word for word, then the recipe's
