"""Per-pack trainer configs: the user's base config + the keys computed from the plan + phase overrides.

Usage::

    snakepack train-config --plan plan.json --signature signature.json --base BASE --pack P \\
        --tokenizer-model M.model --out-dir results/train [train settings...]

writes ``{out}/{P}/{P}.yml`` (GPT-NeoX: ``neox``) or ``{out}/{P}/{P}.args`` (Megatron-LM, one ``--flag value``
a line: ``megatron``) and the pack's keys file (core/train_layout.py), which lists every key the workflow set
(``keys``), its value and why. The base config is checked first (``checks``) and the result linted against
the trainer's own keys (train/lint); an SFT pack's iterations count bins (train/sft).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from workflow_scripts.core.fsio import atomic_path, read_json, write_json
from workflow_scripts.core.train_layout import DATA_CACHE, TrainLayout
from workflow_scripts.datapacks.plan import Plan
from workflow_scripts.tokens import kinds
from workflow_scripts.tokens.kinds import TokenizerFiles
from workflow_scripts.train import lint, summary
from workflow_scripts.train.configs import megatron, neox, preflight
from workflow_scripts.train.configs.checks import ConfigError, check_base, check_eod
from workflow_scripts.train.configs.keys import pack_keys
from workflow_scripts.train.settings import TrainSettings
from workflow_scripts.train.sft import sft_plan


def write_pack_config(
    plan: Plan,
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
    if train.trainer == "neox":
        neox.check_tree(plan, train, sft)
    if sft:
        plan = sft_plan(plan, plan.seq_length, plan.global_batch_size, seed, train.sft_epochs)
    names = [p.name for p in plan.packs]
    if pack_name not in names:
        raise ConfigError(f"pack {pack_name} is not in the plan (packs: {', '.join(names)})")
    index = names.index(pack_name)
    base, model = preflight.read_base(base_path, train, plan.seq_length)
    layout = check_base(base | model, plan.seq_length, plan.global_batch_size, train, base_path)
    eod = check_eod(signature, tokenizer, train.trainer)
    sft_epochs = train.sft_epochs if sft else None
    keys = pack_keys(plan, index, train, checkpoints, tokenizer, seed, sft_epochs)
    for key, value in model.items():
        keys.set(key, value, f"the model's config.json (train.init_from.hf: {train.init_hf})")
    replaced = {k: base[k] for k in keys.values if k in base and base[k] != keys.values[k]}
    paths = TrainLayout(out_dir.rstrip("/"))
    path = paths.config(pack_name, ".yml" if train.trainer == "neox" else ".args")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if train.trainer == "neox":
        final = neox.pack_config(base, keys, train.neox)
        findings = lint.lint_neox(final, upstream=train.neox == "upstream")
        text = neox.render(final)
    else:
        final = megatron.arguments(base, keys, train, plan, tokenizer)
        if index:  # it resumes from the previous pack's last checkpoint, LR schedule included
            before = pack_keys(plan, index - 1, train, checkpoints, tokenizer, seed, sft_epochs)
            saved = megatron.arguments(base, before, train, plan, tokenizer)
            megatron.check_scheduler(saved, final, names[index - 1], pack_name)
        findings = lint.lint_megatron(final)
        text = megatron.render(final)
    if findings.errors:
        raise ConfigError(
            f"{base_path} -> {pack_name}: {len(findings.errors)} problem(s) for {train.trainer}: "
            + "; ".join(findings.errors)
        )
    for warning in findings.warnings:
        print(f"warning: {pack_name}: {warning}", file=sys.stderr)
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    row = summary.row(plan.packs[index], keys.values, train, layout, path)
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
    if train.trainer == "megatron" and not train.data_cache_dir:  # the base file's --data-cache-path, or ours
        cache = megatron.read_base(train.base_config).get("data_cache_path") or f"{args.out_dir}/{DATA_CACHE}"
        train = dataclasses.replace(train, data_cache_dir=os.path.abspath(cache))
    row = write_pack_config(
        Plan.read(args.plan),
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
