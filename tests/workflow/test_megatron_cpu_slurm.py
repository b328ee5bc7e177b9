"""Megatron-LM's own training loop trains the sample's packs end to end through the real workflow.

`snakemake train --profile profiles/slurm-local` with config/train/megatron-cpu.yaml (and `mpi: srun`, as
profiles/lumi gives the training rules) on the local Slurm: every pack of the sample, each segment a Slurm
job whose launch starts two ranks of the pinned ``pretrain_gpt.py`` with srun (gloo, CPU stand-ins:
workflow_scripts/train/megatron_cpu.py), each checkpoint evaluated by the evaluation launch. One segment is
asked to stop mid-pack with SIGUSR1, as its watchdog asks at the time-limit margin: srun passes it to both
ranks, Megatron-LM's --exit-signal-handler saves and exits, and the pack's next segment resumes there. The
chain ends at the plan's last iteration in Megatron-LM's own checkpoints, with Megatron-LM's own
"validation loss at iteration" lines in its records. Skips without the test cluster (test_slurm.py).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.trainers import Trainers, launch_variables
from tests.utils import Workflow, snakemake_env, tail
from tests.workflow.test_slurm import SNAKEMAKE_TIMEOUT_S, slurm_cluster  # noqa: F401 (a fixture)
from workflow_scripts.core.fsio import read_json

pytestmark = pytest.mark.slurm

CPU = ("--configfile", "config/sample.yaml", "config/train/megatron-cpu.yaml")
MPI = ("--set-resources", "train_segment:mpi='srun'", "train_eval:mpi='srun'")
SLURM = ("--profile", "profiles/slurm-local")
SIGNALLED = "main_1"  # the pack whose first segment is asked to stop mid-pack


def segment_pid(root: Path, pack: str, segment: int) -> int | None:
    """The ``snakepack train-segment`` process of ``pack``'s segment in the workflow at ``root``."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            words = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            continue
        if cwd != str(root) or "train-segment" not in words or "--segment" not in words:
            continue
        keys = words[words.index("--keys") + 1]
        if keys.endswith(f"/{pack}/keys.json") and words[words.index("--segment") + 1] == str(segment):
            return int(pid)
    return None


def trained_iteration(log: Path) -> int:
    """The last global iteration Megatron-LM printed in a segment's log (0 before any)."""
    if not log.exists():
        return 0
    found = [line.split("iteration", 1)[1].split("/")[0] for line in log.read_text().splitlines()
             if " iteration " in line and "/" in line and "lm loss:" in line]  # fmt: skip
    return max((int(f) for f in found), default=0)


def test_megatron_lm_trains_every_pack_in_its_own_loop_through_slurm(
    slurm_cluster,  # noqa: F811
    sample_run: Workflow,
    trainers: Trainers,
    tmp_path: Path,
) -> None:
    wf = sample_run.clone(tmp_path / "wf")
    shutil.rmtree(wf.root / "results" / "train", ignore_errors=True)  # what other tests trained in the sample
    wf.ok("--profile", "profiles/local", "--cores", "2", "train_configs", *CPU)
    root = wf.root
    plan = read_json(root / "results" / "plan.json")
    start = next(p["iteration_offset"] for p in plan["packs"] if p["name"] == SIGNALLED)
    env = snakemake_env() | launch_variables(trainers)
    cmd = ["timeout", "-s", "KILL", str(SNAKEMAKE_TIMEOUT_S), sys.executable, "-m", "snakemake", *SLURM]
    pipe = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT, "text": True}
    run = subprocess.Popen([*cmd, "train", *CPU, *MPI], cwd=root, env=env, **pipe)
    # the watchdog's notice, sent by hand: once the pack's first segment has trained a few iterations
    log = root / "logs" / "train" / SIGNALLED / "segment_0.log"
    deadline = time.time() + SNAKEMAKE_TIMEOUT_S
    while trained_iteration(log) < start + 3 and run.poll() is None and time.time() < deadline:
        time.sleep(0.2)
    pid = segment_pid(root, SIGNALLED, 0)
    assert pid is not None, tail(log.read_text() if log.exists() else "no log", 30)
    os.kill(pid, signal.SIGUSR1)
    out, _ = run.communicate(timeout=SNAKEMAKE_TIMEOUT_S)
    assert run.returncode == 0, tail(out, 80)
    check_trained(root)
    assert "Nothing to be done" in wf.ok(*SLURM, "-n", "train", *CPU, *MPI)


