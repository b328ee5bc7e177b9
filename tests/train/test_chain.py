"""The training chain as plain data (workflow_scripts.train.chain)."""

from __future__ import annotations

import pytest

from workflow_scripts.core.train_layout import TrainLayout
from workflow_scripts.train.chain import Chain, ChainError, Pack
from workflow_scripts.train.settings import TrainSettings

LAYOUT = TrainLayout("r/train", "logs")


def packs() -> list[Pack]:
    """Two packs: steps 0-10 in 2 segments, 10-40 in 3 (spares included)."""
    fields = ("pack", "iteration_offset", "train_iters", "exit_interval", "segments", "hours")
    summaries = [
        dict(zip(fields, ("warmup_0", 0, 10, 27, 2, 0.5), strict=True)),
        dict(zip(fields, ("main_1", 10, 30, 27, 3, 2.0), strict=True)),
    ]
    return [Pack.from_summary(LAYOUT.keys(s["pack"]), s) for s in summaries]


def build(sft: bool = False, **train: object) -> Chain:
    return Chain.build(packs(), TrainSettings.from_config(train), sft, LAYOUT)


def test_segments_wait_for_the_one_before_and_a_pack_for_the_previous_pack_s_end() -> None:
    chain = build(eval_launch="eval {tag}")
    assert [(s.pack.name, s.k) for s in chain.segments] == [
        ("warmup_0", 0), ("warmup_0", 1), ("main_1", 0), ("main_1", 1), ("main_1", 2)
    ]  # fmt: skip
    assert chain.waits_for("warmup_0", 0) == []
    assert chain.waits_for("warmup_0", 1) == ["r/train/warmup_0/segments/0.json"]
    assert chain.waits_for("main_1", 0) == ["r/train/warmup_0/done.json"]
    assert chain.segment("main_1", 0).previous == chain.segment("warmup_0", 1)


def test_retention_waits_for_its_evaluation_and_the_retention_before() -> None:
    chain = build(eval_launch="eval {tag}")
    assert chain.prune_inputs("main_1", 0) == {
        "record": "r/train/main_1/segments/0.json",
        "evaluation": ["r/train/main_1/eval/0.json"],
        "previous": ["r/train/warmup_0/retention/1.json"],
    }
    assert chain.prune_inputs("warmup_0", 0)["previous"] == []
    assert chain.evaluations() == [s.evaluation for s in chain.segments] and len(chain.evaluations()) == 5
    assert build(eval_launch=None).prune_inputs("main_1", 0)["evaluation"] == []  # no eval command


@pytest.mark.parametrize(
    ("sft", "train", "evaluates"),
    [
        (False, {"eval_launch": "e"}, True),
        (False, {"eval_launch": None}, False),
        (True, {"eval_launch": "e"}, False),
        (True, {"eval_launch": "e", "evaluate_sft": True}, True),
    ],
)
def test_evaluation_needs_a_command_and_is_off_for_sft_unless_asked(
    sft: bool, train: dict, evaluates: bool
) -> None:
    chain = build(sft, **train)
    assert chain.evaluate is evaluates and bool(chain.evaluations()) is evaluates


def test_retention_protects_every_pack_end_and_the_starting_checkpoint() -> None:
    assert build().protected == (10, 40)
    assert build(finetune_from="/ckpt/global_step5").protected == (10, 40, 5)


def test_records_target_and_estimates() -> None:
    chain = build()
    assert chain.records("main_1") == [f"r/train/main_1/segments/{k}.json" for k in range(3)]
    assert chain.records() == [s.record for s in chain.segments]
    assert chain.target() == [
        "r/train/warmup_0/done.json",
        "r/train/main_1/done.json",
        *(s.retention for s in chain.segments),
        "r/train/loss.csv",
    ]
    # 2 h over the 2 segments that train (the third is a spare): 3600 s each
    assert chain.pack("main_1").estimate_s() == 3600 and chain.pack("main_1").end == 40


def test_a_segment_outside_the_chain_is_an_error_naming_the_pack_s_segments() -> None:
    with pytest.raises(ChainError, match=r"main_1 has 3 segments \(0-2\), not 3"):
        build().waits_for("main_1", 3)
    with pytest.raises(ChainError, match="valid_en is not a pack of the plan"):
        build().segment("valid_en", 0)


def test_a_pack_with_nothing_to_train_keeps_its_place_in_the_chain() -> None:
    """A pack of 0 iterations has no segment (no record, evaluation or retention, no ``-1`` file): its end,
    checked after the previous pack's, is what the next pack waits for."""
    fields = ("pack", "iteration_offset", "train_iters", "exit_interval", "segments", "hours")
    rows = [("warmup_0", 0, 10, 27, 2, 0.5), ("tail_1", 10, 0, 27, 0, 0.0), ("main_2", 10, 30, 27, 3, 2.0)]
    summaries = [dict(zip(fields, row, strict=True)) for row in rows]
    packs = [Pack.from_summary(LAYOUT.keys(s["pack"]), s) for s in summaries]
    chain = Chain.build(packs, TrainSettings.from_config({"eval_launch": "eval {tag}"}), False, LAYOUT)
    assert [s.pack.name for s in chain.segments] == ["warmup_0"] * 2 + ["main_2"] * 3
    assert chain.waits_for("main_2", 0) == ["r/train/tail_1/done.json"]
    assert chain.records("tail_1") == [] and chain.finish_waits("tail_1") == ["r/train/warmup_0/done.json"]
    assert chain.records("main_2") and chain.finish_waits("main_2") == []
    assert chain.prune_inputs("main_2", 0)["previous"] == ["r/train/warmup_0/retention/1.json"]
    made = [*chain.target(), *chain.evaluations(), *chain.records()]
    assert [p for p in made if "tail_1" in p] == ["r/train/tail_1/done.json"]
    assert not [p for p in made if "-1" in p]
    first = Chain.build(packs[1:], TrainSettings.from_config({}), False, LAYOUT)  # nothing before it
    assert first.finish_waits("tail_1") == [] and first.waits_for("main_2", 0) == ["r/train/tail_1/done.json"]
    with pytest.raises(ChainError, match=r"tail_1 has no segment \(nothing to train\), not 0"):
        chain.segment("tail_1", 0)
