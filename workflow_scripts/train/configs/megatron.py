"""Megatron-LM's arguments: the base arguments file read, the model arguments of ``train.init_from.hf``
(``hf_model_args``), the computed keys under Megatron-LM's names (held-out blends weighted), the run's
length as ``--train-samples`` and the pack boundaries as ``--phase-transition-iterations``,
``--exit-duration-in-mins``, ``--exit-signal-handler`` and ``--ckpt-format torch_dist``, written one
``--flag value`` a line; the LR schedule checked to be the same in every pack (``check_scheduler``); and the
file expanded into the argv of ``pretrain_gpt.py`` (``argv``), which reads no arguments file."""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Collection
from typing import Any

from workflow_scripts.core import schedule
from workflow_scripts.datapacks.plan import Plan
from workflow_scripts.tokens.kinds import TokenizerFiles
from workflow_scripts.train.configs.checks import ConfigError
from workflow_scripts.train.configs.keys import Keys
from workflow_scripts.train.hf import config as hf_config
from workflow_scripts.train.hf.start import read_config
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
# Megatron-LM's arguments (argparse dests) for every LLaMA-shaped model. As read_base reads a file, True is
# "the flag given": add_bias_linear is --disable-bias-linear (store_false). The False ones are flags a LLaMA
# must not have (a base file giving one stops the config).
LLAMA_FIXED = {
    "position_embedding_type": "rope",
    "rotary_percent": 1.0,
    "rotary_interleaved": False,  # rotate-half, as Hugging Face's LLaMA
    "use_rope_scaling": False,
    "normalization": "RMSNorm",
    "layernorm_zero_centered_gamma": False,
    "swiglu": True,
    "add_bias_linear": True,
    "add_qkv_bias": False,
    "qk_layernorm": False,
    "apply_residual_connection_post_layernorm": False,
    "group_query_attention": True,  # with as many groups as heads, plain multi-head attention
}
CKPT_FORMAT = "torch_dist"  # Megatron-LM's default, what hf-import writes and hf-export reads


def hf_model_args(base: dict[str, Any], hf_dir: str, base_path: str, seq_length: int) -> dict[str, Any]:
    """Megatron-LM's model arguments of ``train.init_from.hf``'s ``config.json`` (the shapes GPT-NeoX's
    mapping carries over exactly, ``hf.config``); an argument the base file sets to another value is an
    error naming both. ``--ffn-hidden-size`` with ``--swiglu`` is one half of the gated projection:
    Hugging Face's ``intermediate_size``."""
    config = read_config(hf_dir)
    try:
        neox = hf_config.neox_model_keys(config)
    except hf_config.UnsupportedModel as error:
        raise ConfigError(f"train.init_from.hf: {hf_dir}/config.json: {error}") from None
    model = LLAMA_FIXED | {
        "num_layers": neox["num_layers"],
        "hidden_size": neox["hidden_size"],
        "ffn_hidden_size": int(config["intermediate_size"]),
        "num_attention_heads": neox["num_attention_heads"],
        "num_query_groups": neox["num_kv_heads"],
        "rotary_base": neox["rotary_emb_base"],
        "layernorm_epsilon": neox["rms_norm_epsilon"],
        "max_position_embeddings": neox["max_position_embeddings"],
        "untie_embeddings_and_output_weights": neox["no_weight_tying"],
    }
    for key, value in model.items():
        if key in base and base[key] != value:
            raise ConfigError(
                f"{base_path}: {_shown(key, base[key])}, but the model {hf_dir}/config.json gives "
                f"{_shown(key, value)} (train.init_from.hf): remove the flag from the base file, or start "
                "from another model"
            )
    if seq_length > model["max_position_embeddings"]:
        raise ConfigError(
            f"training.seq_length {seq_length} is longer than the model's max_position_embeddings "
            f"{model['max_position_embeddings']} ({hf_dir}/config.json)"
        )
    return model


def _shown(key: str, value: Any) -> str:
    """An argument as a file gives it: ``--flag value``, ``--flag`` (given) or ``no --flag``."""
    if isinstance(value, bool):
        return flag_of(key) if value else f"no {flag_of(key)}"
    return f"{flag_of(key)} {value}"


NEOX_ONLY = ("train_data_weights", "iteration_offset", "extra_save_iters")
# Held-out blends as Megatron-LM reads them: weighted (``W1 PATH1 W2 PATH2 ...``), or its builder sizes an
# unweighted blend to one epoch of each prefix, not to the samples evaluation asks (it then runs out).
WEIGHTED = {"valid_data_paths": "valid_data_weights", "test_data_paths": "test_data_weights"}


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
        if key in NEOX_ONLY or key in WEIGHTED.values() or key in ("keep_last_n_checkpoints", "train_iters"):
            continue
        if key in WEIGHTED:
            value = weighted(value, keys.values.get(WEIGHTED[key]))
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
    args["ckpt_format"] = checkpoint_format(base, train)
    args["data_cache_path"] = train.data_cache_dir or args.get("data_cache_path")  # train_data_cache fills it
    return args


