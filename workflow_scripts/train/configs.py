"""Per-pack trainer configs: the user's base config + the keys computed from the plan + phase overrides.

Usage::

    snakepack train-config --plan plan.json --signature signature.json --base BASE --pack P \\
        --tokenizer-model M.model --out-dir results/train [train settings...]

writes ``{out}/{P}/{P}.yml`` (GPT-NeoX) or ``{out}/{P}/{P}.args`` (Megatron-LM, one ``--flag value`` a line)
and the pack's keys file (core/train_layout.py), which lists every key the workflow set, its value and why.
Nothing is typed by hand: ``train_data_paths``, ``train_iters``, ``iteration_offset``, ``save``/``load``, the
LR keys of the first and later packs, ``checkpoint_factor`` (from ``checkpoint_hours`` and
``seconds_per_iter``, or the checkpoint rounds), ``exit_interval`` (the largest multiple of it that fits the
Slurm time limit minus margins) and, for Megatron-LM, ``--exit-duration-in-mins`` and
``--exit-signal-handler``.

The base config is checked against the plan: ``seq_length`` and the global batch size must agree (the error
names both values), the batch must split over the GPUs (``train.nodes`` x ``gpus_per_node`` / (TP x PP)),
heads x head size must equal the hidden size, and the EOD the trainer will use must be the one the data
ends with (GPT-NeoX's ``SPMTokenizer`` uses ``<|endoftext|>``, or ``<unk>`` when the model lacks it).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import yaml

from workflow_scripts.core import schedule
from workflow_scripts.core.cli import UserError
from workflow_scripts.core.fsio import atomic_path, read_json, write_json
from workflow_scripts.core.indexed_dataset import IndexedDataset
from workflow_scripts.core.settings import schema_entry
from workflow_scripts.core.train_layout import TrainLayout
from workflow_scripts.tokens import kinds
from workflow_scripts.tokens.kinds import TokenizerFiles
from workflow_scripts.train import lint, summary
from workflow_scripts.train.lint import dest_of, flag_of
from workflow_scripts.train.settings import TrainSettings
from workflow_scripts.train.sft import sft_train_iters
from workflow_scripts.train.trainer_tokenizers import TRAINER_TOKENIZERS, trainer_eod

if TYPE_CHECKING:
    pass

NEOX_EOD_PIECE = "<|endoftext|>"


class ConfigError(UserError, ValueError):
    """A base config or setting that disagrees with the plan; the message names both values."""


@dataclass
class Keys:
    """The keys the workflow sets on a pack's config, with the reason for each."""

    pack: str
    values: dict[str, Any]
    why: dict[str, str]

    def set(self, key: str, value: Any, why: str) -> None:
        self.values[key] = value
        self.why[key] = why


# --- base configs -------------------------------------------------------------------------------------------


