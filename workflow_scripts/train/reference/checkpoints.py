"""Checkpoints in GPT-NeoX's layout: DeepSpeed checkpoints tagged ``global_stepN`` and a ``latest`` file.

Every checkpoint carries, beside DeepSpeed's module and optimizer states, the trainer's own state under
``reference_trainer``: the global and local iteration, the ``iteration_offset`` and pack it was made with,
the samples consumed (the data position), the LR schedule's settings and the RNG states (Python, NumPy,
torch, CUDA), so a resumed run draws exactly what an uninterrupted one would. ``latest`` is written after
every rank has saved, under a temporary name renamed into place: a run killed while saving leaves
``latest`` naming the previous, complete checkpoint.
"""

from __future__ import annotations

import os
import random
import re
from typing import Any

import numpy as np
import torch

from workflow_scripts.core.cli import UserError
from workflow_scripts.core.fsio import atomic_path
from workflow_scripts.train import finetune
from workflow_scripts.train.reference import engine as dist_engine

CLIENT_KEY = "reference_trainer"
TAG = re.compile(r"global_step(\d+)")


class CheckpointError(UserError, ValueError):
    """A checkpoint folder that does not fit this pack's config; the message says which and why."""


def tag_of(step: int) -> str:
    return f"global_step{step}"


def step_of(tag: str) -> int:
    match = TAG.fullmatch(tag)
    if not match:
        raise CheckpointError(f"latest names {tag!r}, not a global_stepN checkpoint")
    return int(match.group(1))


def latest_step(directory: str | None) -> int | None:
    """The global step ``latest`` names in ``directory`` (None when there is none)."""
    if not directory:
        return None
    tag = finetune.latest(directory)
    return None if tag is None else step_of(tag)


def write_latest(directory: str, step: int) -> None:
    with atomic_path(os.path.join(directory, finetune.LATEST)) as tmp:
        tmp.write_text(tag_of(step) + "\n", encoding="utf-8")


def rng_state() -> dict[str, Any]:
    state = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save(engine: Any, directory: str, step: int, state: dict[str, Any], main: bool) -> str:
    """Save ``global_step{step}`` (every rank), then point ``latest`` at it (rank 0); return its path."""
    engine.save_checkpoint(directory, tag=tag_of(step), client_state={CLIENT_KEY: state}, save_latest=False)
    dist_engine.barrier()
    if main:
        write_latest(directory, step)
    dist_engine.barrier()
    return os.path.join(directory, tag_of(step))


def load(engine: Any, directory: str, step: int, weights_only: bool) -> dict[str, Any] | None:
    """Load ``global_step{step}``: everything, or the weights only (a fine-tuning start); return the trainer
    state saved with it (None for a checkpoint made by another trainer)."""
    path, client = engine.load_checkpoint(
        directory,
        tag=tag_of(step),
        load_module_only=weights_only,
        load_optimizer_states=not weights_only,
        load_lr_scheduler_states=False,
    )
    if path is None:
        raise CheckpointError(f"{os.path.join(directory, tag_of(step))}: DeepSpeed could not load it")
    return (client or {}).get(CLIENT_KEY)
