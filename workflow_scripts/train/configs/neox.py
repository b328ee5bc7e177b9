"""GPT-NeoX's config: the base YAML read, the model keys of ``train.init_from.hf``, the plans the GPT-NeoX
the user runs can train (``train.neox``: the LUMI fork or upstream), and the pack's YAML (the base with the
computed keys over it; upstream's without the fork's ``iteration_offset``)."""

from __future__ import annotations

from typing import Any

import yaml

from workflow_scripts.datapacks.plan import Plan
from workflow_scripts.train.configs.checks import ConfigError
from workflow_scripts.train.configs.keys import Keys
from workflow_scripts.train.hf import config as hf_config
from workflow_scripts.train.hf.start import read_config
from workflow_scripts.train.settings import TrainSettings

UPSTREAM = "upstream GPT-NeoX (train.neox: upstream)"


def read_base(path: str) -> dict[str, Any]:
    """The base GPT-NeoX YAML config as a dict (keys normalised to underscores, as GPT-NeoX does)."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as error:
        raise ConfigError(f"{path}: not YAML: {' '.join(str(error).split())}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a GPT-NeoX config must be a YAML mapping")
    return {k.replace("-", "_"): v for k, v in data.items()}


def hf_model_keys(base: dict[str, Any], hf_dir: str, base_path: str, seq_length: int) -> dict[str, Any]:
    """GPT-NeoX's model keys of ``train.init_from.hf``'s ``config.json``; a key the base config sets to
    another value is an error naming both."""
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


def check_tree(plan: Plan, train: TrainSettings, sft: bool) -> None:
    """Refuse what upstream GPT-NeoX cannot train as the plan says. It has no ``iteration_offset``: it
    resumes at the checkpoint's global step, starts the data at that step x batch of a dataset of
    ``train_iters`` x batch samples (data_utils.py, shift_and_wrap_data_loaders) and trains while the step
    is below ``train_iters`` (training.py), so only a pack that starts at step 0 reads its data from its
    first sample; its ``finetune`` restarts the step at 0 (checkpointing.py, load_checkpoint); it has no
    ``k_bin_packed``."""
    if train.neox != "upstream":
        return
    fork = "train with the LUMI fork (train.neox: fork)"
    if sft:
        raise ConfigError(
            f"{UPSTREAM}: SFT packs whole documents into bins (pack_impl k_bin_packed), the LUMI fork's; "
            f"upstream's pack_impl is packed, pack_until_overflow or unpacked; {fork}"
        )
    if len(plan.packs) > 1:
        raise ConfigError(
            f"{UPSTREAM}: a plan of {len(plan.packs)} packs, but upstream has no iteration_offset: pack "
            f"{plan.packs[1].name} would resume at global step {plan.packs[1].iteration_offset} and read its "
            f"data from sample {plan.packs[1].iteration_offset} x {plan.global_batch_size} on, not from its "
            f"first, and count train_iters from step 0; {fork}, or plan one pack"
        )
    if train.finetune_from:
        raise ConfigError(
            f"{UPSTREAM}: train.finetune_from {train.finetune_from}: upstream's finetune restarts the "
            "iteration at 0, while the packs' steps count on from the start checkpoint's; "
            f"{fork}, or start without finetune_from"
        )


def pack_config(base: dict[str, Any], keys: Keys, tree: str) -> dict[str, Any]:
    """The pack's config: the base, the computed keys over it; for ``tree`` upstream without
    ``iteration_offset`` (the fork's key; ``check_tree`` leaves upstream only packs that start at 0)."""
    config = {**base, **keys.values}
    if tree == "upstream":
        del config["iteration_offset"]
    return config


def render(config: dict[str, Any]) -> str:
    """The config as GPT-NeoX's YAML, in the keys' order."""
    return yaml.safe_dump(config, sort_keys=False, width=120)
