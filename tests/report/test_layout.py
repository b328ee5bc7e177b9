"""The report's files as the rules declare them (workflow_scripts.report.layout)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from workflow_scripts.report import layout


def test_each_section_s_captions_and_outputs(tmp_path: Path) -> None:
    (tmp_path / "plan").mkdir()
    (tmp_path / "plan" / "index.html").write_text("")  # made: declared through report()

    def report(path: str, **how: Any) -> tuple[str, str]:
        return path, how["category"]

    captions, outputs = layout.rule_files(".", str(tmp_path), report, False, True)
    assert sorted(captions) == sorted(outputs) == ["data", "plan", "training"]
    assert captions["data"] == layout.captions(".", "data", layout.chart_names(False, True)["data"])
    assert "report/data/dedup_clusters.rst" in captions["data"]
    assert "report/plan/checkpoints.rst" not in captions["plan"]  # no trainer configs
    assert outputs["plan"]["page"] == (f"{tmp_path}/plan/index.html", "Plan")
    assert outputs["training"]["loss_chart"] == f"{tmp_path}/training/loss.png"  # not made yet: the path
