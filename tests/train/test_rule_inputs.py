"""What the train rules look up (workflow_scripts.train.rule_inputs), from plain values."""

from __future__ import annotations

from pathlib import Path

import pytest

from workflow_scripts.core.cli import UserError
from workflow_scripts.core.fsio import write_json
from workflow_scripts.core.train_layout import TrainLayout
from workflow_scripts.train.chain import ChainError
from workflow_scripts.train.rule_inputs import TrainInputs
from workflow_scripts.train.settings import TrainSettings

FIELDS = ("pack", "iteration_offset", "train_iters", "exit_interval", "segments", "hours")


def inputs(tmp_path: Path, **train: object) -> TrainInputs:
    """Two packs' keys files (steps 0-10 in 2 segments, 10-40 in 3) and the lookups of their run."""
    layout = TrainLayout(f"{tmp_path}/train", "logs")
    for values in (("warmup_0", 0, 10, 27, 2, 0.5), ("main_1", 10, 30, 27, 3, 2.0)):
        path = Path(layout.keys(values[0]))
        path.parent.mkdir(parents=True)
        write_json(path, {"summary": dict(zip(FIELDS, values, strict=True))})
    config = {"train": {"trainer": "neox", **train}, "tokenize": {"mode": "pretrain"}}
    return TrainInputs.of(config, layout, "r/merged", ".yml", "ckpt")


def test_the_chain_is_built_from_the_packs_keys_files_once(tmp_path: Path) -> None:
    found = inputs(tmp_path)
    packs = tuple(found.pack(found.layout.keys(p)) for p in ("warmup_0", "main_1"))
    assert [(p.name, p.end, p.segments) for p in packs] == [("warmup_0", 10, 2), ("main_1", 40, 3)]
    assert found.chain(packs) is found.chain(packs)
    assert [(s.pack.name, s.k) for s in found.chain(packs).segments][2] == ("main_1", 0)


def test_a_segment_waits_for_its_predecessor_and_its_data(tmp_path: Path) -> None:
    found = inputs(tmp_path)
    chain = found.chain(tuple(found.pack(found.layout.keys(p)) for p in ("warmup_0", "main_1")))
    segment = found.segment(chain, "main_1", 0, ["valid_en"], keep=lambda path: f"ancient:{path}")
    assert segment == {
        "pack_keys": found.layout.keys("main_1"),
        "previous": [found.layout.done("warmup_0")],
        "data": [f"ancient:r/merged/{p}/{p}.{e}" for p in ("main_1", "valid_en") for e in ("bin", "idx")],
        "start": [],
    }
    with pytest.raises(ChainError, match="3 segments"):
        found.segment(chain, "main_1", 3, [])
    finetune = inputs(tmp_path / "ft", finetune_from="/models/base/global_step5")
    chain = finetune.chain(tuple(finetune.pack(finetune.layout.keys(p)) for p in ("warmup_0", "main_1")))
    assert finetune.segment(chain, "warmup_0", 0, [])["start"] == [f"{tmp_path}/ft/train/finetune_start.json"]


def test_an_export_waits_for_the_pack_that_reaches_its_step(tmp_path: Path) -> None:
    found = inputs(tmp_path, export={"packs": True, "milestones": [30]}, milestones=[30])
    chain = found.chain(tuple(found.pack(found.layout.keys(p)) for p in ("warmup_0", "main_1")))
    assert found.exports(chain) == {"warmup_0": 10, "main_1": 40, "step30": 30}
    assert found.export_inputs(chain, 30) == {
        "done": found.layout.done("main_1"),
        "config": found.layout.config("main_1", ".yml"),
    }
    assert found.checkpoint(30) == "ckpt/global_step30"
    unkept = inputs(tmp_path / "unkept", export={"milestones": [25]})
    with pytest.raises(UserError, match="step 25"):
        unkept.exports(
            unkept.chain(tuple(unkept.pack(unkept.layout.keys(p)) for p in ("warmup_0", "main_1")))
        )


def test_a_megatron_packs_first_segment_waits_for_its_index_caches(tmp_path: Path) -> None:
    """train_data_cache comes before each pack's first segment under Megatron-LM only (a later segment
    resumes with the caches in place; GPT-NeoX builds its own)."""
    found = inputs(tmp_path, trainer="megatron", launch="python pretrain_gpt.py {args}", eval_launch=None)
    chain = found.chain(tuple(found.pack(found.layout.keys(p)) for p in ("warmup_0", "main_1")))
    for pack in ("warmup_0", "main_1"):
        first = found.segment(chain, pack, 0, [], keep=lambda path: f"ancient:{path}")
        assert first["data_cache"] == [f"ancient:{tmp_path}/train/{pack}/data_cache.json"]
        assert "data_cache" not in found.segment(chain, pack, 1, [])
    reference = inputs(tmp_path / "reference", trainer="megatron", launch=TrainSettings.launch)
    chain = reference.chain(tuple(reference.pack(reference.layout.keys(p)) for p in ("warmup_0", "main_1")))
    assert "data_cache" not in reference.segment(chain, "warmup_0", 0, [])  # the reference builds its own
    neox = inputs(tmp_path / "neox")
    chain = neox.chain(tuple(neox.pack(neox.layout.keys(p)) for p in ("warmup_0", "main_1")))
    assert "data_cache" not in neox.segment(chain, "warmup_0", 0, [])
