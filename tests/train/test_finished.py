"""The pack check (train-finished) of a pack with nothing to train: no segment, so no record."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from workflow_scripts.core.fsio import read_json
from workflow_scripts.train import finished


def keys_file(tmp_path: Path, offset: int, iters: int) -> str:
    """A GPT-NeoX pack's keys file: global steps ``offset`` -> ``offset + iters`` in ``checkpoints/``."""
    (tmp_path / "checkpoints").mkdir(exist_ok=True)
    values = {"iteration_offset": offset, "train_iters": iters, "exit_interval": 10}
    values["save"] = str(tmp_path / "checkpoints")
    summary = {"pack": "tail_1", "segments": 0, "iteration_offset": offset, "train_iters": iters}
    path = tmp_path / "keys.json"
    keys = {"config": "p.yml", "summary": summary, "set": {k: {"value": v} for k, v in values.items()}}
    path.write_text(json.dumps(keys))
    return str(path)


def test_a_pack_with_no_segment_is_done_where_the_pack_before_ended(tmp_path: Path) -> None:
    keys, done = keys_file(tmp_path, 10, 0), tmp_path / "done.json"
    with pytest.raises(finished.UserError, match=r"latest .* is none, its end is global_step10"):
        finished.main(["--keys", keys, "--out", str(done)])  # the pack before has not ended yet
    (tmp_path / "checkpoints" / "global_step10").mkdir()
    (tmp_path / "checkpoints" / "latest").write_text("global_step10\n")
    assert finished.main(["--keys", keys, "--out", str(done)]) == 0
    summary = read_json(done)
    assert (summary["first_step"], summary["last_step"], summary["checkpoint"]) == (10, 10, "global_step10")
    assert summary["segments"] == 0 and summary["iterations_recorded"] == 0 and summary["slurm_job_ids"] == []
    assert summary["s_per_iter"] is None and summary["train_loss"] is None


def test_a_first_pack_with_nothing_to_train_is_done_before_any_checkpoint(tmp_path: Path) -> None:
    done = tmp_path / "done.json"
    assert finished.main(["--keys", keys_file(tmp_path, 0, 0), "--out", str(done)]) == 0
    assert read_json(done)["checkpoint"] == "none" and read_json(done)["last_step"] == 0
