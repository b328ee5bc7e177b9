"""The trainer configs checked from the workflow's config alone, before any job: the Snakefile runs
``problem`` when it is parsed (rules/train.smk), so ``snakemake -n`` and ``snakemake plan`` stop, naming the
keys, where the base config (``train.base_config``) and the config's ``training`` and ``train`` sections
cannot make a config the trainer accepts (``checks.check_base``, which ``train-config`` runs
again on each pack with the plan's numbers, the same). Cheap: it reads the base config and
``train.init_from.hf``'s ``config.json``, nothing else.
"""

from __future__ import annotations

import os
from typing import Any

from workflow_scripts.core.cli import UserError
from workflow_scripts.train.configs import megatron, neox
from workflow_scripts.train.configs.checks import ConfigError, check_base
from workflow_scripts.train.settings import TrainSettings


def read_base(base_path: str, train: TrainSettings, seq_length: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """The base config as read, and the model keys of ``train.init_from.hf`` (none without it), which fill
    it and must agree with it."""
    if not os.path.isfile(base_path):
        raise ConfigError(f"train.base_config: {base_path} is not a file")
    if train.trainer == "neox":
        base = neox.read_base(base_path)
        model = neox.hf_model_keys(base, train.init_hf, base_path, seq_length) if train.init_hf else {}
    else:
        base = megatron.read_base(base_path)
        model = megatron.hf_model_args(base, train.init_hf, base_path, seq_length) if train.init_hf else {}
    return base, model


def check(config: dict[str, Any]) -> dict[str, int] | None:
    """The parallel layout of the run's trainer configs (None without ``train.base_config``); an error
    naming the keys where the trainer would refuse them: of the base config, and of the base config with
    the keys that win over it in some packs (``train.first_pack``, ``later_packs``, ``phase_overrides``)."""
    train = TrainSettings.from_config(config["train"])
    if not train.base_config:
        return None
    seq_length, batch = config["training"]["seq_length"], config["training"]["global_batch_size"]
    base, model = read_base(train.base_config, train, seq_length)
    layout = check_base(base | model, seq_length, batch, train, train.base_config)
    packs = {"train.first_pack": train.first_pack, "train.later_packs": train.later_packs}
    packs |= {f"train.phase_overrides.{name}": keys for name, keys in train.phase_overrides.items()}
    for where, keys in packs.items():
        check_base(base | model | keys, seq_length, batch, train, f"{train.base_config} with {where}")
    return layout


def problem(config: dict[str, Any]) -> str | None:
    """``check``'s error as one line, or None."""
    try:
        check(config)
    except UserError as error:
        return str(error)
    return None