def read_base(path: str, trainer: str) -> dict[str, Any]:
    """The base config as a dict: GPT-NeoX YAML (keys normalised to underscores, as GPT-NeoX does), or a
    Megatron-LM arguments file (``--flag value``; a flag without value is ``True``)."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if trainer == "neox":
        data = yaml.safe_load(text) or {}
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: a GPT-NeoX config must be a YAML mapping")
        return {k.replace("-", "_"): v for k, v in data.items()}
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


def hf_model_keys(base: dict[str, Any], hf_dir: str, base_path: str, seq_length: int) -> dict[str, Any]:
    """GPT-NeoX's model keys of ``train.init_from.hf``'s ``config.json``; a key the base config sets to
    another value is an error naming both."""
    from workflow_scripts.train.hf import config as hf_config
    from workflow_scripts.train.hf.start import read_config

    try:
        model = hf_config.neox_model_keys(read_config(hf_dir))
    except hf_config.UnsupportedModel as error:
        raise ConfigError(f"train.init_from.hf: {hf_dir}/config.json: {error}") from None
    for key, value in model.items():
        if key in base and base[key] != value:
            raise ConfigError(
                f"{base_path}: {key} {base[key]!r}, but the model {hf_dir}/config.json gives {value!r} "
                "(train.init_from.hf): remove the key from the base config, or start from another model"
            )
    if seq_length > model["max_position_embeddings"]:
        raise ConfigError(
            f"training.seq_length {seq_length} is longer than the model's max_position_embeddings "
            f"{model['max_position_embeddings']} ({hf_dir}/config.json)"
        )
    return model


# --- checks against the plan --------------------------------------------------------------------------------


def _first(base: dict[str, Any], *names: str) -> Any:
    return next((base[n] for n in names if base.get(n) is not None), None)


def check_base(
    base: dict[str, Any], plan: dict[str, Any], train: TrainSettings, base_path: str
) -> dict[str, int]:
    """Check the base config against the plan and the cluster; return the parallel layout."""
    seq = _first(base, "seq_length")
    if seq is not None and int(seq) != plan["seq_length"]:
        raise ConfigError(
            f"{base_path}: seq_length {seq}, but the plan uses training.seq_length {plan['seq_length']}"
        )
    batch = _first(base, "train_batch_size", "global_batch_size")
    if batch is not None and int(batch) != plan["global_batch_size"]:
        raise ConfigError(
            f"{base_path}: train batch size {batch}, but the plan uses training.global_batch_size "
            f"{plan['global_batch_size']}"
        )
    tp = int(_first(base, "model_parallel_size", "tensor_model_parallel_size") or 1)
    pp = int(_first(base, "pipe_parallel_size", "pipeline_model_parallel_size") or 1)
    dp = schedule.data_parallel_size(train.nodes, train.gpus_per_node, tp, pp)
    micro = int(_first(base, "train_micro_batch_size_per_gpu", "micro_batch_size") or 1)
    accumulation = schedule.check_batch(plan["global_batch_size"], micro, dp)
    given = _first(base, "gradient_accumulation_steps")
    if given is not None and int(given) != accumulation:
        raise ConfigError(
            f"{base_path}: gradient_accumulation_steps {given}, but {plan['global_batch_size']} = micro "
            f"batch {micro} x data parallel {dp} x {accumulation}"
        )
    hidden, heads = _first(base, "hidden_size"), _first(base, "num_attention_heads")
    if hidden is not None and heads is not None:
        schedule.check_heads(int(hidden), int(heads), _first(base, "kv_channels"))
    return {"tp": tp, "pp": pp, "dp": dp, "micro": micro, "accumulation": accumulation}


def check_eod(signature: dict[str, Any], files: TokenizerFiles, trainer: str) -> int | None:
    """The EOD id the data ends with (from the signature); the trainer's tokenizer must take the same."""
    ids = {
        (e.get("identity") or {}).get("tokenizer", {}).get("eod_id")
        for e in signature["prefixes"]
        if (e.get("identity") or {}).get("tokenizer")
    }
    if len(ids) != 1:
        return None
    eod = ids.pop()
    if eod is None:
        return eod
    tok = files.load()
    theirs, rule = trainer_eod(tok, trainer)
    if theirs != eod:
        owner = "GPT-NeoX's" if trainer == "neox" else "Megatron-LM's"
        hint = (
            f" Use a model with '{NEOX_EOD_PIECE}' (tokenize.eod_piece then picks it) or train with "
            "Megatron-LM"
            if tok.kind == "sentencepiece" and trainer == "neox"
            else ""
        )
        raise ConfigError(
            f"the data ends documents with id {eod} ({tok.piece(eod)!r}), but {owner} "
            f"{TRAINER_TOKENIZERS[tok.kind, trainer]} takes EOD = {rule} = {theirs} ({tok.piece(theirs)!r}) "
            f"with {files.model}: end-of-document masking would point at the wrong token.{hint}"
        )
    return eod


# --- the computed keys --------------------------------------------------------------------------------------


def cadence_of(train: TrainSettings) -> schedule.Cadence:
    """The checkpoint and segment cadence of the train settings."""
    return schedule.Cadence(
        train.seconds_per_iter,
        train.checkpoint_hours,
        train.time_limit_minutes,
        train.startup_minutes,
        train.save_minutes,
        train.spare_segments,
        train.checkpoint_rounds,
        global_exits=train.trainer == "megatron",
    )


