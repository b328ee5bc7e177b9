"""Seed 004's arithmetic, with the values it should have written (its comments are wrong in places)."""

from __future__ import annotations

import pytest

from workflow_scripts.core import schedule as s


@pytest.fixture
def ramp() -> s.Rampup:
    return s.Rampup(start=16, increment=16, samples=5_000_000, global_batch_size=1024)  # --rampup-batch-size


def test_rampup_levels_follow_megatrons_rule(ramp: s.Rampup) -> None:
    steps = ramp.steps()
    assert ramp.increments == 63 and len(steps) == 64
    assert [(x.batch_size, x.iterations) for x in steps[:4]] == [
        (16, 4961),
        (32, 2480),
        (48, 1654),
        (64, 1240),
    ]
    for x in steps:  # each level really has Megatron's batch size at its first and last iteration
        assert ramp.batch_size(x.consumed_before) == x.batch_size
        if x.iterations:
            assert ramp.batch_size(x.consumed_before + (x.iterations - 1) * x.batch_size) == x.batch_size
            assert ramp.batch_size(x.consumed_before + x.iterations * x.batch_size) != x.batch_size
    # the seed says the ramp ends near 10k steps; it ends at 23,456
    assert ramp.end_iteration == 23_456 and ramp.consumed(ramp.end_iteration) == 5_000_528


def test_warmup_in_samples(ramp: s.Rampup) -> None:
    # 2000 warmup steps all run at batch 16 (the first level lasts 4961 steps): 32,000 samples, not 216,320
    assert ramp.consumed(2000) == 32_000 and ramp.iterations(32_000) == 2000
    assert ramp.iterations(216_320) == 8641  # what the seed's figure really warms up over
    assert s.samples_from_tokens(260e9, 2048) == 126_953_125  # --lr-decay-samples


def test_rampup_needs_whole_increments() -> None:
    with pytest.raises(s.ScheduleError, match="multiple of the increment 16"):
        s.Rampup(16, 16, 1000, 1000)
    assert s.Rampup(1024, 16, 1000, 1024).steps() == [s.RampStep(1024, 0, 0, 0)]


def test_data_parallel_and_divisibility() -> None:
    assert s.data_parallel_size(32, 4, tensor_parallel=2, pipeline_parallel=4) == 16  # the seed's 32 nodes
    assert s.check_batch(1024, 1, 16) == 64
    with pytest.raises(
        s.ScheduleError, match=r"not divisible by micro batch 1 x data parallel 32 = 32: use 0|16"
    ):
        s.check_batch(16, 1, 32)
    with pytest.raises(s.ScheduleError, match="use 576 or 600"):
        s.check_batch(580, 3, 8)
    with pytest.raises(s.ScheduleError, match="do not split into model replicas"):
        s.data_parallel_size(3, 4, tensor_parallel=8)


def test_model_size_heads_and_time() -> None:
    assert s.parameter_count(40, 5120, 50257, 1024) == 12_848_133_120  # "13B"
    assert s.parameter_count(40, 5120, 50257, 1024, ffn_hidden=20480) == 12_848_133_120
    assert s.check_heads(5120, 40) == 128
    with pytest.raises(s.ScheduleError, match="32 heads x head size 128 = 4096, not the hidden size 5120"):
        s.check_heads(5120, 32, 128)
    assert round(s.training_days(300e9, 13e9, 256, 45), 2) == 31.35


def test_checkpoint_cadence_and_exit() -> None:
    factor = s.checkpoint_factor(
        seconds_per_iter=17, hours_between_checkpoints=2
    )  # seed 000: ~2 h at 17 s/iter
    assert factor == 424
    # a 48 h limit with 10 + 10 minutes of margins: the largest multiple of the factor that fits
    assert s.exit_interval(48 * 60, 17, factor) == 424 * 23
    assert s.exit_interval(48 * 60, 17, factor) * 17 <= (48 * 60 - 20) * 60
    assert s.exit_duration_minutes(20 * 60) == 1190  # 60 x 20 - 10 (the seed wrote 60 x 24 - 10)
    with pytest.raises(s.ScheduleError, match="fewer than one checkpoint interval"):
        s.exit_interval(60, 17, 424)
    assert s.segments(29790, 8550) == 4 and s.segments(29790, 8550, spares=2) == 6 and s.segments(0, 10) == 0


def test_checkpoint_rounds() -> None:
    rounds = [s.Round(10, 100), s.Round(18, 1000), s.Round(1500)]  # seed 004's interpretability schedule
    saves = s.save_iterations(rounds, 0, 4500)
    assert saves[:11] == [10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 108]
    assert [i for i in saves if i > 1000] == [1500, 3000, 4500]
    assert len([i for i in saves if 100 < i <= 1000]) == 50  # "50 checkpoints, interval 18 steps"
    assert s.neox_rounds(rounds, 0, 4500) == (1500, saves[:60])
    assert s.save_iterations(rounds, 2000, 2600) == [2600]  # a later pack: the final save only
    assert s.kept_checkpoints(saves, 2, milestones=[100, 1000]) == [100, 3000, 4500]
    assert s.kept_checkpoints(saves, 0) == saves
    assert s.checkpoint_bytes(13e9) == 182e9


def test_cadence_of_a_pack() -> None:
    cadence = s.Cadence(
        seconds_per_iter=17, checkpoint_hours=2.125, time_limit_minutes=2520, spare_segments=1
    )
    pack = cadence.pack(offset=2000, train_iters=29_640)
    assert (pack.checkpoint_factor, pack.exit_interval, pack.segments) == (450, 8550, 5)
    assert pack.saves[:2] == [2250, 2700] and pack.saves[-1] == 31_640
    assert cadence.pack(0, 2000, factor=1750).exit_interval == 8750
    rounds = s.Cadence(1, 1, 60, rounds=(s.Round(10, 100), s.Round(50))).pack(0, 120)
    assert (rounds.checkpoint_factor, rounds.extra_save_iters) == (50, [10, 20, 30, 40, 60, 70, 80, 90])
    assert (rounds.exit_interval, rounds.segments, rounds.hours) == (2400, 1, 0.033)
    assert rounds.saves == [10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 120]
