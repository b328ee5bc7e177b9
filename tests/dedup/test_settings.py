"""The files the dedup rules wait for (workflow_scripts.dedup.settings)."""

from __future__ import annotations

from pathlib import Path

from workflow_scripts.dedup.settings import assignment_waits, pair_files


def test_a_filter_batch_waits_for_the_cluster_summary_while_an_assignment_is_missing(tmp_path: Path) -> None:
    shards = [f"r/shards/en_web_cc/en_web_cc_split_{i:04d}.jsonl" for i in range(2)]
    assign = tmp_path / "assign"
    assign.mkdir()
    (assign / "en_web_cc_split_0000.assign.json").write_text("{}")
    first = f"{assign}/en_web_cc_split_0000.assign.json"
    assert assignment_waits(str(assign), shards, "summary.json") == [first, "summary.json"]
    (assign / "en_web_cc_split_0001.assign.json").write_text("{}")
    assert assignment_waits(str(assign), shards, "summary.json") == [
        first,
        f"{assign}/en_web_cc_split_0001.assign.json",
    ]


def test_the_cluster_step_reads_every_partition_of_every_pass() -> None:
    assert pair_files("w", 2, 1) == [
        "w/pairs/exact_0.pairs",
        "w/pairs/exact_1.pairs",
        "w/pairs/bands_0_0.pairs",
        "w/pairs/bands_0_1.pairs",
    ]
