"""Batches of a group's shards, and the record that lets a batch job skip its current members."""

from __future__ import annotations

from pathlib import Path

import pytest

from workflow_scripts.core import batches


def test_batches_are_runs_of_split_numbers() -> None:
    names = [f"en_web_cc_split_{i:04d}.jsonl" for i in (0, 1, 2, 3, 4, 9)]
    assert batches.members(names, "1", 2) == names[2:4]
    assert batches.members(reversed(names), 4, 2) == [names[-1]]
    assert batches.batch_of("/x/en_web_cc_split_0401.jsonl.zst", 400) == 1
    assert batches.by_batch(reversed(names), 2) == {0: names[:2], 1: names[2:4], 2: [names[4]], 4: [names[5]]}


def test_a_record_is_current_until_a_file_or_the_recipe_changes(tmp_path: Path) -> None:
    source, made = tmp_path / "in", tmp_path / "out"
    source.write_text("a")
    made.write_text("b")
    state = batches.State(tmp_path / "state", "recipe 1")
    assert not state.is_current("m", [str(source)], [str(made)])
    state.record("m", [str(source)], [str(made)])
    assert batches.State(tmp_path / "state", "recipe 1").is_current("m", [str(source)], [str(made)])
    assert not batches.State(tmp_path / "state", "recipe 2").is_current("m", [str(source)], [str(made)])
    made.write_text("bb")
    assert not batches.State(tmp_path / "state", "recipe 1").is_current("m", [str(source)], [str(made)])
    made.unlink()
    assert not batches.State(tmp_path / "state", "recipe 1").is_current("m", [str(source)], [str(made)])


def test_recording_a_member_without_its_outputs_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="never"):
        batches.State(tmp_path / "state", "r").record("m", [], [str(tmp_path / "never")])
