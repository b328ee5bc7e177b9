"""Where the training section finds the trainers' records: the segments' under the train folder, the
reference trainer's beside the run's checkpoint folder (``train.checkpoints_dir``), wherever that is."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from workflow_scripts.core import train_layout
from workflow_scripts.core.fsio import write_json
from workflow_scripts.core.train_layout import TrainLayout
from workflow_scripts.report import training


def test_the_reference_trainer_s_records_beside_a_custom_checkpoint_folder(tmp_path: Path) -> None:
    train, checkpoints = tmp_path / "results" / "train", tmp_path / "scratch" / "run1" / "checkpoints"
    layout = TrainLayout(str(train))
    segment = {"pack": "main_1", "segment": 0, "first_step": 0, "last_step": 10, "iterations": 10}
    write_json(layout.record("main_1", 0), {**segment, "slurm_job_id": "1001", "s_per_iter": 0.5})
    # what the reference trainer leaves beside its `save` folder (its metrics.py, through default_out)
    run = Path(train_layout.reference_run(str(checkpoints.parent), "main_1"))
    ours = [
        Path(train_layout.reference_segments(str(run))) / "global_step0-10.json",
        run / train_layout.LOSS_CSV,
        run / train_layout.EVAL_JSONL,
    ]
    write_json(ours[0], {**segment, "train_seconds": 4.0, "wall_seconds": 6.0, "exit": "exit_interval"})
    ours[1].write_text(
        "iteration,loss,lr,tokens_per_s\n" + "".join(f"{i},{10 - i / 2},0.1,99\n" for i in range(1, 11))
    )
    ours[2].write_text(json.dumps({"iteration": 10, "valid_loss": 4.5, "valid_ppl": 90.0}) + "\n")
    assert layout.records(str(checkpoints)) == sorted([layout.record("main_1", 0), *map(str, ours)])
    assert layout.records() == [layout.record("main_1", 0)]  # beside the train folder's own checkpoints
    assert str(ours[0]) in layout.stamps(str(checkpoints))  # the report rule's trigger sees them too

    out = tmp_path / "report"
    args = ["--train-dir", str(train), "--checkpoints", str(checkpoints), "--out-dir", str(out)]
    assert training.main(args) == 0
    loss = pd.read_csv(out / "loss.csv")
    assert loss[loss["kind"] == "train"]["iteration"].tolist() == list(range(1, 11))
    assert loss[loss["kind"] == "validation"]["loss"].tolist() == [4.5]
    timeline = pd.read_csv(out / "timeline.csv")
    assert sorted(timeline["trainer"]) == ["reference", "slurm"]
