"""A Megatron-LM arguments file (``.args``) read as Megatron-LM's ``parse_args`` would (an unknown flag is
refused) and mapped onto GPT-NeoX's keys for the same run. The run is ``--train-iters`` iterations, or
``--train-samples`` / global batch (never both: ``validate_args``); ``--phase-transition-iterations`` need
``--train-samples`` (Megatron-LM ends its last phase there; without it its dataset sizes fail with a
TypeError). The phase trained is the one the run's iteration falls in, as Megatron-LM picks it: from the
last transition at or before the iteration it resumes at (``load``'s tracker; 0 for ``--finetune`` or a
fresh run) to the next one, on the file's data path, so a run resumed at a transition trains the next phase
(train-segment never starts one there); ``evaluation`` reads it as train-eval's argv, without phases.
``--exit-interval`` counts global iterations; without ``--exit-signal-handler`` a signal stops the run
unsaved, and with it only ``--exit-signal`` (SIGTERM unless given) saves. The LR and weight decay follow
Megatron-LM's ``OptimizerParamScheduler`` over the whole run (``lr.MegatronSchedule``, from the scheduler's
flags, ``configs.megatron.SCHEDULER_ARGS``), not GPT-NeoX's per-pack schedule; its values are saved in each
checkpoint and checked on a resume as Megatron-LM checks them, unless a scheduler flag says whose win.
Megatron-LM's tokenizer classes are read as GPT-NeoX's; the model's flags as ``megatron_model`` reads them.
"""

from __future__ import annotations

import shlex
import signal
from typing import Any

from workflow_scripts.train import checkpoint_dirs, lint
from workflow_scripts.train.configs import checks
from workflow_scripts.train.configs.megatron import SCHEDULER_ARGS, SCHEDULER_FROM_ARGS, scheduler_args
from workflow_scripts.train.reference.megatron_model import MODEL_FLAGS, model_keys
from workflow_scripts.train.reference.run_config import ConfigError

MEGATRON_TO_NEOX = {  # Megatron-LM dests the reference implements -> the GPT-NeoX key it reads them as
    "micro_batch_size": "train_micro_batch_size_per_gpu",
    "global_batch_size": "train_batch_size",
    "train_data_path": "train_data_paths",
    "valid_data_path": "valid_data_paths",
    "tokenizer_model": "vocab_file",
    "save_interval": "checkpoint_factor",
    "clip_grad": "gradient_clipping",
    "tensor_model_parallel_size": "model_parallel_size",
    "pipeline_model_parallel_size": "pipe_parallel_size",
}
MEGATRON_OWN = {  # read by the Megatron mapping itself
    *SCHEDULER_ARGS,
    *SCHEDULER_FROM_ARGS,
    "adam_beta1",
    "adam_beta2",
    "adam_eps",
    "bf16",
    "fp16",
    *MODEL_FLAGS,
    "phase_transition_iterations",
    "exit_signal_handler",
    "exit_signal",
}
MEGATRON_TOKENIZERS = {  # Megatron-LM's tokenizer_type -> the GPT-NeoX one the reference reads it as
    "GPTSentencePieceTokenizer": "SPMTokenizer",
    "HuggingFaceTokenizer": "HFTokenizer",
    "GPT2BPETokenizer": "GPT2BPETokenizer",
}


