"""Training through the real local Slurm with the reference trainer: the segment chain run by Snakemake's
Slurm executor (a segment cancelled while it trains, the rerun resuming from `latest`), evaluation per
checkpoint, retention, status on a running chain, and the detached sbatch chain with its resubmission.

The data (two packs of the sample at scale 0.3: warmup 4 iterations, main 16) is built locally once; the
training runs through `--profile profiles/slurm-local`. Skips without the test cluster (see test_slurm.py).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.utils import Workflow, snakemake_env, tail
from tests.workflow.test_slurm import SNAKEMAKE_TIMEOUT_S, slurm_cluster  # noqa: F401 (a fixture)
from workflow_scripts.core.fsio import read_json
from workflow_scripts.train import checkpoint_dirs, megatron_checkpoint
from workflow_scripts.train.hf.megatron_layout import to_megatron
from workflow_scripts.train.reference.checkpoints import neox_weights
from workflow_scripts.train.reference.config import load_config
from workflow_scripts.train.reference.train import PAUSE_AT

pytestmark = pytest.mark.workflow  # the test tiers: tests/conftest.py

# exit_interval 12 at a 2 s/iter guess (checkpoint_factor 4): main trains in two segments and one spare
CONFIG = """
sample: {scale: 0.3}
tokenize: {threads: 1}
datapacks:
  phases:
    - {name: warmup, iters: 4, mixture: main}
    - {name: main, iters: 16, mixture: main}
train:
  base_config: config/train/neox-sample.yml
  nodes: 1
  gpus_per_node: 1
  seconds_per_iter: 2
  checkpoint_hours: 0.0025
  time_limit_minutes: 0.6
  startup_minutes: 0.05
  save_minutes: 0.05
  spare_segments: 1
  keep_last: 1
  segment_retries: 0
"""
ARGS = ("--configfile", "config/sample.yaml", "train.yaml")
DETACH = ("--configfile", "config/sample.yaml", "train.yaml", "detach.yaml")
SLURM = ("--profile", "profiles/slurm-local")


@pytest.fixture(scope="module")
def trained_data(tmp_path_factory) -> Workflow:
    """The workflow with its data built locally (packs, trainer configs), nothing trained."""
    workflow = Workflow(tmp_path_factory.mktemp("train") / "wf")
    (workflow.root / "train.yaml").write_text(CONFIG)
    detached = yaml.safe_load(CONFIG)["train"] | {"detach": True, "eval_launch": None}
    (workflow.root / "detach.yaml").write_text(yaml.safe_dump({"train": detached}))
    workflow.ok("--profile", "profiles/local", "--cores", "2", *ARGS, timeout_s=1200)
    return workflow


def snakepack(workflow: Workflow, *args: str) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "workflow_scripts", *args],
        cwd=workflow.root,
        capture_output=True,
        text=True,
        timeout=120,
        env=snakemake_env(),
    )
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def wait_for(predicate, timeout_s: float, what: str) -> None:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if predicate():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def start_training(wf: Workflow, *configs: str, pause_at: int | None = None) -> subprocess.Popen:
    """``snakemake train`` through the local Slurm, in the background (its output piped); with ``pause_at``
    the reference trainer stops itself (SIGSTOP) after that global iteration."""
    cmd = ["timeout", "-s", "KILL", str(SNAKEMAKE_TIMEOUT_S), sys.executable, "-m", "snakemake", *SLURM]
    pipe = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT, "text": True}
    env = snakemake_env() | ({} if pause_at is None else {PAUSE_AT: str(pause_at)})
    return subprocess.Popen([*cmd, "train", *configs], cwd=wf.root, env=env, **pipe)


def paused_trainer(root: Path, config: str) -> int:
    """The pid of the reference trainer of ``config`` once it has stopped itself (``PAUSE_AT``)."""

    def state(pid: int) -> str:
        try:
            return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return "gone"

    def stopped() -> list[int]:
        return [pid for pid in trainer_pids(root, config) if state(pid) == "T"]

    wait_for(stopped, 600, f"the trainer of {config} to pause")
    (pid,) = stopped()
    return pid


def trainer_pids(root: Path, config: str) -> list[int]:
    """The reference trainer processes training ``config`` in the workflow at ``root``."""
    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            continue
        words = [w.decode(errors="replace") for w in cmdline]
        if "train-reference" in words and any(w.endswith(config) for w in words) and cwd == str(root):
            pids.append(int(pid))
    return pids


def queued(prefix: str) -> dict[str, dict[str, str]]:
    """comment -> {id, state} of this user's queued and running jobs whose comment starts with prefix."""
    out = subprocess.run(["squeue", "--noheader", "--format=%i|%T|%k"], capture_output=True, text=True)
    jobs = {}
    for line in out.stdout.splitlines():
        job, state, comment = line.strip().split("|", 2)
        if comment.startswith(prefix):
            jobs[comment] = {"id": job, "state": state}
    return jobs


