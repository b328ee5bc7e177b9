"""Lint a trainer config against the trainer's own argument definitions.

The key lists in ``trainer_keys/`` were extracted from the trainers' sources (GPT-NeoX
``megatron/neox_arguments/neox_args.py`` and ``deepspeed_args.py``, upstream plus the LUMI fork
tilde-nlp/llm-gpt-neox; Megatron-LM ``megatron/training/arguments.py``; the commits are in each file's
``source``), with the keys each trainer ignores or overwrites. ``errors`` stop the config; ``warnings`` are
recorded in the pack's keys file and printed.
"""

from __future__ import annotations

import difflib
import functools
import json
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

KEYS_DIR = Path(__file__).with_name("trainer_keys")
RAMPUP = ("rampup_batch_size", "step_batch_size_schedule")
ITERATION_BASED = (
    "train_iters",
    "lr_warmup_iters",
    "lr_decay_iters",
    "lr_wsd_decay_iters",
)  # Megatron-LM: not with --train-samples (validate_args), or ignored beside it (--lr-wsd-decay-iters)
HINTS = {
    "ffn_hidden_size": "GPT-NeoX calls the MLP width intermediate_size",
    "global_batch_size": "GPT-NeoX calls it train_batch_size",
    "micro_batch_size": "GPT-NeoX calls it train_micro_batch_size_per_gpu",
}


@functools.cache
def trainer_keys(trainer: str) -> dict[str, Any]:
    """The vendored key list of ``neox`` or ``megatron``."""
    return json.loads((KEYS_DIR / f"{trainer}.json").read_text(encoding="utf-8"))


@functools.cache
def megatron_flags() -> dict[str, str]:
    """Every Megatron-LM flag (``--x-y``) -> its argparse dest."""
    return {flag: dest for dest, v in trainer_keys("megatron")["keys"].items() for flag in v["flags"]}


@dataclass
class Findings:
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def _close(name: str, known: Any) -> str:
    match = difflib.get_close_matches(name, list(known), n=1, cutoff=0.8)
    return f" (did you mean {match[0]}?)" if match else ""


def lint_neox(config: dict[str, Any], upstream: bool = False) -> Findings:
    """Unknown, ignored and aliased keys, values outside their choices, keys that collide; the LUMI fork's
    own keys are errors for ``upstream`` GPT-NeoX (``train.neox``), which refuses them."""
    spec, found = trainer_keys("neox"), Findings()
    keys, dead = spec["keys"], spec["dead"]
    fork = sorted(set(config) & set(spec["fork_only"]))
    if fork and upstream:
        found.errors.extend(
            f"{key}: a key of the LUMI fork (tilde-nlp/llm-gpt-neox) only; upstream GPT-NeoX (train.neox: "
            "upstream) refuses the whole config"
            for key in fork
        )
    elif fork:
        found.warnings.append(f"{', '.join(fork)}: keys of the LUMI fork (tilde-nlp/llm-gpt-neox) only")
    for key, value in config.items():
        if key not in keys:
            hint = HINTS.get(key, "") or _close(key, keys)
            found.errors.append(
                f"{key}: not a GPT-NeoX key; GPT-NeoX refuses the whole config{hint and ': '}{hint}"
            )
            continue
        if key in dead:
            found.errors.append(f"{key}: {dead[key]}")
        choices = keys[key].get("choices")
        if choices and value is not None and value not in choices:
            found.errors.append(
                f"{key}: {value!r} is not one of {choices} (GPT-NeoX compares case-sensitively)"
            )
    for a, b, note in spec["aliases"]:
        if a in config and b in config and config[a] != config[b]:
            found.errors.append(f"{a} {config[a]!r} and {b} {config[b]!r} disagree: {note}")
    params = (config.get("optimizer") or {}).get("params") or {}
    if "weight_decay" in config and "weight_decay" in params:
        found.errors.append(
            "weight_decay is set at the top level and in optimizer.params: GPT-NeoX passes both to the "
            "optimizer (TypeError: multiple values); keep the top-level key"
        )
    if config.get("gradient_clipping", 1.0) == 1.0:
        found.warnings.append(
            "gradient_clipping 1.0 (GPT-NeoX's default) never reaches DeepSpeed, whose default is 0: no "
            "clipping in upstream GPT-NeoX (issue #1432); the LUMI fork applies it after each load"
        )
    if config.get("lr_decay_style") == "sqrt":
        missing = [
            k
            for k in ("iteration_offset", "cd_start_iter", "cd_end_iter", "start_cd_lr", "decay_pp")
            if config.get(k) is None
        ]
        if missing:
            found.errors.append(f"lr_decay_style sqrt (the LUMI fork) needs {', '.join(missing)}")
    if not upstream and fork_precision(config) == "fp32" and zero_stage(config) == 0:
        found.errors.append(
            "precision fp32 without ZeRO (zero_optimization.stage 0): the LUMI fork's load_checkpoint sets "
            "the optimizer's clip_grad whenever load is set, a first segment's too, and DeepSpeed's plain "
            "fp32 optimizer has none (AttributeError: no attribute 'clip_grad'); set precision bfloat16 "
            "(or fp16), or zero_optimization.stage 1 or more"
        )
    return found


