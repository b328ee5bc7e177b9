"""The report's files as the rules declare them (workflow_scripts.report.layout)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.utils import Workflow, tail
from workflow_scripts.report import layout


def test_each_section_s_captions_and_outputs(tmp_path: Path) -> None:
    (tmp_path / "plan").mkdir()
    (tmp_path / "plan" / "index.html").write_text("")  # made: declared through report()

    def report(path: str, **how: Any) -> tuple[str, str]:
        return path, how["category"]

    config = {"train": {"base_config": None}, "dedup": {"enabled": True}, "datapacks": {"exclude": []}}
    captions, outputs = layout.rule_files(".", str(tmp_path), report, config)
    assert sorted(captions) == sorted(outputs) == ["data", "plan", "training"]
    assert captions["data"] == layout.captions(".", "data", layout.chart_names(False, True)["data"])
    assert "report/data/dedup_clusters.rst" in captions["data"]
    assert "report/plan/checkpoints.rst" not in captions["plan"]  # no trainer configs
    assert outputs["plan"]["page"] == (f"{tmp_path}/plan/index.html", "Plan")
    assert outputs["training"]["loss_chart"] == f"{tmp_path}/training/loss.png"  # not made yet: the path
    assert "excluded_chart" not in outputs["plan"]
    config["datapacks"]["exclude"] = "exclude.txt"  # a file listing them
    captions, outputs = layout.rule_files(".", str(tmp_path), report, config)
    assert captions["plan"][-1] == "report/plan/excluded.rst" and "excluded_table" in outputs["plan"]


def test_the_excluded_chart_is_declared_with_exclusions_only(workflow: Workflow) -> None:
    """``datapacks.exclude`` set: the plan's rule declares the excluded chart (so a missing one is made
    again and ``--report`` shows it); without it, no rule makes it."""
    (workflow.root / "ex.yaml").write_text('datapacks: {exclude: ["0123456789abcdef"]}\n')
    chart = ("--", "results/report/plan/excluded.png", "results/report/plan/excluded.csv")
    planned = workflow.ok("-n", "--configfile", "config/sample.yaml", "ex.yaml", *chart)
    assert "rule report_plan:" in planned, tail(planned)
    proc = workflow.run("-n", *chart)
    assert proc.returncode != 0 and "MissingRuleException" in proc.output, tail(proc.output)
    assert (workflow.root / "report" / "plan" / "excluded.rst").is_file()
