"""Megatron-LM's own pretrain_gpt.py on CPUs (workflow_scripts/train/megatron_cpu.py): the time-limit exit.

A segment's time limit reaches Megatron-LM twice: ``--exit-duration-in-mins`` (the limit less the save,
configs/megatron.py) and the watchdog's SIGUSR1 (tests/workflow/test_megatron_cpu_slurm.py). Here the first:
the sample's first pack's arguments, as the workflow wrote them for Megatron-LM, with a run too long for one
minute and ``--exit-duration-in-mins 1``, trained by one rank as config/train/megatron-cpu.yaml starts it:
Megatron-LM stops itself after a minute, saves the iteration it reached and exits 0, and a second run
resumes from that checkpoint.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

import yaml

from tests.train.hf.megatron_model import free_port
from tests.trainers import Trainers, launch_variables
from tests.utils import REPO, Workflow, tail
from workflow_scripts.train.configs import megatron

CPU_FLAGS = shlex.split(
    yaml.safe_load((REPO / "config" / "train" / "megatron-cpu.yaml").read_text())["train"]["launch"]
    .split("{args}", 1)[1]
    .replace("\\\n", " ")
)


def test_megatron_lm_saves_and_exits_at_the_segments_duration(
    variants: dict[str, Workflow], trainers: Trainers, tmp_path: Path
) -> None:
    wf = variants["megatron"]
    argv = megatron.argv(str(wf.root / "results" / "train" / "warmup_0" / "warmup_0.args"))
    changed = {"--train-samples", "--phase-transition-iterations", "--exit-duration-in-mins", "--save",
               "--load", "--exit-interval", "--save-interval", "--eval-interval"}  # fmt: skip
    checkpoints = tmp_path / "checkpoints"
    argv = [*megatron.without(argv, changed), "--train-samples", "80000", "--exit-duration-in-mins", "1",
            "--save", str(checkpoints), "--load", str(checkpoints), "--save-interval", "10000",
            "--eval-interval", "10000", "--data-cache-path", str(tmp_path / "cache")]  # fmt: skip
    env = {**os.environ, **launch_variables(trainers), "PYTHONWARNINGS": "ignore", "RANK": "0",
           "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1"}  # fmt: skip
    script = [trainers.python, str(REPO / "workflow_scripts" / "train" / "megatron_cpu.py")]
    pretrain = str(Path(launch_variables(trainers)["MEGATRON_LM"]) / "pretrain_gpt.py")
    tracker = checkpoints / "latest_checkpointed_iteration.txt"

    def run(extra: list[str]) -> str:
        env["MASTER_PORT"] = str(free_port())
        cmd = [*script, pretrain, *argv, *CPU_FLAGS, *extra]
        out = subprocess.run(cmd, cwd=wf.root, env=env, capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, tail(out.stdout + out.stderr, 40)
        return out.stdout

    first = run([])
    saved = int(tracker.read_text().strip())
    assert re.search(r"exiting program after 1\.\d+ minutes", first), tail(first, 20)
    assert 0 < saved < 10000 and (checkpoints / f"iter_{saved:07d}").is_dir()
    assert f"iteration {saved:>8d}/" in first and f"iteration {saved + 1:>8d}/" not in first
    # resumed there: the next run's first iteration is the one after the save
    second = run(["--exit-interval", str(saved + 2)])
    assert f"iteration {saved + 1:>8d}/" in second and f"iteration {saved:>8d}/" not in second
    assert int(tracker.read_text().strip()) == saved + 2