def check_trained(root: Path) -> None:
    """The finished chain, as Megatron-LM's own loop left it."""
    train = root / "results" / "train"
    plan = read_json(root / "results" / "plan.json")
    packs = {p["name"]: (p["iteration_offset"], p["iteration_offset"] + p["train_iters"])
             for p in plan["packs"]}  # fmt: skip
    last = plan["total_train_iters"]
    start, end = packs[SIGNALLED]

    # Megatron-LM's own checkpoints, at the plan's last iteration; nothing of the reference trainer's
    checkpoints = train / "checkpoints"
    assert (checkpoints / "latest_checkpointed_iteration.txt").read_text().strip() == str(last)
    assert (checkpoints / f"iter_{last:07d}" / "metadata.json").is_file()
    assert not (checkpoints / "latest").exists() and not list(checkpoints.glob("global_step*"))

    # the signalled segment saved where it stopped, mid-pack; the next resumed there and ended the pack
    cut, resumed = (read_json(train / SIGNALLED / "segments" / f"{k}.json") for k in (0, 1))
    assert cut["exit"] == f"signal {int(signal.SIGUSR1)}" and start < cut["last_step"] < end, cut
    assert cut["checkpoint"] == f"iter_{cut['last_step']:07d}"
    assert resumed["first_step"] == cut["last_step"] and resumed["last_step"] == end, resumed
    assert resumed["losses"][0][0] == cut["last_step"] + 1  # Megatron-LM's own iteration lines

    evaluated, boundaries = [], []
    for name, (first, stop) in packs.items():
        records = [read_json(p) for p in sorted((train / name / "segments").glob("[0-9]*.json"))]
        assert records[0]["first_step"] == first and records[-1]["last_step"] == stop, (name, records)
        trained = [r for r in records if r["iterations"]]
        # every iteration of the pack trained once, in Megatron-LM's loop, its loss printed by the last rank
        steps = [step for r in trained for step, _ in r["losses"]]
        assert steps == list(range(first + 1, stop + 1)), (name, steps)
        # Megatron-LM's own evaluation lines, at its --eval-interval and at the run's end, in the records
        interval = 10
        valid = [step for r in trained for step, _ in r["valid_losses"]]
        expected = [s for s in range(first + 1, stop + 1) if s % interval == 0 or s == last]
        assert valid == expected, (name, valid)
        # a segment ends at a global multiple of --exit-interval, at the pack's end (a phase transition),
        # or where the signal stopped it
        exit_interval = read_json(train / name / "keys.json")["set"]["exit_interval"]["value"]
        for r in trained:
            if r["last_step"] == stop:
                assert r["exit"] in ("pack finished", f"signal {int(signal.SIGUSR1)}"), r
            elif r["exit"] == "segment boundary":
                assert r["last_step"] % exit_interval == 0, r
                boundaries.append(r["last_step"])
            else:
                assert r is not trained[-1] and r["exit"] == cut["exit"], r
        assert read_json(train / name / "done.json")["last_step"] == stop
        for path in sorted((train / name / "eval").glob("*.json")):
            result = read_json(path)
            if "skipped" not in result:  # the evaluation launch: the checkpoint of that step, evaluated
                evaluated.append(result["iteration"])
                assert result["valid_loss"] > 0, result
    assert last in evaluated and cut["last_step"] in evaluated, evaluated
    assert boundaries, "no segment ended at --exit-interval (config/train/megatron-cpu.yaml's cadence)"
    assert "validation loss at iteration" in (root / "logs" / "train" / "main_2" / "eval_0.log").read_text()