@pytest.mark.slurm
def test_a_two_node_lumi_segment_asks_slurm_for_whole_gpu_nodes(slurm_cluster, trained_data, tmp_path):  # noqa: F811
    """The sbatch call the Slurm plugin makes (its --verbose output) for a 2-node segment with
    config/train/lumi-neox.yaml and profiles/lumi: every flag from the train settings, none from a copy."""
    wf = trained_data.clone(tmp_path / "wf")
    lumi = yaml.safe_load((wf.root / "config" / "train" / "lumi-neox.yaml").read_text())
    base = yaml.safe_load((wf.root / "config" / "train" / "neox-sample.yml").read_text())
    base |= {"model_parallel_size": 2, "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1}
    (wf.root / "base-tp2.yml").write_text(yaml.safe_dump(base))  # 8 = 1 x 1 x (2 nodes x 8 GPUs / TP 2)
    lumi["train"] |= {"nodes": 2, "base_config": "base-tp2.yml", "segment_retries": 0}
    (wf.root / "lumi.yaml").write_text(yaml.safe_dump(lumi))
    env = snakemake_env() | {"SNAKEPACK_SLURM_ACCOUNT": "project_465000000"}
    args = ("--profile", "profiles/lumi", "--verbose", "train", *ARGS, "lumi.yaml")
    proc = wf.run(*args, env=env, timeout_s=300)
    calls = [
        line
        for line in proc.output.splitlines()
        if line.startswith("sbatch call:") and "train_segment" in line
    ]
    assert calls, tail(
        proc.output
    )  # the test cluster has one node and no GPU: sbatch refuses it, after the call
    flags = calls[0].split(" --wrap=")[0].split()
    for flag in [
        "--nodes=2",
        "--ntasks-per-node=8",  # one rank per GPU
        "--cpus-per-task=7",
        "--gpus-per-node=mi250:8",  # per node, with LUMI's GPU type (not --gpus=8 for the whole job)
        "--exclusive=user",
        "--hint=nomultithread",
    ]:
        assert flag in flags, (flag, calls[0])
    assert flags[flags.index("-t") + 1] == "2880" and flags[flags.index("-p") + 1] == "standard-g"
    assert flags[flags.index("-A") + 1] == "project_465000000" and not any(
        f.startswith("--mem") for f in flags
    )
    assert not any(f.startswith(("--gpus=", "--signal")) for f in flags)  # the watchdog's USR1 is the notice


@pytest.mark.slurm
def test_segment_chain_through_slurm_survives_a_cancelled_segment(slurm_cluster, trained_data):  # noqa: F811
    wf = trained_data
    root, train = wf.root, wf.root / "results" / "train"
    dry = wf.ok(*SLURM, "-n", "train", *ARGS)
    assert "train_segment" in dry and "estimate_s=" in dry and "slurm_partition=debug" in dry
    assert not (train / "checkpoints").exists()  # a dry run (and the data run) trained nothing

    # the trainer stops itself mid-segment (a 2-core CI machine trains the 12 iterations in a second);
    # scancel's SIGCONT and SIGTERM then wake it, it finishes its iteration, saves and exits
    first = start_training(wf, *ARGS, pause_at=6)
    paused_trainer(root, "main_1.yml")
    status = json.loads(snakepack(wf, "status", "--json"))
    main = next(p for p in status["packs"] if p["pack"] == "main_1")
    assert main["state"] == "queued/running" and ":RUNNING" in main["slurm"], status
    assert status["run"]["latest"] is not None
    job = queued("rule_train_segment_wildcards_main_1_0")["rule_train_segment_wildcards_main_1_0"]["id"]
    subprocess.run(["scancel", job], check=True)
    out, _ = first.communicate(timeout=SNAKEMAKE_TIMEOUT_S)
    assert first.returncode != 0, tail(out)  # the cancelled segment failed the run (segment_retries: 0)
    assert f"SLURM-job '{job}' failed" in out, tail(out)
    assert not (train / "main_1" / "segments" / "0.json").exists()
    stopped_at = int((train / "checkpoints" / "latest").read_text().strip()[len("global_step") :])
    assert 6 < stopped_at < 4 + 12  # past the pause: SIGTERM saves after the iteration it interrupts

    warmup = [p.stat().st_mtime_ns for p in sorted((train / "warmup_0" / "segments").glob("*.json"))]
    assert len(warmup) == 2
    wf.ok(*SLURM, "train", *ARGS, timeout_s=SNAKEMAKE_TIMEOUT_S)
    assert [p.stat().st_mtime_ns for p in sorted((train / "warmup_0" / "segments").glob("*.json"))] == warmup
    records = [read_json(train / "main_1" / "segments" / f"{k}.json") for k in range(3)]
    assert records[0]["first_step"] == stopped_at  # resumed from latest, not from scratch
    assert [r["last_step"] for r in records] == [16, 20, 20]
    assert records[2]["iterations"] == 0 and records[2]["exit"] == "pack finished"  # the spare verified
    assert all(r["slurm_job_id"] and r["slurm_nodelist"] == "localhost" for r in records)
    assert (train / "checkpoints" / "latest").read_text().strip() == "global_step20"
    assert read_json(train / "main_1" / "done.json")["last_step"] == 20
    evals = (train / "evals.csv").read_text().splitlines()
    assert [line.split(",")[2] for line in evals[1:]] == ["global_step4", "global_step4", "global_step16",
                                                          "global_step20", "global_step20"]  # fmt: skip
    assert "no new checkpoint" in evals[2] and "no new checkpoint" in evals[5]
    # retention (keep_last 1, pack ends protected) never deleted latest nor a pack's end
    kept = sorted(int(p.name[len("global_step") :]) for p in (train / "checkpoints").glob("global_step*"))
    assert kept == [4, 20], kept
    assert 16 in read_json(train / "main_1" / "retention" / "1.json")["deleted"]
    loss = (train / "loss.csv").read_text().splitlines()
    assert int(loss[-1].split(",")[0]) == 20 and (train / "loss.png").stat().st_size > 0
    # the cancelled attempt left its iterations (segments/attempts/): the curve has every step of main_1
    assert [int(row.split(",")[0]) for row in loss[1:] if ",main_1," in row] == list(range(5, 21))
    assert read_json(train / "stats.json")["failed_attempts"] == 1
    assert "Nothing to be done" in wf.ok(*SLURM, "-n", "train", *ARGS)


@pytest.mark.slurm
def test_detached_chain_is_submitted_once_and_resubmits_only_what_is_left(slurm_cluster, trained_data):  # noqa: F811
    wf = trained_data
    train = wf.root / "results" / "train"
    reset_training(wf)  # the chain test's run, or what is left of it
    first = wf.ok(*SLURM, "train", *DETACH)
    # 5 segments, each with its evaluation and retention, 2 pack checks and the curve
    assert "13 jobs in the chain: 0 done, 0 still queued or running, 13 submitted" in first, tail(first)
    ids = read_json(train / "detach" / "chain.json")["jobs"]
    job = subprocess.run(["scontrol", "show", "job", ids["main_1/segment/0"]], capture_output=True, text=True)
    assert f"afterok:{ids['warmup_0/finished']}" in job.stdout, job.stdout  # pending: warmup_0 trains first
    again = wf.ok(*SLURM, "train", *DETACH)
    assert "0 submitted" in again and read_json(train / "detach" / "chain.json")["jobs"] == ids, tail(again)

    # cancel the last (pending) segment: it and what waits on it are submitted again, nothing else; the
    # next pack's first segment waits afterok for the pack check (train-finished), not for a segment
    last = ids["main_1/segment/2"]
    subprocess.run(["scancel", last], check=True)
    third = wf.ok(*SLURM, "train", *DETACH)
    renewed = read_json(train / "detach" / "chain.json")["jobs"]
    changed = sorted(k for k in ids if renewed[k] != ids[k])
    again_submitted = ["curve", "main_1/after/2", "main_1/finished", "main_1/segment/2"]
    assert changed == again_submitted, (changed, tail(third))

    wait_for(lambda: not queued("snakepack_"), SNAKEMAKE_TIMEOUT_S, "the detached chain to finish")
    assert (train / "checkpoints" / "latest").read_text().strip() == "global_step20"
    assert read_json(train / "main_1" / "done.json")["last_step"] == 20
    assert read_json(train / "stats.json")["last_step"] == 20
    final = wf.ok(*SLURM, "train", *DETACH)
    assert "13 jobs in the chain: 13 done, 0 still queued or running, 0 submitted" in final, tail(final)


def reset_training(wf: Workflow) -> None:
    """The training's outputs removed: the data and trainer configs stay."""
    train = wf.root / "results" / "train"
    for path in [
        train / "checkpoints",
        *(p for d in ("segments", "eval", "retention") for p in train.glob(f"*/{d}")),
    ]:
        shutil.rmtree(path, ignore_errors=True)
    for path in [*train.glob("*/done.json"), train / "loss.csv"]:
        path.unlink(missing_ok=True)


@pytest.mark.slurm
def test_megatron_chain_through_slurm_in_megatrons_layout(slurm_cluster, trained_data, tmp_path):  # noqa: F811
    """train.trainer: megatron: Megatron-LM arguments, iter_NNNNNNN checkpoints and their tracker, exits at
    global multiples of exit_interval, a cancelled segment resumed, retention, every checkpoint evaluated."""
    wf = trained_data.clone(tmp_path / "wf")
    reset_training(wf)
    megatron = yaml.safe_load(CONFIG)["train"] | {
        "trainer": "megatron",
        "base_config": "config/train/megatron-sample.args",
        "eval_every": "checkpoint",
    }
    (wf.root / "megatron.yaml").write_text(yaml.safe_dump({"train": megatron}))
    args = (*ARGS, "megatron.yaml")
    root, train = wf.root, wf.root / "results" / "train"
    first = start_training(wf, *args, pause_at=9)
    paused_trainer(root, "main_1.args")
    job = queued("rule_train_segment_wildcards_main_1_0")["rule_train_segment_wildcards_main_1_0"]["id"]
    subprocess.run(["scancel", job], check=True)
    out, _ = first.communicate(timeout=SNAKEMAKE_TIMEOUT_S)
    assert first.returncode != 0, tail(out)
    # Megatron-LM saves on its --exit-signal (SIGUSR1) only: scancel's SIGTERM stops it unsaved, as it would
    tracker = train / "checkpoints" / "latest_checkpointed_iteration.txt"
    assert tracker.read_text().strip() == "8" and not (train / "checkpoints" / "latest").exists()

    wf.ok(*SLURM, "train", *args, timeout_s=SNAKEMAKE_TIMEOUT_S)
    records = [read_json(train / "main_1" / "segments" / f"{k}.json") for k in range(3)]
    assert [(r["first_step"], r["last_step"]) for r in records] == [(8, 12), (12, 20), (20, 20)]
    assert records[0]["checkpoint"] == "iter_0000012" and records[0]["trainer"] == "megatron"
    assert tracker.read_text().strip() == "20"
    assert read_json(train / "main_1" / "done.json")["checkpoint"] == "iter_0000020"
    kept = sorted(p.name for p in (train / "checkpoints").iterdir() if p.name.startswith("iter_"))
    assert kept == ["iter_0000004", "iter_0000020"], kept  # keep_last 1 + the pack ends
    evals = (train / "evals.csv").read_text().splitlines()
    evaluated = [line.split(",")[2] for line in evals[1:] if "no new checkpoint" not in line]
    assert evaluated == ["iter_0000004", "iter_0000012", "iter_0000016", "iter_0000020"]  # every checkpoint
    status = json.loads(snakepack(wf, "status", "--json"))
    assert status["run"]["latest"] == "iter_0000020" and {p["state"] for p in status["packs"]} == {"done"}
    assert "Nothing to be done" in wf.ok(*SLURM, "-n", "train", *args)


@pytest.mark.parametrize("trainer", ["neox", "megatron"])
def test_a_fine_tune_trains_two_packs_from_a_start_checkpoint(trained_data, tmp_path, trainer):
    """train.finetune_from: the DAG links the start and points the tracker at it; the first segment loads
    its weights (finetune), every later one gets one config with finetune off, and the reference trainer
    (as strict as NeoXArgs and Megatron-LM's parser) trains both packs to the plan's end."""
    wf = trained_data.clone(tmp_path / "wf")
    reset_training(wf)
    train = wf.root / "results" / "train"
    warmup = yaml.safe_load((train / "warmup_0" / "warmup_0.yml").read_text())
    start_dir = tmp_path / "pretrained"
    warmup |= {"save": str(start_dir), "load": str(start_dir)}
    (tmp_path / "pretrain.yml").write_text(yaml.safe_dump(warmup))
    snakepack(wf, "train-reference", "--config", str(tmp_path / "pretrain.yml"))  # the same GPT as both bases
    start = start_dir / "global_step4"
    config = yaml.safe_load(CONFIG)["train"] | {"finetune_from": str(start), "eval_launch": None}
    if trainer == "megatron":  # its start is Megatron-LM's torch_dist folder of the same weights
        config |= {"trainer": "megatron", "base_config": "config/train/megatron-sample.args"}
        cfg = load_config([str(tmp_path / "pretrain.yml")]).model
        weights, common = to_megatron(neox_weights(str(start)), cfg), megatron_checkpoint.import_common(cfg)
        clash = start_dir / "megatron" / "iter_0000004"  # the run saves iteration 4 itself
        megatron_checkpoint.save(str(clash), weights, common)
        (wf.root / "finetune.yaml").write_text(
            yaml.safe_dump({"train": config | {"finetune_from": str(clash)}})
        )
        refused = wf.run("--profile", "profiles/local", "--cores", "2", "train", *ARGS, "finetune.yaml")
        assert refused.returncode != 0 and "restarts the iteration count at 0" in refused.output
        start = shutil.copytree(clash, clash.with_name("iter_0000100"))
        config["finetune_from"] = str(start)
    (wf.root / "finetune.yaml").write_text(yaml.safe_dump({"train": config}))
    args = (*ARGS, "finetune.yaml")
    wf.ok("--profile", "profiles/local", "--cores", "2", "train", *args, timeout_s=SNAKEMAKE_TIMEOUT_S)
    ckpt, first_step = train / "checkpoints", (4 if trainer == "neox" else 0)  # Megatron-LM restarts at 0
    layout = checkpoint_dirs.of(trainer)
    assert (ckpt / start.name).is_symlink() and layout.latest(str(ckpt)) == first_step + 20
    assert read_json(train / "warmup_0" / "done.json")["first_step"] == first_step
    assert read_json(train / "main_1" / "done.json")["last_step"] == first_step + 20
    first = (wf.root / "logs" / "train" / "warmup_0" / "segment_0.log").read_text()
    assert f"finetune: weights of {start.name}, fresh optimizer" in first
    later = (wf.root / "logs" / "train" / "main_1" / "segment_0.log").read_text()
    assert f"resumed from {layout.tag(first_step + 4)}" in later and ".finetune-off" not in later
    spare = (wf.root / "logs" / "train" / "warmup_0" / "segment_1.log").read_text()
    assert ".finetune-off" in spare  # the warmup's own config says finetune; after its save, a copy says not
    again = wf.run("--profile", "profiles/local", "--cores", "2", "-n", "train", *args)
    assert "Nothing to be done" in again.output, tail(again.output)
