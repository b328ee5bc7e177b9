"""Megatron-LM's arguments: the base arguments file read, the computed keys under Megatron-LM's names, the
run's length as ``--train-samples`` and the pack boundaries as ``--phase-transition-iterations``,
``--exit-duration-in-mins`` and ``--exit-signal-handler``, written one ``--flag value`` a line; the LR
schedule checked to be the same in every pack (``check_scheduler``); and the file expanded into the argv
of ``pretrain_gpt.py`` (``argv``), which reads no arguments file."""

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
    and exits there. Its phases are counted in samples (``get_train_valid_test_num_samples``: a phase's
    dataset is the samples between two transitions, the last one ending at ``--train-samples``), so every
    pack's arguments name the whole run's samples (``update_train_iters`` makes that the run's last global
    step; the LR schedule decays over it unless ``--lr-decay-samples`` says otherwise, the same in every
    pack, as ``OptimizerParamScheduler`` wants on a resume), all pack boundaries, and the pack's own data
    path. ``--train-iters`` is never written: beside ``--train-samples`` ``validate_args`` refuses it.
    """
    args = dict(base)
    for key, value in keys.values.items():
        if key in NEOX_ONLY or key in ("keep_last_n_checkpoints", "train_iters"):
            continue
        args[MEGATRON_NAMES.get(key, key)] = value
    args.pop("train_iters", None)
    start = schedule.start_offset(train.finetune_from, train.trainer)
    last = plan.packs[-1]
    args["train_samples"] = (start + last.iteration_offset + last.train_iters) * plan.global_batch_size
    args["tokenizer_type"] = TRAINER_TOKENIZERS[tokenizer.kind, "megatron"]
    if tokenizer.kind == "hf":  # AutoTokenizer reads the folder
        args["tokenizer_model"] = os.path.dirname(args["tokenizer_model"]) or "."
    elif tokenizer.kind == "gpt2":  # --vocab-file and --merge-file
        args["vocab_file"] = args.pop("tokenizer_model")
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


SCHEDULER = {  # OptimizerParamScheduler.load_state_dict's names -> the arguments that make the value
    "learning rate": ("lr",),
    "minimum learning rate": ("min_lr",),
    "warmup iterations": ("lr_warmup_fraction", "lr_warmup_samples", "lr_decay_samples", "train_samples"),
    "total number of iterations": ("lr_decay_samples", "train_samples"),
    "learning rate decay style": ("lr_decay_style",),
    "start weight decay": ("start_weight_decay", "weight_decay"),
    "end weight decay": ("end_weight_decay", "weight_decay"),
    "total number of weight decay iterations": ("train_samples",),
    "weight decay incr style": ("weight_decay_incr_style",),
}
SCHEDULER_FROM_ARGS = ("override_opt_param_scheduler", "use_checkpoint_opt_param_scheduler")


def check_scheduler(saved: dict[str, Any], resumed: dict[str, Any], saver: str, pack: str) -> None:
    """Pack ``pack`` resumes from the checkpoint pack ``saver`` ended with: Megatron-LM's
    ``OptimizerParamScheduler.load_state_dict`` asserts that every value of the schedule it was built with
    matches the checkpoint's, unless ``--override-opt-param-scheduler`` (this pack's values win) or
    ``--use-checkpoint-opt-param-scheduler`` (the checkpoint's win). Without either, the arguments behind
    them must be the same in both packs."""
    if any(resumed.get(key) for key in SCHEDULER_FROM_ARGS):
        return
    for name, keys in SCHEDULER.items():
        differ = [k for k in keys if saved.get(k) != resumed.get(k)]
        if differ:
            given = "; ".join(
                f"{flag_of(k)} {saved.get(k)} in {saver}, {resumed.get(k)} in {pack}" for k in differ
            )
            raise ConfigError(
                f"pack {pack} resumes from {saver}'s last checkpoint, but its learning-rate schedule differs "
                f"({given}): Megatron-LM's OptimizerParamScheduler would assert that the class input value "
                f"and the checkpoint value for {name} do not match. Give every pack the same schedule "
                "(train.first_pack, train.later_packs, train.phase_overrides), or add "
                "--override-opt-param-scheduler (this pack's values) or --use-checkpoint-opt-param-scheduler "
                "(the checkpoint's) to the later pack's keys"
            )


EVALUATION_ONLY_DROPPED = ("--finetune", "--phase-transition-iterations")


def argv(path: str, evaluation: bool = False) -> list[str]:
    """The arguments file as ``pretrain_gpt.py``'s argv (comments dropped; a launch's ``{args}``).
    ``evaluation``: for a run's own checkpoint, without ``--finetune`` (its iteration is kept) and the phase
    transitions (Megatron-LM finds no phase after the run's last iteration, and evaluating has none)."""
    with open(path, encoding="utf-8") as f:
        words = shlex.split(f.read(), comments=True)
    if not evaluation:
        return words
    kept: list[str] = []
    dropping = False
    for word in words:
        if word.startswith("--"):
            dropping = word in EVALUATION_ONLY_DROPPED
        if not dropping:
            kept.append(word)
    return kept
