"""A Megatron-LM arguments file (``.args``) read as Megatron-LM's ``parse_args`` would (an unknown flag is
refused) and mapped onto GPT-NeoX's keys for the same run: ``--train-iters`` is the global step the pack ends
at and the pack starts at the last ``--phase-transition-iterations`` before it; ``--exit-interval`` counts
global iterations; without ``--exit-signal-handler`` a signal stops the run unsaved, and with it only
``--exit-signal`` (SIGTERM unless given) saves. Megatron-LM's tokenizer classes are read as GPT-NeoX's.
"""

from __future__ import annotations

import shlex
import signal
from typing import Any

from workflow_scripts.train import lint
from workflow_scripts.train.reference.run_config import ConfigError

MEGATRON_TO_NEOX = {  # Megatron-LM dests the reference implements -> the GPT-NeoX key it reads them as
    "micro_batch_size": "train_micro_batch_size_per_gpu",
    "global_batch_size": "train_batch_size",
    "train_data_path": "train_data_paths",
    "valid_data_path": "valid_data_paths",
    "tokenizer_model": "vocab_file",
    "save_interval": "checkpoint_factor",
    "clip_grad": "gradient_clipping",
    "lr_warmup_fraction": "warmup",
    "override_opt_param_scheduler": "override_lr_scheduler",
    "tensor_model_parallel_size": "model_parallel_size",
    "pipeline_model_parallel_size": "pipe_parallel_size",
    "norm_epsilon": "layernorm_epsilon",
}
MEGATRON_OWN = {  # read by the Megatron mapping itself
    "lr",
    "adam_beta1",
    "adam_beta2",
    "adam_eps",
    "bf16",
    "fp16",
    "untie_embeddings_and_output_weights",
    "phase_transition_iterations",
    "exit_signal_handler",
    "exit_signal",
}
MEGATRON_TOKENIZERS = {  # Megatron-LM's tokenizer_type -> the GPT-NeoX one the reference reads it as
    "GPTSentencePieceTokenizer": "SPMTokenizer",
    "HuggingFaceTokenizer": "HFTokenizer",
    "GPT2BPETokenizer": "GPT2BPETokenizer",
}


def read_megatron(path: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A Megatron-LM arguments file as (the GPT-NeoX keys it maps to, the Megatron-only settings)."""
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
    for key in ("train_data_paths", "valid_data_paths"):
        if key in raw and not isinstance(raw[key], list):
            raw[key] = [raw[key]]
    raw["optimizer"] = {
        "type": "Adam",
        "params": {
            "lr": given.get("lr"),
            "betas": [float(given.get("adam_beta1", 0.9)), float(given.get("adam_beta2", 0.999))],
            "eps": float(given.get("adam_eps", 1e-8)),
        },
    }
    raw["precision"] = "bf16" if given.get("bf16") else "fp16" if given.get("fp16") else "fp32"
    raw["no_weight_tying"] = bool(given.get("untie_embeddings_and_output_weights"))
    raw.setdefault("lr_decay_style", "linear")
    raw.setdefault("warmup", 0.0)
    transitions = tuple(
        sorted(int(t) for t in str(given.get("phase_transition_iterations") or "").split(",") if t)
    )
    end = int(given.get("train_iters") or 0)
    offset = max([t for t in transitions if t < end], default=0)
    raw["iteration_offset"], raw["train_iters"] = offset, end - offset
    exit_signal = given.get("exit_signal", "SIGTERM")
    exit_signal = signal.Signals[exit_signal] if isinstance(exit_signal, str) else signal.Signals(exit_signal)
    megatron = {
        "phase_transitions": transitions,
        "save_signals": (int(exit_signal),) if given.get("exit_signal_handler") else (),
        "tokenizer_type": given.get("tokenizer_type"),
    }
    return raw, megatron


def neox_tokenizer(given: Any) -> str:
    """The GPT-NeoX ``tokenizer_type`` the reference reads Megatron-LM's ``--tokenizer-type`` as."""
    name = str(given)
    if name not in MEGATRON_TOKENIZERS:
        known = ", ".join(MEGATRON_TOKENIZERS)
        raise ConfigError(f"--tokenizer-type {name}: the reference reads {known}")
    return MEGATRON_TOKENIZERS[name]
