"""The names of the train tree (workflow_scripts.core.train_layout), and that nothing else spells them."""

from __future__ import annotations

import re
from pathlib import Path

from tests.utils import REPO
from workflow_scripts.core import train_layout
from workflow_scripts.core.train_layout import TrainLayout


def test_paths_of_a_pack_and_its_segments() -> None:
    layout = TrainLayout("results/train", "logs")
    assert layout.config("main_1", ".yml") == "results/train/main_1/main_1.yml"
    assert layout.keys("main_1") == "results/train/main_1/keys.json"
    assert layout.record("main_1", 2) == "results/train/main_1/segments/2.json"
    assert layout.evaluation("main_1", "{segment}") == "results/train/main_1/eval/{segment}.json"
    assert layout.retention("{pack}", 0) == "results/train/{pack}/retention/0.json"
    assert layout.done("main_1") == "results/train/main_1/done.json"
    assert layout.file(train_layout.LOSS_CSV) == "results/train/loss.csv"
    assert layout.step_log("main_1", "segment", 2) == "logs/train/main_1/segment_2.log"
    assert layout.step_log("main_1", "done") == "logs/train/main_1/done.log"
    assert layout.log("main_1_config") == "logs/train/main_1_config.log"
    assert layout.import_checkpoint("neox") == "results/train/import/global_step0"
    assert layout.import_checkpoint("megatron") == "results/train/import/iter_0000000"  # Megatron-LM's tag
    record = layout.record("main_1", 2)
    assert (
        train_layout.attempt(record, 2, "20261124T1200", 7)
        == "results/train/main_1/segments/attempts/2.20261124T1200.7.json"
    )
    assert (
        train_layout.finetune_off(record, 2, ".args") == "results/train/main_1/segments/.2.finetune-off.args"
    )


def test_records_are_found_and_told_apart(tmp_path: Path) -> None:
    layout = TrainLayout(str(tmp_path))
    files = [
        layout.record("p", 0),
        train_layout.attempt(layout.record("p", 0), 0, "t", 1),
        layout.file(train_layout.LOSS_CSV),
        f"{tmp_path}/reference/p/segments/global_step0-5.json",
        f"{tmp_path}/reference/p/loss.csv",
        layout.evaluation("p", 0),  # not a training record
    ]
    for f in files:
        Path(f).parent.mkdir(parents=True, exist_ok=True)
        Path(f).write_text("{}")
    assert layout.records() == sorted(files[:5])
    assert layout.records_of("p") == [layout.record("p", 0)]
    kinds = [train_layout.kind_of(f) for f in files]
    assert kinds == [
        ("record", "p", "slurm"),
        ("attempt", "p", "slurm"),
        None,
        ("record", "p", "reference"),
        None,
        None,
    ]


def test_the_train_tree_is_spelled_only_here() -> None:
    """`segments/`, `attempts/`, `done.json` and `keys.json` appear in no other module, rule or script (tests
    may spell them in what they assert)."""
    spelled = re.compile(r"segments/|attempts/|done\.json|keys\.json")
    files = [*(REPO / "workflow_scripts").rglob("*.py"), *(REPO / "rules").glob("*.smk"), REPO / "Snakefile"]
    files += list((REPO / "bench").glob("*.py"))
    found = {str(f.relative_to(REPO)) for f in files if spelled.search(f.read_text(encoding="utf-8"))}
    assert found == {"workflow_scripts/core/train_layout.py"}