def fork_precision(config: dict[str, Any]) -> str:
    """The precision GPT-NeoX derives (arguments.py, calculate_derived): ``fp16``/``bf16`` enabled name
    theirs, ``precision`` otherwise; any other value is fp32."""
    enabled = [
        p for p, key in (("fp16", "fp16"), ("bfloat16", "bf16")) if (config.get(key) or {}).get("enabled")
    ]
    precision = enabled[0] if enabled else config.get("precision")
    return precision if precision in ("fp16", "bfloat16") else "fp32"


def zero_stage(config: dict[str, Any]) -> int:
    """The ZeRO stage of a GPT-NeoX config (GPT-NeoX's default: 0)."""
    return int((config.get("zero_optimization") or {}).get("stage") or 0)


def lint_megatron(config: dict[str, Any]) -> Findings:
    """Unknown flags (``--ffn_hidden_size``: argparse does not turn ``_`` into ``-``), deprecated or ignored
    ones, values outside their choices, and batch ramp-up (its iterations differ from the packs')."""
    spec, found, flags = trainer_keys("megatron"), Findings(), megatron_flags()
    for key, value in config.items():
        if key.startswith("--"):
            fixed = key.replace("_", "-")
            hint = f": write {fixed}" if fixed in flags else _close(key, flags)
            found.errors.append(f"{key}: Megatron-LM rejects it (unrecognized arguments){hint}")
            continue
        if key not in spec["keys"]:
            found.errors.append(f"{key}: not a Megatron-LM argument{_close(key, spec['keys'])}")
            continue
        if key in ITERATION_BASED and value not in (0, None):
            found.errors.append(
                f"{spec['keys'][key]['flags'][0]}: the workflow sets --train-samples from the plan "
                "(Megatron-LM's phases count samples), and Megatron-LM's validate_args refuses iteration "
                "counts beside it: give the LR schedule in samples (--lr-warmup-samples, --lr-decay-samples, "
                "--lr-wsd-decay-samples) or as --lr-warmup-fraction"
            )
            continue
        if key in RAMPUP:
            found.errors.append(
                f"{spec['keys'][key]['flags'][0]}: a batch ramp-up changes the tokens each iteration reads, "
                "so the packs' single-epoch train_iters and offsets would be wrong; datapacks need a fixed "
                "global batch size (Megatron-LM's phase transitions require one too)"
            )
        elif key in spec["dead"]:
            found.errors.append(f"{spec['keys'][key]['flags'][0]}: {spec['dead'][key]}")
        choices = spec["keys"][key].get("choices")
        if isinstance(value, str) and isinstance(getattr(signal, value, None), signal.Signals):
            value = int(getattr(signal, value))  # --exit-signal SIGUSR1: Megatron-LM takes the name
        if choices and value not in choices and value is not True:
            found.errors.append(f"{spec['keys'][key]['flags'][0]}: {value!r} is not one of {choices}")
    return found


def flag_of(dest: str) -> str:
    """Megatron-LM's primary flag of an argparse dest (``--override-opt_param-scheduler`` keeps its ``_``)."""
    return trainer_keys("megatron")["keys"][dest]["flags"][0]


def dest_of(flag: str) -> str | None:
    """The argparse dest of a Megatron-LM flag, or None for a flag it does not know."""
    return megatron_flags().get(flag)
