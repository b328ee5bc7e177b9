"""Checkpoints in the format of the trainer the config is for (train/checkpoint_dirs).

GPT-NeoX: DeepSpeed's checkpoints tagged ``global_stepN`` with a ``latest`` file. Beside DeepSpeed's module
and optimizer states they carry GPT-NeoX's own ``iteration`` (the global step), which its
``load_checkpoint`` (fork and upstream) takes as the step to resume at when no ``iteration_offset`` is set
(upstream; the fork's first pack) and fails without. Not GPT-NeoX's other keys: ``args`` is optional
(checked when present), and its RNG keys include its model-parallel CUDA RNG tracker's states, which this
trainer has none of (GPT-NeoX resumes such a checkpoint with ``no_load_rng``). ``keep_last_n_checkpoints``
deletes the oldest ``global_stepN`` folders after a save, as GPT-NeoX's ``delete_old_checkpoints`` does (the
workflow's configs turn it off: retention is the workflow's).

Megatron-LM: ``iter_NNNNNNN`` folders with ``latest_checkpointed_iteration.txt``, each Megatron-LM's own
``torch_dist`` checkpoint (train/megatron_checkpoint) of the weights under Megatron-core's names
(train/hf/megatron_layout), whose common state holds what Megatron-LM's ``load_checkpoint`` reads
(``iteration``, ``args``: the model's and run's arguments, ``consumed_train_samples`` among them,
``checkpoint_version``, ``opt_param_scheduler``: its ``OptimizerParamScheduler``'s state) and this
trainer's state. The optimizer (DeepSpeed's Adam moments, and its fp32 master weights under ZeRO or bf16)
is DeepSpeed's own checkpoint of the engine in the folder's ``reference_trainer/`` (``SIDE``), which
Megatron-LM's loader does not read (it opens ``metadata.json``, the common state and the files its
``.metadata`` names). A resume loads the weights from the ``torch_dist`` files and the optimizer from
``SIDE``; a ``--finetune`` start or an evaluation the weights only, so an import
(``hf-import --trainer megatron``) or a checkpoint Megatron-LM saved is a start; a resume from a checkpoint
without ``SIDE`` (Megatron-LM's) takes its weights with a fresh optimizer. Megatron-LM resumes one of ours
with ``--no-load-optim --no-load-rng`` (or ``--finetune``): the weights at any tensor/pipeline parallel
size (its padded vocabulary must match: ``make_vocab_size_divisible_by`` x TP), the iteration and the
consumed samples; not the Adam moments (not in its distributed optimizer's sharded keys: without
``--no-load-optim`` its load fails on them), not the RNG (none saved in its layout: without
``--no-load-rng`` likewise) and, as ``--no-load-optim`` skips it, not the scheduler, which its arguments
then build afresh.

Every checkpoint carries the trainer's own state under ``reference_trainer`` (``CLIENT_KEY``): the global
and local iteration, the ``iteration_offset`` and pack it was made with, the samples consumed (the data
position), the LR schedule's state and the RNG states (Python, NumPy, torch, CUDA), so a resumed run draws
exactly what an uninterrupted one would. The tracker is written after every rank has saved, under a
temporary name renamed into place: a run killed while saving leaves it naming the previous, complete
checkpoint.
"""

from __future__ import annotations

import os
import random
import shutil
from typing import Any

import numpy as np
import torch

from workflow_scripts.core.cli import UserError
from workflow_scripts.train import checkpoint_dirs
from workflow_scripts.train.checkpoint_dirs import CheckpointLayout
from workflow_scripts.train.reference import engine as dist_engine
from workflow_scripts.train.reference.megatron_config import MEGATRON_TOKENIZERS
from workflow_scripts.train.reference.megatron_model import NORMS, POSITIONS
from workflow_scripts.train.reference.run_config import RunConfig

CLIENT_KEY = "reference_trainer"
NEOX_ITERATION = "iteration"  # GPT-NeoX's key of the global step (checkpointing.py, save_ds_checkpoint)
SIDE = CLIENT_KEY  # a Megatron-LM checkpoint's folder of DeepSpeed's engine checkpoint (the optimizer)
TORCH_DIST = "metadata.json"  # marks a torch_dist folder (check_is_distributed_checkpoint)


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
    """The RNG states in types ``torch.load(weights_only=True)`` reads (NumPy's keys as a list)."""
    name, keys, pos, has_gauss, gauss = np.random.get_state()
    state = {
        "python": random.getstate(),
        "numpy": (name, keys.tolist(), pos, has_gauss, gauss),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    name, keys, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, gauss))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def megatron_common(cfg: RunConfig, step: int, state: dict[str, Any]) -> dict[str, Any]:
    """The common state of a Megatron-LM checkpoint at global ``step``: ``import_common``'s (the model's
    shape, TP 1 / PP 1, ``no_save_optim`` and ``no_save_rng``: none of Megatron-LM's optimizer or RNG
    state is saved) with this run's iteration, consumed samples, the rest of the model's and the run's
    arguments, the ``OptimizerParamScheduler``'s state and the trainer's state."""
    from workflow_scripts.train import megatron_checkpoint

    m = cfg.model
    args = {
        "kv_channels": m.hidden_size // m.num_attention_heads,
        "swiglu": m.activation == "swiglu",
        "normalization": {v: k for k, v in NORMS.items()}[m.norm],
        "layernorm_epsilon": m.norm_epsilon,
        "position_embedding_type": {v: k for k, v in POSITIONS.items()}[m.pos_emb],
        "add_position_embedding": True,
        "rotary_base": m.rotary_emb_base,
        "rotary_percent": m.rotary_pct,
        "add_bias_linear": m.mlp_bias,
        "add_qkv_bias": m.attn_bias,
        "init_method_std": m.init_method_std,
        "seq_length": cfg.seq_length,
        "make_vocab_size_divisible_by": cfg.vocab_divisible_by,
        "tokenizer_type": {v: k for k, v in MEGATRON_TOKENIZERS.items()}[cfg.tokenizer[0]],
        "data_parallel_size": cfg.data_parallel,
        "world_size": cfg.data_parallel,
        "micro_batch_size": cfg.micro,
        "global_batch_size": cfg.batch,
        "data_parallel_random_init": False,
        "iteration": step,
        "consumed_train_samples": step * cfg.batch,
        "skipped_train_samples": 0,
        "consumed_valid_samples": state.get("consumed_valid_samples", 0),
    }
    common = megatron_checkpoint.import_common(m, **args)
    return common | {"iteration": step, "opt_param_scheduler": state["lr_schedule"], CLIENT_KEY: state}