def pack_keys(
    plan: dict[str, Any],
    index: int,
    train: TrainSettings,
    checkpoints: str,
    tokenizer: TokenizerFiles,
    seed: int,
) -> Keys:
    """Every key the workflow sets on pack ``index``'s config (trainer-neutral names: GPT-NeoX's)."""
    pack = plan["packs"][index]
    keys = Keys(pack["name"], {}, {})
    start_offset = schedule.start_offset(train.finetune_from, train.trainer)
    offset = start_offset + pack["iteration_offset"]
    keys.set("train_data_paths", [pack["merged_prefix"]], "the merged pack (prefix, no .bin)")
    keys.set("train_data_weights", [1.0], "one path: the pack is already mixed")
    if plan.get("validation"):
        valid = [v["merged_prefix"] for v in plan["validation"]]
        why = "the held-out validation packs (one per language), read by no pack"
    else:
        valid = [pack["merged_prefix"]]
        why = "no held-out set (datapacks.validation_tokens: 0): evaluation reads the training pack"
    keys.set("valid_data_paths", valid, why)
    keys.set("valid_data_weights", [1.0] * len(valid), "every language's held-out set alike")
    keys.set("test_data_paths", valid, "GPT-NeoX needs train, valid and test paths together; " + why)
    keys.set("test_data_weights", [1.0] * len(valid), "as valid_data_weights")
    if "sft_epochs" in pack:
        keys.set(
            "pack_impl", "k_bin_packed", "SFT: whole documents in bins, never split or joined (seed 003)"
        )
    keys.set(
        "train_iters",
        pack["train_iters"],
        (
            f"the most iterations whose k_bin_packed samples {pack['sft_epochs']} pass(es) over the pack make"
            if "sft_epochs" in pack
            else f"the plan: the most iterations that read {pack['tokens']} tokens once"
        ),
    )
    keys.set(
        "iteration_offset",
        offset,
        "global step before this pack: the previous packs' iterations"
        + (f" after the start checkpoint {start_offset}" if start_offset else ""),
    )
    keys.set("seq_length", plan["seq_length"], "training.seq_length")
    keys.set("train_batch_size", plan["global_batch_size"], "training.global_batch_size")
    keys.set("save", checkpoints, "one checkpoint directory for the whole run (the trainer's own layout)")
    keys.set("load", checkpoints, "resume from its latest checkpoint")
    keys.set("vocab_file", tokenizer.model, "the tokenizer the data was made with")
    if tokenizer.merges:
        keys.set("merge_file", tokenizer.merges, "the GPT-2 vocabulary's merges")
    why = {"sentencepiece": "a SentencePiece model", "hf": "a Hugging Face tokenizer.json", "gpt2": "GPT-2's"}
    keys.set("tokenizer_type", TRAINER_TOKENIZERS[tokenizer.kind, "neox"], why[tokenizer.kind])
    keys.set("seed", seed, "the workflow's seed")
    overrides = train.phase_overrides.get(pack["phase"], {})
    given = overrides.get("checkpoint_factor")
    cadence = cadence_of(train).pack(offset, pack["train_iters"], None if given is None else int(given))
    if given is not None:
        why = f"train.phase_overrides.{pack['phase']}"
    elif train.checkpoint_rounds:
        why = "the last checkpoint round's interval"
    else:
        why = f"{train.checkpoint_hours:g} h between checkpoints at {train.seconds_per_iter:g} s/iter"
    keys.set("checkpoint_factor", cadence.checkpoint_factor, why)
    if cadence.extra_save_iters and train.trainer == "megatron":
        raise ConfigError(
            f"train.checkpoint_rounds: pack {pack['name']} would save at {cadence.extra_save_iters[:5]}... "
            "besides every checkpoint_factor, but Megatron-LM saves only at multiples of --save-interval "
            "(it has no extra_save_iters, GPT-NeoX's key): give Megatron-LM one interval, or train with "
            "trainer: neox"
        )
    if cadence.extra_save_iters:
        keys.set("extra_save_iters", cadence.extra_save_iters, "the earlier checkpoint rounds")
    keys.set(
        "exit_interval",
        cadence.exit_interval,
        f"the largest multiple of checkpoint_factor within {train.time_limit_minutes:g} min minus "
        f"{train.startup_minutes + train.save_minutes:g} min of margins at {train.seconds_per_iter:g} s/iter",
    )
    keys.set(
        "keep_last_n_checkpoints",
        None,
        "retention is the workflow's alone (train.keep_last, train.milestones, pack ends): GPT-NeoX's own "
        "would delete the oldest checkpoints, milestones and pack ends included",
    )
    lr = train.first_pack if index == 0 else train.later_packs
    if (
        train.trainer == "megatron"
        and lr == schema_entry("train", "first_pack" if index == 0 else "later_packs")["default"]
    ):
        lr = {}  # GPT-NeoX's pack keys; Megatron-LM's phase transitions keep the LR schedule running
    for key, value in lr.items():
        keys.set(
            key, value, "train.first_pack (seed 000's warmup pack)" if index == 0 else "train.later_packs"
        )
    if train.finetune_from:
        keys.set("finetune", index == 0, "the first pack starts from train.finetune_from (weights only)")
    for key, value in overrides.items():
        if key != "checkpoint_factor":
            keys.set(key, value, f"train.phase_overrides.{pack['phase']}")
    return keys


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


