"""The pack index: what the workflow reads of the plan."""

from __future__ import annotations

from pathlib import Path

from workflow_scripts.core.fsio import write_json
from workflow_scripts.datapacks import pack_index


def plan(shuffle: bool) -> dict:
    def pack(name: str, sources: list[str]) -> dict:
        return {"name": name, "slices": [{"source": s, "prefix": f"tok/{s}"} for s in sources]}

    return {
        "shuffle": shuffle,
        "packs": [pack("warmup_0", ["b", "a", "b"]), pack("main_1", ["c"])],
        "validation": [pack("valid_en", ["a"])],
    }


def test_names_the_packs() -> None:
    expected = {"packs": ["warmup_0", "main_1"], "validation": ["valid_en"]}
    assert pack_index.of_plan(plan(False)) == pack_index.of_plan(plan(True)) == expected


def test_written_only_when_changed(tmp_path: Path) -> None:
    pack_index.write(plan(False), tmp_path)
    path = tmp_path / pack_index.NAME
    first = path.stat().st_mtime_ns
    pack_index.write(plan(False), tmp_path)
    assert path.stat().st_mtime_ns == first
    changed = {**plan(False), "validation": []}
    pack_index.write(changed, tmp_path)
    assert pack_index.read(tmp_path, tmp_path / "absent.json")["validation"] == []


def test_a_plan_made_before_the_index_is_read_from_the_plan(tmp_path: Path) -> None:
    write_json(tmp_path / "plan.json", plan(True))
    assert pack_index.read(tmp_path / "specs", tmp_path / "plan.json") == pack_index.of_plan(plan(True))