def weighted(paths: list[str], weights: list[float] | None) -> list[Any]:
    """A blend as Megatron-LM's ``get_blend_from_list`` reads it with weights: ``W1 PATH1 W2 PATH2 ...``
    (each weight 1 where the keys give none)."""
    weights = list(weights or [1.0] * len(paths))
    return [item for pair in zip(weights, paths, strict=True) for item in pair]


def checkpoint_format(base: dict[str, Any], train: TrainSettings) -> str:
    """``--ckpt-format``: ``torch_dist`` unless the base file names another, which a run with Hugging Face
    models in or out refuses (``hf-import`` writes and ``hf-export`` reads ``torch_dist`` only)."""
    given = base.get("ckpt_format", CKPT_FORMAT)
    if given != CKPT_FORMAT and (train.init_hf or train.export_packs or train.export_milestones):
        raise ConfigError(
            f"--ckpt-format {given}: train.init_from.hf and train.export read and write Megatron-LM's "
            f"{CKPT_FORMAT} checkpoints only (its default, resharded on load); remove the flag"
        )
    return str(given)


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


SCHEDULER_ARGS = {  # what get_optimizer_param_scheduler reads, batch aside -> parse_args' default, type
    "lr": (None, float),
    "min_lr": (0.0, float),
    "lr_decay_style": ("linear", str),
    "lr_decay_samples": (None, int),
    "lr_warmup_fraction": (None, float),
    "lr_warmup_samples": (0, int),
    "lr_warmup_init": (0.0, float),
    "lr_wsd_decay_style": ("exponential", str),
    "lr_wsd_decay_samples": (None, int),
    "weight_decay": (0.01, float),
    "start_weight_decay": (None, float),
    "end_weight_decay": (None, float),
    "weight_decay_incr_style": ("constant", str),
    "train_samples": (None, int),
    "train_iters": (None, int),
    "lr_decay_iters": (None, int),
    "lr_warmup_iters": (0, int),
    "lr_wsd_decay_iters": (None, int),
}
SCHEDULER = {  # OptimizerParamScheduler.state_dict's keys -> the name load_state_dict asserts with
    "max_lr": "learning rate",
    "min_lr": "minimum learning rate",
    "lr_warmup_steps": "warmup iterations",
    "lr_decay_steps": "total number of iterations",
    "lr_decay_style": "learning rate decay style",
    "start_wd": "start weight decay",
    "end_wd": "end weight decay",
    "wd_incr_steps": "total number of weight decay iterations",
    "wd_incr_style": "weight decay incr style",
}
SCHEDULER_FROM_ARGS = ("override_opt_param_scheduler", "use_checkpoint_opt_param_scheduler")


def scheduler_args(args: dict[str, Any]) -> dict[str, Any]:
    """``SCHEDULER_ARGS`` as ``parse_args`` + ``validate_args`` leave them: a flag left out is its default,
    a value is of the flag's type, and with the constant weight-decay increment the start and end weight
    decay are ``--weight-decay`` (given, ``validate_args`` asserts; the other styles need both)."""
    values = {}
    for dest, (default, kind) in SCHEDULER_ARGS.items():
        value = args.get(dest)
        values[dest] = default if value is None else kind(value)
    unit, other = ("samples", "iters") if values["train_samples"] else ("iters", "samples")
    refused = [(d, f"--train-{unit}") for d in (f"lr_decay_{other}", f"lr_warmup_{other}") if values[d]]
    if values[f"lr_warmup_{unit}"] and values["lr_warmup_fraction"] is not None:
        refused.append((f"lr_warmup_{unit}", "--lr-warmup-fraction"))
    if refused:
        dest, beside = refused[0]
        raise ConfigError(
            f"{flag_of(dest)} with {beside}: Megatron-LM's validate_args asserts that the schedule is "
            f"counted in {unit} and its warmup given once"
        )
    style, ends = values["weight_decay_incr_style"], ("start_weight_decay", "end_weight_decay")
    given = [flag_of(k) for k in ends if values[k] is not None]
    if style == "constant" and given:
        raise ConfigError(
            f"{' and '.join(given)} with --weight-decay-incr-style constant: Megatron-LM's validate_args "
            "asserts they are not given (--weight-decay is used throughout)"
        )
    if style != "constant" and len(given) < 2:
        raise ConfigError(
            f"--weight-decay-incr-style {style} needs --start-weight-decay and --end-weight-decay "
            "(Megatron-LM's validate_args asserts both are given)"
        )
    if style == "constant":
        values["start_weight_decay"] = values["end_weight_decay"] = values["weight_decay"]
    return values