def read_megatron(
    path: str, evaluation: bool = False, pack_phase: int | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A Megatron-LM arguments file as (the GPT-NeoX keys it maps to, the Megatron-only settings), its
    phase the one ``load``'s tracker is in (``evaluation``: the whole run; ``pack_phase``: that phase, 0 the
    first, as lineage reads a pack's file whatever its checkpoints)."""
    with open(path, encoding="utf-8") as f:
        tokens = shlex.split(f.read(), comments=True)
    given: dict[str, Any] = {}
    dest = None
    for token in tokens:
        if token.startswith("--"):
            dest = lint.dest_of(token)
            if dest is None:
                raise ConfigError(f"{path}: Megatron-LM's parse_args: unrecognized arguments: {token}")
            given[dest] = True
        elif dest is None:
            raise ConfigError(f"{path}: {token!r} is not a --flag or a flag's value")
        else:
            value: Any = token
            for kind in (int, float):
                try:
                    value = kind(token)
                    break
                except ValueError:
                    continue
            previous = given[dest]
            given[dest] = (
                value
                if previous is True
                else [*(previous if isinstance(previous, list) else [previous]), value]
            )
    raw = {MEGATRON_TO_NEOX.get(k, k): v for k, v in given.items() if k not in MEGATRON_OWN}
    for key in ("train_data_paths", "valid_data_paths", "test_data_path"):
        if key in raw:
            paths, weights = blend(raw[key] if isinstance(raw[key], list) else [raw[key]])
            raw[key] = paths
            if weights is not None and key != "test_data_path":
                raw[key.replace("_paths", "_weights")] = weights
    raw["optimizer"] = {
        "type": "Adam",
        "params": {
            "lr": given.get("lr"),
            "betas": [float(given.get("adam_beta1", 0.9)), float(given.get("adam_beta2", 0.999))],
            "eps": float(given.get("adam_eps", 1e-8)),
        },
    }
    raw["precision"] = "bf16" if given.get("bf16") else "fp16" if given.get("fp16") else "fp32"
    model, ffn_hidden_size = model_keys(path, given)
    raw |= model
    for flag in ("decoupled_lr", "decoupled_min_lr"):
        if given.get(flag) is not None:
            raise ConfigError(
                f"{path}: {lint.flag_of(flag)}: the embedding and output layers' own LR is not implemented"
            )
    try:
        scheduler_args(given)  # what validate_args asserts of them
    except checks.ConfigError as e:
        raise ConfigError(f"{path}: {e}") from e
    transitions = tuple(
        sorted(int(t) for t in str(given.get("phase_transition_iterations") or "").split(",") if t)
    )
    start = 0
    if evaluation:  # train-eval's argv: no phases, whichever checkpoint is evaluated
        transitions = ()
    elif pack_phase is not None:
        if not 0 <= pack_phase <= len(transitions):
            raise ConfigError(f"{path}: no phase {pack_phase}: it has {len(transitions) + 1}")
        start = (0, *transitions)[pack_phase]
    elif not given.get("finetune") and given.get("load"):
        start = checkpoint_dirs.MEGATRON.latest(str(given["load"])) or 0
    raw["iteration_offset"], end = phase(path, given, transitions, start)
    raw["train_iters"] = end - raw["iteration_offset"]
    exit_signal = given.get("exit_signal", "SIGTERM")
    exit_signal = signal.Signals[exit_signal] if isinstance(exit_signal, str) else signal.Signals(exit_signal)
    override, checkpoint = (bool(given.get(k)) for k in SCHEDULER_FROM_ARGS)
    if override and checkpoint:
        raise ConfigError(
            f"{path}: --override-opt-param-scheduler and --use-checkpoint-opt-param-scheduler: Megatron-LM's "
            "OptimizerParamScheduler asserts that only one says whose values win"
        )
    megatron = {
        "scheduler": {k: v for k, v in given.items() if k in SCHEDULER_ARGS},
        "scheduler_from": "override" if override else "checkpoint" if checkpoint else None,
        "phase_transitions": transitions,
        "save_signals": (int(exit_signal),) if given.get("exit_signal_handler") else (),
        "tokenizer_type": given.get("tokenizer_type"),
        "ffn_hidden_size": ffn_hidden_size,
    }
    return raw, megatron


def blend(values: list[Any]) -> tuple[list[str], list[float] | None]:
    """A ``--*-data-path`` list as Megatron-LM's ``get_blend_from_list`` reads it: ``W1 P1 W2 P2 ...`` when
    it has an even length and every other item is a number, else prefixes alone."""
    pairs = len(values) % 2 == 0 and all(isinstance(v, int | float) for v in values[::2])
    if not pairs:
        return [str(v) for v in values], None
    return [str(v) for v in values[1::2]], [float(v) for v in values[::2]]


def phase(path: str, given: dict[str, Any], transitions: tuple[int, ...], start: int) -> tuple[int, int]:
    """The global iterations (first, end) of the phase Megatron-LM trains from iteration ``start``."""
    iters, samples = given.get("train_iters"), given.get("train_samples")
    if iters and samples:
        raise ConfigError(
            f"{path}: --train-iters beside --train-samples: Megatron-LM's validate_args asserts"
        )
    if transitions and not samples:
        raise ConfigError(
            f"{path}: --phase-transition-iterations without --train-samples: Megatron-LM's "
            "get_train_valid_test_num_samples ends the last phase at --train-samples (TypeError: '<=' not "
            "supported between NoneType and int)"
        )
    if not iters and not samples:
        raise ConfigError(f"{path}: Megatron-LM needs --train-iters or --train-samples")
    end = int(iters) if iters else int(samples) // int(given.get("global_batch_size") or 1)
    bounds = (0, *transitions, end)
    later = [b for b in bounds if b > start]
    if not later:
        raise ConfigError(
            f"{path}: the run resumes at iteration {start}, where its last phase ended ({end}): Megatron-LM "
            "finds no phase after it (get_train_valid_test_num_samples: ValueError)"
        )
    return max(b for b in bounds if b <= start), min(later)


def neox_tokenizer(given: Any) -> str:
    """The GPT-NeoX ``tokenizer_type`` the reference reads Megatron-LM's ``--tokenizer-type`` as."""
    name = str(given)
    if name not in MEGATRON_TOKENIZERS:
        known = ", ".join(MEGATRON_TOKENIZERS)
        raise ConfigError(f"--tokenizer-type {name}: the reference reads {known}")
    return MEGATRON_TOKENIZERS[name]
