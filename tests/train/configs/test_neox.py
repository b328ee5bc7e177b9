"""GPT-NeoX's configs for the tree the user runs (``train.neox``): the LUMI fork's keys only for the fork;
upstream GPT-NeoX gets configs it loads as they are, or the config stage refuses with the reason."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.train.configs.conftest import BASE, SEED_000, SEQ, signature, small_plan, write
from workflow_scripts.tokens.kinds import TokenizerFiles
from workflow_scripts.train import lint
from workflow_scripts.train.configs.checks import ConfigError
from workflow_scripts.train.configs.write import write_pack_config
from workflow_scripts.train.settings import TrainSettings

UPSTREAM = {**SEED_000, "neox": "upstream"}


def write_one_pack(tmp_path: Path, model: Path, train: dict, base: dict = BASE, sft: bool = False) -> dict:
    """The config of a one-pack plan's pack (as written: the file's keys)."""
    base_path = tmp_path / "base.yml"
    base_path.write_text(yaml.safe_dump(base))
    one = small_plan(SEQ, 576, [("warmup_0", "warmup", 2000, 0, str(tmp_path / "merged" / "warmup_0"))])
    write_pack_config(
        one,
        signature(3),
        "warmup_0",
        str(base_path),
        TrainSettings.from_config({**train, "base_config": str(base_path)}),
        TokenizerFiles.resolve(str(model)),
        str(tmp_path / "train"),
        "/scratch/ckpt",
        1234,
        sft=sft,
    )
    return yaml.safe_load((tmp_path / "train" / "warmup_0" / "warmup_0.yml").read_text())


def test_the_fork_is_the_default_and_gets_iteration_offset(tmp_path: Path, model: Path) -> None:
    config, keys = write(tmp_path, model, BASE, SEED_000, "U1_1")
    assert TrainSettings.from_config({}).neox == "fork"
    assert config["iteration_offset"] == 2000 == keys["set"]["iteration_offset"]["value"]


def test_upstream_one_pack_config_has_no_fork_key(tmp_path: Path, model: Path) -> None:
    config = write_one_pack(tmp_path, model, UPSTREAM)
    assert not set(config) & set(lint.trainer_keys("neox")["fork_only"])
    assert config["train_iters"] == 2000 and "iteration_offset" not in config
    keys = (tmp_path / "train" / "warmup_0" / "keys.json").read_text()
    assert '"iteration_offset"' in keys  # the segments still read the pack's global steps from the keys file


@pytest.mark.parametrize(
    ("train", "base", "sft", "message"),
    [
        (UPSTREAM, BASE, False, None),  # the two-pack plan of the conftest
        ({**UPSTREAM, "finetune_from": "/ckpt/global_step100"}, BASE, False, "restarts the iteration at 0"),
        (UPSTREAM, BASE, True, "k_bin_packed"),
        (UPSTREAM, {**BASE, "yarn": True}, False, "yarn: a key of the LUMI fork"),
    ],
)
def test_upstream_refuses_what_it_cannot_train(
    tmp_path: Path, model: Path, train: dict, base: dict, sft: bool, message: str | None
) -> None:
    with pytest.raises(ConfigError) as error:
        if message is None:
            write(tmp_path, model, base, train, "U1_1")
        else:
            write_one_pack(tmp_path, model, train, base, sft)
    if message is None:
        assert "a plan of 2 packs" in str(error.value) and "iteration_offset" in str(error.value)
        assert "train.neox: fork" in str(error.value)
    else:
        assert message in str(error.value)
