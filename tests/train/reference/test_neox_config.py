"""GPT-NeoX's YAML configs merged as ``NeoXArgs.from_ymls`` merges them."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.train.reference.conftest import write_config
from workflow_scripts.train.reference.config import load_config
from workflow_scripts.train.reference.run_config import ConfigError


def test_configs_merge_as_neoxargs_merges_them(tmp_path: Path, model: Path) -> None:
    """NeoXArgs.from_ymls: a key given twice is refused, and so is a key GPT-NeoX does not know; its
    duplicate check compares the raw name with the normalised ones, so ``train-iters`` in a later file
    passes and overrides ``train_iters`` (its quirk, kept)."""
    base = write_config(tmp_path / "base.yml", model, train_data_paths=["x"], train_iters=5)
    extra = tmp_path / "extra.yml"
    extra.write_text(yaml.safe_dump({"train-iters": 7, "iteration-offset": 3}))
    cfg = load_config([str(base), str(extra)])
    assert (cfg.train_iters, cfg.offset, cfg.end) == (7, 3, 10)
    extra.write_text(yaml.safe_dump({"finetune": False, "train_iters": 7}))
    with pytest.raises(ConfigError, match=r"extra\.yml has the following duplicate keys .*: train_iters"):
        load_config([str(base), str(extra)])
    extra.write_text(yaml.safe_dump({"finetune": False, "train_iter": 7}))
    with pytest.raises(ConfigError, match="train_iter: not GPT-NeoX keys"):
        load_config([str(base), str(extra)])
