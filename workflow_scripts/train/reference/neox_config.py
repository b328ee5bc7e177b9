"""GPT-NeoX's YAML configs read as ``NeoXArgs.from_ymls`` reads them: one or more files merged, a key given in
two files refused, and so is a key GPT-NeoX does not know (upstream or the LUMI fork: ``train/trainer_keys``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import yaml

from workflow_scripts.train import lint
from workflow_scripts.train.reference.run_config import ConfigError


def read_yaml(paths: Sequence[str]) -> dict[str, Any]:
    """The configs merged as ``NeoXArgs.from_ymls`` merges them: keys with ``-`` normalised to ``_``, a key
    repeated across files refused, a key GPT-NeoX does not know refused."""
    merged: dict[str, Any] = {}
    for path in paths:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f) or {}
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: a GPT-NeoX config must be a YAML mapping")
        for key, value in data.items():
            if key in merged:
                raise ConfigError(
                    f"Conf file {path} has the following duplicate keys with previously loaded file: {key} "
                    "(GPT-NeoX's NeoXArgs.from_ymls refuses it too)"
                )
            merged[str(key).replace("-", "_")] = value
    spec = lint.trainer_keys("neox")
    unknown = sorted(set(merged) - set(spec["keys"]) - set(spec["fork_only"]))
    if unknown:
        raise ConfigError(
            f"{', '.join(paths)}: {', '.join(unknown)}: not GPT-NeoX keys (NeoXArgs fails on them: "
            "unexpected keyword argument)"
        )
    return merged
