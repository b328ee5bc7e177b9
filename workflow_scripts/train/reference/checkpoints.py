"""Checkpoints in the layout of the trainer the config is for (train/checkpoint_dirs): GPT-NeoX's
DeepSpeed checkpoints tagged ``global_stepN`` with a ``latest`` file, or Megatron-LM's ``iter_NNNNNNN``
folders with ``latest_checkpointed_iteration.txt``; the contents are DeepSpeed's either way.

Every checkpoint carries, beside DeepSpeed's module and optimizer states, the trainer's own state under
``reference_trainer``: the global and local iteration, the ``iteration_offset`` and pack it was made with,
the samples consumed (the data position), the LR schedule's settings and the RNG states (Python, NumPy,
torch, CUDA), so a resumed run draws exactly what an uninterrupted one would. A GPT-NeoX checkpoint also
carries GPT-NeoX's own ``iteration`` (the global step), which its ``load_checkpoint`` (fork and upstream)
takes as the step to resume at when no ``iteration_offset`` is set (upstream; the fork's first pack) and
fails without. Not GPT-NeoX's other keys: ``args`` is optional (checked when present), and its RNG keys
include its model-parallel CUDA RNG tracker's states, which this trainer has none of (GPT-NeoX resumes
such a checkpoint with ``no_load_rng``). ``latest`` is written after
every rank has saved, under a temporary name renamed into place: a run killed while saving leaves
``latest`` naming the previous, complete checkpoint. ``keep_last_n_checkpoints`` deletes the oldest
``global_stepN`` folders after a save, as GPT-NeoX's ``delete_old_checkpoints`` does (the workflow's
configs turn it off: retention is the workflow's).
"""

from __future__ import annotations

import os
import random
import shutil
from typing import Any

import numpy as np
import torch

from workflow_scripts.core.cli import UserError
from workflow_scripts.train.checkpoint_dirs import CheckpointLayout
from workflow_scripts.train.reference import engine as dist_engine

CLIENT_KEY = "reference_trainer"
NEOX_ITERATION = "iteration"  # GPT-NeoX's key of the global step (checkpointing.py, save_ds_checkpoint)


class CheckpointError(UserError, ValueError):
    """A checkpoint folder that does not fit this pack's config; the message says which and why."""


def step_of(layout: CheckpointLayout, tag: str) -> int:
    step = layout.step(tag)
    if step is None:
        raise CheckpointError(f"{tag!r} is not a checkpoint name of {layout.trainer} ({layout.tag(0)}...)")
    return step


def latest_step(layout: CheckpointLayout, directory: str | None) -> int | None:
    """The global step the tracker names in ``directory`` (None when there is none)."""
    return layout.latest(directory) if directory else None


def delete_oldest(layout: CheckpointLayout, directory: str, keep: int) -> list[str]:
    """GPT-NeoX's ``keep_last_n_checkpoints``: all but the newest ``keep`` checkpoint folders deleted."""
    steps = layout.steps(directory)
    doomed = [layout.path(directory, s) for s in steps[: max(0, len(steps) - keep)]]
    for path in doomed:
        shutil.rmtree(path, ignore_errors=True)
    return doomed


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


def save(
    layout: CheckpointLayout, engine: Any, directory: str, step: int, state: dict[str, Any], main: bool
) -> str:
    """Save the checkpoint of ``step`` (every rank), then point the tracker at it (rank 0); its path."""
    tag = layout.tag(step)
    client = {CLIENT_KEY: state} | ({NEOX_ITERATION: step} if layout.trainer == "neox" else {})
    engine.save_checkpoint(directory, tag=tag, client_state=client, save_latest=False)
    dist_engine.barrier()
    if main:
        layout.set_latest(directory, step)
    dist_engine.barrier()
    return os.path.join(directory, tag)


def neox_weights(path: str, rank: int = 0) -> dict[str, torch.Tensor]:
    """Tensor-parallel rank ``rank``'s weights of a GPT-NeoX checkpoint folder under the sequential names:
    ``mp_rank_XX_model_states.pt``'s ``module``, or, for a pipeline checkpoint (``module`` None), its
    ``layer_II-model_XX-model_states.pt`` files."""
    states = torch.load(os.path.join(path, f"mp_rank_{rank:02d}_model_states.pt"), map_location="cpu",
                        weights_only=False, mmap=True)  # fmt: skip
    if states.get("module") is not None:
        return states["module"]
    weights: dict[str, torch.Tensor] = {}
    suffix = f"-model_{rank:02d}-model_states.pt"
    for file in sorted(f for f in os.listdir(path) if f.startswith("layer_") and f.endswith(suffix)):
        index = int(file[len("layer_") :].split("-")[0])
        layer = torch.load(os.path.join(path, file), map_location="cpu", weights_only=True, mmap=True)
        weights.update({f"sequential.{index}.{key}": tensor for key, tensor in layer.items()})
    if not weights:
        raise CheckpointError(f"{path}: no module in mp_rank_{rank:02d}_model_states.pt and no layer files")
    return weights


def load(
    layout: CheckpointLayout, engine: Any, directory: str, step: int, weights_only: bool
) -> dict[str, Any] | None:
    """Load the checkpoint of ``step``: everything, or the weights only (a fine-tuning start, GPT-NeoX's
    sequential or pipeline files: an imported model); return the trainer state saved with it (None for a
    checkpoint made by another trainer). Weights load strictly: a shape or name the model lacks fails."""
    folder = layout.path(directory, step)
    if weights_only and os.path.isfile(os.path.join(folder, "layer_00-model_00-model_states.pt")):
        engine.module.load_state_dict(neox_weights(folder), strict=True)
        return None
    path, client = engine.load_checkpoint(
        directory,
        tag=layout.tag(step),
        load_module_only=weights_only,
        load_optimizer_states=not weights_only,
        load_lr_scheduler_states=False,
    )
    if path is None:
        raise CheckpointError(f"{layout.path(directory, step)}: DeepSpeed could not load it")
    return (client or {}).get(CLIENT_KEY)
