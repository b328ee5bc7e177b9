"""Megatron-LM's arguments: the base arguments file read, the computed keys under Megatron-LM's names, the
pack boundaries as ``--phase-transition-iterations``, ``--exit-duration-in-mins`` and
``--exit-signal-handler``, written one ``--flag value`` a line."""

from __future__ import annotations

import os
import re
import shlex
from typing import Any

from workflow_scripts.core import schedule
from workflow_scripts.datapacks.plan import Plan
from workflow_scripts.tokens.kinds import TokenizerFiles
from workflow_scripts.train.configs.checks import ConfigError
from workflow_scripts.train.configs.keys import Keys
from workflow_scripts.train.lint import dest_of, flag_of
from workflow_scripts.train.settings import TrainSettings
from workflow_scripts.train.trainer_tokenizers import TRAINER_TOKENIZERS


def read_base(path: str) -> dict[str, Any]:
    """The base Megatron-LM arguments file as a dict (``--flag value``; a flag without value is ``True``)."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    args: dict[str, Any] = {}
    flag = None
    for token in shlex.split(text, comments=True):
        if token.startswith("--"):
            flag = dest_of(token) or token  # an unknown flag keeps its spelling, for the lint
            args[flag] = True
        elif flag is None:
            raise ConfigError(f"{path}: {token!r} is not a --flag or a flag's value")
        elif args[flag] is True:
            args[flag] = _number(token)
        else:
            previous = args[flag] if isinstance(args[flag], list) else [args[flag]]
            args[flag] = [*previous, _number(token)]
    return args


def _number(value: Any) -> Any:
    if isinstance(value, str) and re.fullmatch(r"-?\d+", value):
        return int(value)
    if isinstance(value, str) and re.fullmatch(r"-?\d+\.\d*(e-?\d+)?|-?\d+e-?\d+", value):
        return float(value)
    return value


MEGATRON_NAMES = {  # the computed keys' Megatron-LM argument names (dest)
    "train_data_paths": "train_data_path",
    "valid_data_paths": "valid_data_path",
    "test_data_paths": "test_data_path",
    "train_batch_size": "global_batch_size",
    "checkpoint_factor": "save_interval",
    "vocab_file": "tokenizer_model",
}
NEOX_ONLY = (
    "train_data_weights",
    "valid_data_weights",
    "test_data_weights",
    "iteration_offset",
    "extra_save_iters",
)


def arguments(
    base: dict[str, Any], keys: Keys, train: TrainSettings, plan: Plan, tokenizer: TokenizerFiles
) -> dict:
    """Megatron-LM arguments: the base, then the computed keys under Megatron's names.

    Megatron-LM has no ``iteration_offset``; its closest mechanism is ``--phase-transition-iterations``: the
    global iteration and the LR schedule run on, the data position restarts at each transition, and it saves
    and exits there. So every pack's arguments name all pack boundaries, ``--train-iters`` is the global step
    the pack ends at, and the data path is the pack's own.
    """
    args = dict(base)
    for key, value in keys.values.items():
        if key in NEOX_ONLY or key == "keep_last_n_checkpoints":
            continue
        args[MEGATRON_NAMES.get(key, key)] = value
    args["train_iters"] = keys.values["iteration_offset"] + keys.values["train_iters"]
    args["tokenizer_type"] = TRAINER_TOKENIZERS[tokenizer.kind, "megatron"]
    if tokenizer.kind == "hf":  # AutoTokenizer reads the folder
        args["tokenizer_model"] = os.path.dirname(args["tokenizer_model"]) or "."
    elif tokenizer.kind == "gpt2":  # --vocab-file and --merge-file
        args["vocab_file"] = args.pop("tokenizer_model")
    start = schedule.start_offset(train.finetune_from, train.trainer)
    boundaries = [start + p.iteration_offset for p in plan.packs[1:]]
    if boundaries:
        args["phase_transition_iterations"] = ",".join(map(str, boundaries))
    args["exit_duration_in_mins"] = schedule.exit_duration_minutes(
        train.time_limit_minutes, train.save_minutes
    )
    args["exit_signal_handler"] = True
    args["exit_signal"] = "SIGUSR1"  # the segment's watchdog and Slurm's --signal send USR1 (default: TERM)
    return args


def render(args: dict[str, Any]) -> str:
    """One ``--flag [value ...]`` a line (``True`` flags without value, lists space-separated)."""
    lines = []
    for key, value in args.items():
        flag = key if key.startswith("--") else flag_of(key)
        if value is True:
            lines.append(flag)
        elif value is False or value is None:
            continue
        elif isinstance(value, list):
            lines.append(shlex.join([flag, *map(str, value)]))
        else:
            lines.append(shlex.join([flag, str(value)]))
    return "\n".join(lines) + "\n"
