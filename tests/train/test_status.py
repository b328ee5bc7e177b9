"""``snakepack status`` before and during training: its table says what is not measured yet."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from workflow_scripts.core import train_layout
from workflow_scripts.core.train_layout import TrainLayout
from workflow_scripts.train import status


@pytest.fixture
def train_dir(tmp_path: Path) -> Path:
    """Two packs planned, none started; the first with one segment record (2.5 s/iter) when asked."""
    layout = TrainLayout(str(tmp_path))
    rows = ["pack,iteration_offset,train_iters,checkpoint_factor,exit_interval,segments,seconds_per_iter"]
    rows += ["a,0,10,5,5,2,17", "b,10,10,5,5,2,17"]
    Path(layout.file(train_layout.CONFIGS_CSV)).write_text("\n".join(rows) + "\n")
    for pack in "ab":
        Path(layout.keys(pack)).parent.mkdir(parents=True)
        keys = {"set": {"save": {"value": str(tmp_path / "checkpoints")}}, "trainer": "neox"}
        Path(layout.keys(pack)).write_text(json.dumps(keys))
    return tmp_path


def table(train_dir: Path, capsys: pytest.CaptureFixture[str]) -> list[list[str]]:
    assert status.main(["--train-dir", str(train_dir), "--logs-dir", str(train_dir / "logs")]) == 0
    lines = capsys.readouterr().out.splitlines()
    return [line.split() for line in lines[:3]]


def test_s_per_iter_before_training_is_a_dash_not_none(train_dir: Path, capsys) -> None:
    header, a, b = table(train_dir, capsys)
    column = header.index("s/iter")
    assert a[column] == b[column] == "-"
    record = Path(TrainLayout(str(train_dir)).record("a", 0))
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(json.dumps({"s_per_iter": 2.5}))
    header, a, b = table(train_dir, capsys)
    assert (a[column], b[column]) == ("2.5", "-")
