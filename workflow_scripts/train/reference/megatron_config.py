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
The validation blend is Megatron-LM's (``run_config.MegatronValidation``: its sizes, ``--mid-level-dataset-
surplus``, the running ``consumed_valid_samples``). A flag that makes Megatron-LM compute another loss,
gradient, optimizer step or sample order than the reference's (``REFUSED``) is refused with the reason.
"""

from __future__ import annotations

import shlex
import signal
from typing import Any

from workflow_scripts.train import checkpoint_dirs, lint
from workflow_scripts.train.configs import checks
from workflow_scripts.train.configs.megatron import SCHEDULER_ARGS, SCHEDULER_FROM_ARGS, scheduler_args
from workflow_scripts.train.reference.megatron_model import MODEL_FLAGS, model_keys
from workflow_scripts.train.reference.run_config import ConfigError, MegatronValidation

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
    "mid_level_dataset_surplus",
    "optimizer",
    "dataloader_type",
    "eval_micro_batch_size",
    "eval_global_batch_size",
}
# dest -> (the values the reference computes as Megatron-LM does, None: none but the flag's absence; why not)
REFUSED: dict[str, tuple[tuple[Any, ...] | None, str]] = {
    "optimizer": (
        ("adam",),
        "the reference's optimizer is Adam, decoupled weight decay (torch's AdamW, Megatron-LM's default)",
    ),
    "dataloader_type": (
        ("single",),
        "the reference reads the samples in order from the consumed samples (MegatronPretrainingSampler)",
    ),
    "calculate_per_token_loss": (
        None,
        "Megatron-LM then weights each micro batch's gradient by its tokens; the reference averages the "
        "micro batches' mean losses",
    ),
    "eod_mask_loss": (
        None,
        "Megatron-LM then leaves each end of document out of the loss; the reference counts every target",
    ),
    "full_validation": (
        None,
        "the reference evaluates --eval-iters batches from consumed_valid_samples, not the whole set",
    ),
    "multiple_validation_sets": (None, "the reference evaluates one blend of the validation paths"),
    "start_eval_at_iter": (None, "the reference evaluates at every --eval-interval iterations"),
    "rampup_batch_size": (None, "the reference trains one global batch size throughout"),
    "sft": (None, "Megatron-LM's SFT datasets and per-micro-batch evaluation are not the reference's"),
    "mock_data": (None, "the reference reads the data paths"),
    "data_path": (None, "the reference reads --train-data-path and --valid-data-path (no --split)"),
    "split": (None, "the reference reads --train-data-path and --valid-data-path (no --split)"),
    "data_args_path": (None, "the reference reads --train-data-path and --valid-data-path"),
    "per_split_data_args_path": (None, "the reference reads --train-data-path and --valid-data-path"),
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
    refuse(path, given)
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
    run_iters = run_length(given)
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
        "validation": validation(given, run_iters, evaluation),
    }
    return raw, megatron


def refuse(path: str, given: dict[str, Any]) -> None:
    """A ConfigError naming the first flag of ``REFUSED`` given with a value the reference does not
    compute as Megatron-LM; also an evaluation batch other than the training batch."""
    for dest, (same, why) in REFUSED.items():
        if dest in given and (same is None or given[dest] not in same):
            shown = "" if given[dest] is True else f" {given[dest]}"
            raise ConfigError(f"{path}: {lint.flag_of(dest)}{shown}: {why}")
    for dest, train in (("eval_micro_batch_size", "micro_batch_size"),
                        ("eval_global_batch_size", "global_batch_size")):  # fmt: skip
        if dest in given and given[dest] != given.get(train):
            raise ConfigError(
                f"{path}: {lint.flag_of(dest)} {given[dest]}: the reference evaluates batches of "
                f"{lint.flag_of(train)}"
            )


def run_length(given: dict[str, Any]) -> int:
    """Megatron-LM's ``args.train_iters`` (the whole run's: ``--train-samples`` / global batch)."""
    iters, samples = given.get("train_iters"), given.get("train_samples")
    return int(iters) if iters else int(samples or 0) // int(given.get("global_batch_size") or 1)


def validation(given: dict[str, Any], run_iters: int, evaluation: bool) -> MegatronValidation:
    """Megatron-LM's validation blend for the run (``evaluation``: ``--skip-train``'s)."""
    batch = int(given.get("global_batch_size") or 1)
    eval_iters, interval = int(given.get("eval_iters", 100)), int(given.get("eval_interval", 1000))
    points = 1 if evaluation else run_iters // interval + 1
    values = given.get("valid_data_path", [])
    _, weights = blend(values if isinstance(values, list) else [values])
    return MegatronValidation(
        samples=points * eval_iters * batch,
        weights=weights,
        surplus=float(given.get("mid_level_dataset_surplus", 0.005)),
        by_iterations=bool(given.get("train_iters")),
    )


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
