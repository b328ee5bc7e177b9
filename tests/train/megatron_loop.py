"""Megatron-LM's own ``pretrain_gpt.py`` run on CPU ranks for a test (workflow_scripts/train/megatron_cpu.py,
the launch of config/train/megatron-cpu.yaml without Slurm), and what it printed, read back.

``run_megatron(trainers, argv, world)`` starts ``world`` ranks (gloo, ``RANK``/``WORLD_SIZE``/... as torchrun
would set them), each ``megatron_cpu.py $MEGATRON_LM/pretrain_gpt.py ARGV CPU_FLAGS``, and returns the last
rank's output (Megatron-LM prints its iteration and validation lines there). ``iteration_losses`` and
``validation_losses`` read those lines.

``CPU_FLAGS`` are the launch file's (config/train/megatron-cpu.yaml), plus ``--no-rope-fusion``, which a
model with rotary embeddings needs without Transformer Engine (else ``TransformerConfig.__post_init__``
raises "apply_rope_fusion is not available. Please install TE >= 1.4."), and ``--no-bias-swiglu-fusion``
as tests/train/hf/megatron_model.CPU_ARGV has it (the unfused SwiGLU; the fused one runs on a CPU too).
"""

from __future__ import annotations

import fcntl
import os
import re
import subprocess
from pathlib import Path

from tests.train.hf.megatron_model import free_port
from tests.trainers import Trainers
from tests.utils import REPO, tail

CPU_FLAGS = [
    "--transformer-impl", "local", "--use-cpu-initialization", "--no-gradient-accumulation-fusion",
    "--no-masked-softmax-fusion", "--no-bias-gelu-fusion", "--no-bias-dropout-fusion",
    "--no-persist-layer-norm", "--no-rope-fusion", "--no-bias-swiglu-fusion",
]  # fmt: skip
ITERATION = re.compile(r"\biteration\s+(\d+)/\s*\d+ \|.*?\| lm loss: ([0-9.eE+-]+) \|")
VALIDATION = re.compile(r"validation loss at iteration (\d+) \| lm loss value: ([0-9.eE+-]+) \|")


def run_megatron(
    trainers: Trainers, argv: list[str], cache: Path, world: int = 1, timeout: float = 300
) -> str:
    """Megatron-LM's pretrain_gpt.py on ``world`` CPU ranks with ``argv`` (its index caches in ``cache``);
    the last rank's output. It must exit 0."""
    env = {**os.environ, **trainers.helpers_env(), "PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": "1"}
    env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), WORLD_SIZE=str(world))
    script = [str(REPO / "workflow_scripts" / "train" / "megatron_cpu.py")]
    script.append(str(trainers.tree("megatron") / "pretrain_gpt.py"))
    command = [trainers.python, *script, *argv, *CPU_FLAGS]
    command += ["--data-cache-path", str(cache)]
    with open(trainers.helpers_lock, "w") as lock:  # the first run on a machine builds its helpers
        fcntl.flock(lock, fcntl.LOCK_EX)
        ranks = [
            subprocess.Popen(
                command,
                env={**env, "RANK": str(rank), "LOCAL_RANK": str(rank)},
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            for rank in range(world)
        ]
        outputs = []
        try:
            for proc in ranks:
                outputs.append(proc.communicate(timeout=timeout)[0])
        finally:
            for proc in ranks:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
    for rank, (proc, output) in enumerate(zip(ranks, outputs, strict=True)):
        assert proc.returncode == 0, f"Megatron-LM rank {rank}: rc {proc.returncode}\n{tail(output)}"
    return outputs[-1]


def iteration_losses(output: str) -> dict[int, float]:
    """Each iteration's ``lm loss`` as Megatron-LM trained it. With ``--log-interval 1`` its ``training_log``
    prints each iteration's loss, except that the first line of a run does not reset its sums
    (``should_reset = not is_first_iteration``): the second line prints the mean of the first two
    iterations, so the second iteration's own loss is twice that less the first."""
    printed = [(int(i), float(loss)) for i, loss in ITERATION.findall(output)]
    losses = dict(printed)
    if len(printed) > 1 and printed[1][0] == printed[0][0] + 1:
        (_, a), (second, b) = printed[:2]
        losses[second] = 2 * b - a
    return losses


def validation_losses(output: str) -> dict[int, float]:
    """The ``lm loss value`` of each evaluation at an ``--eval-interval`` iteration (not the one after
    training, "at iteration N on validation set", which reads the next samples again)."""
    return {int(i): float(loss) for i, loss in VALIDATION.findall(output)}
