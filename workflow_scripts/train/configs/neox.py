"""GPT-NeoX's config: the base YAML read, the model keys of ``train.init_from.hf``, and the pack's YAML (the
base with the computed keys over it)."""

from __future__ import annotations

from typing import Any

import yaml

from workflow_scripts.train.configs.checks import ConfigError
from workflow_scripts.train.configs.keys import Keys
from workflow_scripts.train.hf import config as hf_config
from workflow_scripts.train.hf.start import read_config


def read_base(path: str) -> dict[str, Any]:
    """The base GPT-NeoX YAML config as a dict (keys normalised to underscores, as GPT-NeoX does)."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    data = yaml.safe_load(text) or {}
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


def pack_config(base: dict[str, Any], keys: Keys) -> dict[str, Any]:
    """The pack's config: the base, the computed keys over it."""
    return {**base, **keys.values}


def render(config: dict[str, Any]) -> str:
    """The config as GPT-NeoX's YAML, in the keys' order."""
    return yaml.safe_dump(config, sort_keys=False, width=120)
