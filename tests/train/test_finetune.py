"""Seed 003's fine-tuning folder and its finetune flag."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from workflow_scripts.cli import main as snakepack
from workflow_scripts.train import finetune


def test_folder_links_the_start_and_the_flag_flips_once_the_run_saves(tmp_path: Path) -> None:
    start = tmp_path / "final_train_v2" / "global_step423858"
    start.mkdir(parents=True)
    ckpt = tmp_path / "sft_v1"
    assert snakepack(["finetune-start", "--checkpoints", str(ckpt), "--start", str(start)]) == 0
    link = ckpt / "global_step423858"
    assert os.readlink(link) == "../final_train_v2/global_step423858" and link.resolve() == start
    assert (ckpt / "latest").read_text() == "global_step423858\n"
    assert finetune.finetune_flag(str(ckpt), str(start))  # first job: weights only, fresh optimizer
    assert finetune.prepare(str(ckpt), str(start)) == "global_step423858"  # a retried first job: same
    (ckpt / "global_step423958").mkdir()
    (ckpt / "latest").write_text("global_step423958\n")  # the run saved its own checkpoint
    assert not finetune.finetune_flag(str(ckpt), str(start))
    finetune.prepare(str(ckpt), str(start))
    assert (ckpt / "latest").read_text() == "global_step423958\n"  # never reset to the start
    assert not finetune.finetune_flag(str(ckpt), None)


def test_bad_starts_are_refused(tmp_path: Path) -> None:
    with pytest.raises(finetune.FinetuneError, match="is not a directory"):
        finetune.prepare(str(tmp_path / "c"), str(tmp_path / "global_step5"))
    other = tmp_path / "x" / "global_step5"
    other.mkdir(parents=True)
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "global_step5").symlink_to(tmp_path)
    with pytest.raises(finetune.FinetuneError, match="is not a link to the starting checkpoint"):
        finetune.prepare(str(tmp_path / "c"), str(other))
    with pytest.raises(Exception, match="not a global_stepN"):
        finetune.prepare(str(tmp_path / "c"), str(tmp_path / "x"))


def test_megatron_starts_from_an_iteration_0_import_but_not_from_a_step_the_run_saves(tmp_path: Path) -> None:
    """Megatron-LM's --finetune restarts the count at 0 and saves only after a trained iteration, so an
    import at iteration 0 (train.init_from.hf) is never overwritten through the link; iteration 4 of a run
    to 20 would be."""
    start = tmp_path / "import" / "iter_0000000"
    start.mkdir(parents=True)
    ckpt = tmp_path / "checkpoints"
    assert finetune.prepare(str(ckpt), str(start), "megatron", last_step=20) == "iter_0000000"
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == "0"
    assert finetune.finetune_flag(str(ckpt), str(start), "megatron")
    saved = tmp_path / "other" / "iter_0000004"
    saved.mkdir(parents=True)
    with pytest.raises(finetune.FinetuneError, match="restarts the iteration count at 0"):
        finetune.prepare(str(tmp_path / "c2"), str(saved), "megatron", last_step=20)