def scheduler_state(args: dict[str, Any], batch: int) -> dict[str, Any]:
    """The ``OptimizerParamScheduler`` that ``training.get_optimizer_param_scheduler`` builds from the
    arguments for a global batch of ``batch`` samples: its ``state_dict`` values (``SCHEDULER``, its steps
    counted in samples) and those it takes from the arguments alone (``init_lr``, ``wsd_decay_steps``,
    ``lr_wsd_decay_style``)."""
    a = scheduler_args(args)
    if a["train_iters"]:  # iteration-based: the iteration counts x the global batch
        decay = (a["train_iters"] if a["lr_decay_iters"] is None else a["lr_decay_iters"]) * batch
        wd_steps = a["train_iters"] * batch
        wsd = None if a["lr_wsd_decay_iters"] is None else a["lr_wsd_decay_iters"] * batch
        warmup = a["lr_warmup_iters"] * batch
    else:  # sample-based
        decay = a["train_samples"] if a["lr_decay_samples"] is None else a["lr_decay_samples"]
        wd_steps, wsd, warmup = a["train_samples"], a["lr_wsd_decay_samples"], a["lr_warmup_samples"]
    if a["lr_warmup_fraction"] is not None:
        warmup = a["lr_warmup_fraction"] * decay
    return {
        "max_lr": a["lr"],
        "min_lr": a["min_lr"],
        "lr_warmup_steps": warmup,
        "lr_decay_steps": decay,
        "lr_decay_style": a["lr_decay_style"],
        "start_wd": a["start_weight_decay"],
        "end_wd": a["end_weight_decay"],
        "wd_incr_steps": wd_steps,
        "wd_incr_style": a["weight_decay_incr_style"],
        "init_lr": a["lr_warmup_init"],
        "wsd_decay_steps": wsd,
        "lr_wsd_decay_style": a["lr_wsd_decay_style"],
    }


def check_scheduler(saved: dict[str, Any], resumed: dict[str, Any], saver: str, pack: str) -> None:
    """Pack ``pack`` resumes from the checkpoint pack ``saver`` ended with: Megatron-LM's
    ``OptimizerParamScheduler.load_state_dict`` asserts that every value of the schedule it was built with
    matches the checkpoint's, unless ``--override-opt-param-scheduler`` (this pack's values win) or
    ``--use-checkpoint-opt-param-scheduler`` (the checkpoint's win). Without either, the values both packs'
    arguments make (``scheduler_state``: a flag left out is Megatron-LM's default) must be the same."""
    if any(resumed.get(key) for key in SCHEDULER_FROM_ARGS):
        return
    before = scheduler_state(saved, int(saved["global_batch_size"]))
    after = scheduler_state(resumed, int(resumed["global_batch_size"]))
    differ = [key for key in SCHEDULER if before[key] != after[key]]
    if differ:
        given = "; ".join(f"{key} {before[key]} in {saver}, {after[key]} in {pack}" for key in differ)
        raise ConfigError(
            f"pack {pack} resumes from {saver}'s last checkpoint, but its learning-rate schedule differs "
            f"({given}): Megatron-LM's OptimizerParamScheduler would assert that the class input value "
            f"and the checkpoint value for {SCHEDULER[differ[0]]} do not match. Give every pack the same "
            "schedule (train.first_pack, train.later_packs, train.phase_overrides), or add "
            "--override-opt-param-scheduler (this pack's values) or --use-checkpoint-opt-param-scheduler "
            "(the checkpoint's) to the later pack's keys"
        )


# Left out of an evaluation's argv: --finetune (the checkpoint is the run's own, its iteration kept), the
# phase transitions (Megatron-LM finds no phase after the run's last iteration) and the training data: with
# --skip-train, get_train_valid_test_num_samples still sizes a training dataset of the whole run's
# --train-samples over the pack (a multi-epoch index built at every evaluation, then unused); without a
# training blend BlendedMegatronDatasetBuilder builds none, and the validation and test sets are the same.
EVALUATION_ONLY_DROPPED = ("--finetune", "--phase-transition-iterations", "--train-data-path")


def argv(path: str, evaluation: bool = False) -> list[str]:
    """The arguments file as ``pretrain_gpt.py``'s argv (comments dropped; a launch's ``{args}``).
    ``evaluation``: for a run's own checkpoint, without ``--finetune`` (its iteration is kept), the phase
    transitions (Megatron-LM finds no phase after the run's last iteration, and evaluating has none) and
    ``--train-data-path`` (evaluating reads no training data: no training index is built)."""
    with open(path, encoding="utf-8") as f:
        words = shlex.split(f.read(), comments=True)
    return without(words, EVALUATION_ONLY_DROPPED) if evaluation else words


def without(words: list[str], flags: Collection[str]) -> list[str]:
    """An argv without ``flags`` and their values."""
    kept: list[str] = []
    dropping = False
    for word in words:
        if word.startswith("--"):
            dropping = word in flags
        if not dropping:
            kept.append(word)
    return kept
