"""Batches of a group's shards, what a batch job asks for and is given, and the record that lets it skip its
current members."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from workflow_scripts import batch
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


def test_a_group_folder_lists_its_shards_and_batches(tmp_path: Path) -> None:
    folder = tmp_path / "en_web_cc"
    folder.mkdir()
    for i in (2, 0, 1):
        (folder / f"en_web_cc_split_{i:04d}.jsonl").write_text("x" * (i + 1))
    (folder / "stats.json").write_text("{}")  # not a shard
    shards = batches.group_shards(str(folder))
    assert shards == tuple(f"{folder}/en_web_cc_split_{i:04d}.jsonl" for i in range(3))
    assert batches.group_batches(str(folder), 2) == {0: list(shards[:2]), 1: [shards[2]]}
    assert batches.manifest_of("r/tokenized", shards[2], 2) == "r/tokenized/_batches/en_web_cc.1.json"
    assert batches.total_size(shards) == 6


def test_a_batch_job_asks_for_time_and_threads_by_its_shards_size(tmp_path: Path) -> None:
    shard = tmp_path / "en_web_cc_split_0000.jsonl"
    shard.write_bytes(b"x" * 3 * 2**20)  # 3 MiB, 3.15 MB
    assert batches.runtime_minutes([str(shard)], 1, 1) == 4  # one minute more than 3 MiB at 1 MiB a minute
    assert batches.runtime_minutes([str(shard)], 1, 2) == 3  # shared by its threads
    assert batches.runtime_minutes([str(shard)], 300, 16) == 2
    assert batches.threads_for([str(shard)], 8, 1) == 4  # one per started MB
    assert batches.threads_for([str(shard)], 2, 1) == 2  # the rule's threads at most
    assert batches.threads_for([str(shard)], 8, 64) == batches.threads_for([], 8, 64) == 1


def test_a_batch_job_s_options_are_what_snakepack_batch_reads() -> None:
    shard_file = "r/shards/{group}/{shard}.jsonl"
    options = batches.job_args(
        "r/tokenized",
        "r/shards",
        "en_web_cc",
        "1",
        400,
        inputs=[shard_file, "tok.model"],
        outputs=["r/tokenized/{shard}.bin"],
        member_log="logs/{group}/{shard}.log",
        command=["tokenize", "--input", shard_file, "--opt", "a b"],
    )
    assert options.startswith(
        "--shards-dir r/shards/en_web_cc --batch 1 --per-batch 400"
        " --manifest r/tokenized/_batches/en_web_cc.1.json --state r/tokenized/_batches/en_web_cc.1.state"
        " --member-log 'logs/en_web_cc/{shard}.log'"
    )
    args, command = batch.parse(shlex.split(options))
    assert (args.shards_dir, args.batch, args.per_batch) == ("r/shards/en_web_cc", 1, 400)
    assert args.input == ["r/shards/en_web_cc/{shard}.jsonl", "tok.model"]
    assert args.output == ["r/tokenized/{shard}.bin"]
    assert command == ["tokenize", "--input", "r/shards/en_web_cc/{shard}.jsonl", "--opt", "a b"]