def _save_megatron(
    cfg: RunConfig, engine: Any, folder: str, step: int, state: dict[str, Any], main: bool
) -> None:
    from workflow_scripts.train import megatron_checkpoint
    from workflow_scripts.train.hf import megatron_layout

    if os.path.islink(folder):
        raise CheckpointError(f"{folder} is a link (a fine-tune's start): the run does not save over it")
    if main:
        weights = megatron_layout.to_megatron(engine.module.state_dict(), cfg.model)
        megatron_checkpoint.save(folder, weights, megatron_common(cfg, step, state))
    dist_engine.barrier()
    engine.save_checkpoint(folder, tag=SIDE, client_state={}, save_latest=False)


def save(cfg: RunConfig, engine: Any, step: int, state: dict[str, Any], main: bool) -> str:
    """Save the checkpoint of ``step`` in ``save`` (every rank), then point the tracker at it (rank 0);
    its path."""
    layout = checkpoint_dirs.of(cfg.trainer)
    assert cfg.save is not None
    folder = layout.path(cfg.save, step)
    if cfg.trainer == "megatron":
        _save_megatron(cfg, engine, folder, step, state, main)
    else:
        client = {CLIENT_KEY: state, NEOX_ITERATION: step}
        engine.save_checkpoint(cfg.save, tag=layout.tag(step), client_state=client, save_latest=False)
    dist_engine.barrier()
    if main:
        layout.set_latest(cfg.save, step)
    dist_engine.barrier()
    return folder


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


def _load_megatron(cfg: RunConfig, engine: Any, folder: str, weights_only: bool) -> dict[str, Any] | None:
    from workflow_scripts.train import megatron_checkpoint
    from workflow_scripts.train.hf import megatron_layout

    if not os.path.isfile(os.path.join(folder, TORCH_DIST)):
        raise CheckpointError(
            f"{folder}: not a torch_dist checkpoint (no {TORCH_DIST}): the reference trainer reads "
            "Megatron-LM's torch_dist format (--ckpt-format torch_dist)"
        )
    side = os.path.join(folder, SIDE)
    resume = not weights_only and os.path.isdir(side)
    if resume:
        path, _ = engine.load_checkpoint(
            folder, tag=SIDE, load_optimizer_states=True, load_lr_scheduler_states=False
        )
        if path is None:
            raise CheckpointError(f"{side}: DeepSpeed could not load it")
    try:
        weights = megatron_layout.from_megatron(megatron_checkpoint.load_weights(folder), cfg.model)
        engine.module.load_state_dict(weights, strict=True)
    except (KeyError, RuntimeError) as e:
        raise CheckpointError(f"{folder}: its weights are not this model's: {e}") from e
    if not resume:
        return None
    return megatron_checkpoint.load_common(folder)[CLIENT_KEY]


def megatron_consumed_valid(folder: str) -> int:
    """The ``consumed_valid_samples`` a Megatron-LM checkpoint's arguments saved (0 without)."""
    from workflow_scripts.train import megatron_checkpoint

    args = megatron_checkpoint.load_common(folder).get("args")
    return int(getattr(args, "consumed_valid_samples", 0) or 0)


def load(cfg: RunConfig, engine: Any, directory: str, step: int, weights_only: bool) -> dict[str, Any] | None:
    """Load the checkpoint of ``step``: everything, or the weights only (a fine-tuning start, an evaluation;
    GPT-NeoX's sequential or pipeline files, or a ``torch_dist`` folder: an imported model); return the
    trainer state saved with it (None for the weights only, or a checkpoint made by another trainer).
    Weights load strictly: a shape or name the model lacks fails."""
    layout = checkpoint_dirs.of(cfg.trainer)
    folder = layout.path(directory, step)
    if cfg.trainer == "megatron":
        return _load_megatron(cfg, engine, folder, weights_only)
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
