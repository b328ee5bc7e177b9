"""The pack index: what the workflow reads of the plan."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from workflow_scripts.core.fsio import write_json
from workflow_scripts.datapacks import pack_index
from workflow_scripts.datapacks.plan import Plan
from workflow_scripts.datapacks.planner import make_plan
from workflow_scripts.datapacks.settings import PlanSettings


def plan(shuffle: bool) -> Plan:
    lengths = {n: np.full(100, 10, dtype=np.int32) for n in ("en_web_a", "en_web_b")}
    sig = [{"prefix": n, "name": n, "lang": "en", "domain": "web", "tokens": 1000} for n in lengths]
    config = {
        "seed": 1,
        "training": {"seq_length": 16, "global_batch_size": 2},
        "datapacks": {
            "max_tokens_per_pack": 10**6,
            "shuffle": shuffle,
            "validation_tokens": 100,
            "phases": [
                {"name": "warmup", "tokens": 300, "mixture": "m"},
                {"name": "main", "tokens": 500, "mixture": "m"},
            ],
        },
        "mixtures": {"m": {"lang_prob": {"en": 1.0}}},
    }
    return Plan.from_dict(make_plan(PlanSettings.from_config(config), sig, lengths.__getitem__))


def test_names_the_packs() -> None:
    expected = {"packs": ["warmup_0", "main_1"], "validation": ["valid_en"]}
    assert pack_index.of_plan(plan(False)) == pack_index.of_plan(plan(True)) == expected


def test_written_only_when_changed(tmp_path: Path) -> None:
    pack_index.write(plan(False), tmp_path)
    path = tmp_path / pack_index.NAME
    first = path.stat().st_mtime_ns
    pack_index.write(plan(False), tmp_path)
    assert path.stat().st_mtime_ns == first
    changed = dataclasses.replace(plan(False), validation=())
    pack_index.write(changed, tmp_path)
    assert pack_index.read(tmp_path, tmp_path / "absent.json")["validation"] == []


def test_a_plan_made_before_the_index_is_read_from_the_plan(tmp_path: Path) -> None:
    write_json(tmp_path / "plan.json", plan(True).to_dict())
    assert pack_index.read(tmp_path / "specs", tmp_path / "plan.json") == pack_index.of_plan(plan(True))