def megatron_args(
    base: dict[str, Any], keys: Keys, train: TrainSettings, plan: dict[str, Any], tokenizer: TokenizerFiles
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
    boundaries = [start + p["iteration_offset"] for p in plan["packs"][1:]]
    if boundaries:
        args["phase_transition_iterations"] = ",".join(map(str, boundaries))
    args["exit_duration_in_mins"] = schedule.exit_duration_minutes(
        train.time_limit_minutes, train.save_minutes
    )
    args["exit_signal_handler"] = True
    args["exit_signal"] = "SIGUSR1"  # the segment's watchdog and Slurm's --signal send USR1 (default: TERM)
    return args


def render_megatron(args: dict[str, Any]) -> str:
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


def sft_plan(plan: dict[str, Any], seq_length: int, batch: int, seed: int, epochs: int) -> dict[str, Any]:
    """The plan with SFT packs' ``train_iters`` counted in ``k_bin_packed`` bins (from each merged pack's
    lengths) and the offsets chained over them."""
    packs, offset = [], 0
    for pack in plan["packs"]:
        lengths = IndexedDataset(pack["merged_prefix"]).lengths
        iters = sft_train_iters(lengths, seq_length, batch, seed, epochs)
        packs.append({**pack, "train_iters": iters, "iteration_offset": offset, "sft_epochs": epochs})
        offset += iters
    return {**plan, "packs": packs}


def write_pack_config(
    plan: dict[str, Any],
    signature: dict[str, Any],
    pack_name: str,
    base_path: str,
    train: TrainSettings,
    tokenizer: TokenizerFiles,
    out_dir: str,
    checkpoints: str,
    seed: int,
    sft: bool = False,
) -> dict[str, Any]:
    """Check and write one pack's config and its keys file; return the summary row."""
    if sft:
        plan = sft_plan(plan, plan["seq_length"], plan["global_batch_size"], seed, train.sft_epochs)
    names = [p["name"] for p in plan["packs"]]
    if pack_name not in names:
        raise ConfigError(f"pack {pack_name} is not in the plan (packs: {', '.join(names)})")
    index = names.index(pack_name)
    base = read_base(base_path, train.trainer)
    layout = check_base(base, plan, train, base_path)
    eod = check_eod(signature, tokenizer, train.trainer)
    keys = pack_keys(plan, index, train, checkpoints, tokenizer, seed)
    if train.init_hf:
        for key, value in hf_model_keys(base, train.init_hf, base_path, plan["seq_length"]).items():
            keys.set(key, value, f"the model's config.json (train.init_from.hf: {train.init_hf})")
    replaced = {k: base[k] for k in keys.values if k in base and base[k] != keys.values[k]}
    paths = TrainLayout(out_dir.rstrip("/"))
    path = paths.config(pack_name, ".yml" if train.trainer == "neox" else ".args")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if train.trainer == "neox":
        final = {**base, **keys.values}
        findings = lint.lint_neox(final)
        text = yaml.safe_dump(final, sort_keys=False, width=120)
    else:
        final = megatron_args(base, keys, train, plan, tokenizer)
        findings = lint.lint_megatron(final)
        text = render_megatron(final)
    if findings.errors:
        raise ConfigError(
            f"{base_path} -> {pack_name}: {len(findings.errors)} problem(s) for {train.trainer}: "
            + "; ".join(findings.errors)
        )
    for warning in findings.warnings:
        print(f"warning: {pack_name}: {warning}", file=sys.stderr)
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    pack = plan["packs"][index]
    row = summary.row(pack, keys.values, train, layout, path)
    write_json(
        paths.keys(pack_name),
        {
            "config": path,
            "base": base_path,
            "trainer": train.trainer,
            "eod_id": eod,
            "layout": layout,
            "set": {k: {"value": v, "why": keys.why[k]} for k, v in keys.values.items()},
            "replaced_from_base": replaced,
            "warnings": findings.warnings,
            "environment": dict(train.sft_env) if sft else {},
            "summary": row,
        },
    )
    return row


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--plan", required=True)
    parser.add_argument("--signature", required=True)
    parser.add_argument("--pack", required=True)
    kinds.add_arguments(parser)
    parser.add_argument("--out-dir", required=True)
    parser.add_argument("--checkpoints", required=True, help="the run's save/load directory")
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--train-json", required=True, help="the config's train section, as JSON")
    parser.add_argument("--mode", choices=["pretrain", "sft"], default="pretrain", help="tokenize.mode")
    args = parser.parse_args(argv)
    train = TrainSettings.from_config(json.loads(args.train_json))
    if not train.base_config:
        parser.error("train.base_config is not set")
    row = write_pack_config(
        read_json(args.plan),
        read_json(args.signature),
        args.pack,
        train.base_config,
        train,
        kinds.TokenizerFiles.resolve(
            os.path.abspath(args.tokenizer_model),
            args.tokenizer_type,
            args.tokenizer_merges and os.path.abspath(args.tokenizer_merges),
        ),
        args.out_dir,
        os.path.abspath(args.checkpoints),
        args.seed,
        sft=args.mode == "sft",
    )
    print(" ".join(f"{k}={v}" for k, v in row.items()))
    return 0
