"""A data-only run (no ``datapacks.phases``): the run ends with its report, whose plan charts say there are
no packs."""

from __future__ import annotations

import pandas as pd

from tests.utils import Workflow, tail
from workflow_scripts.report import plan as plan_charts
from workflow_scripts.report.layout import chart_names


def test_a_data_only_run_reports_a_plan_without_packs(workflow: Workflow) -> None:
    (workflow.root / "config" / "data_only.yaml").write_text(
        "datapacks: {phases: []}\ntrain: {base_config: null}\n"
    )
    proc = workflow.run(
        "--profile",
        "profiles/local",
        "--cores",
        "2",
        "--configfile",
        "config/sample.yaml",
        "config/data_only.yaml",
    )
    assert proc.returncode == 0, tail(proc.output)
    section = workflow.root / "results" / "report" / "plan"
    for chart in chart_names(trainer_configs=False, dedup=True)["plan"]:
        assert (section / f"{chart}.png").read_bytes().startswith(b"\x89PNG"), chart
        assert pd.read_csv(section / f"{chart}.csv")["note"].tolist() == [plan_charts.NO_PACKS]
    assert plan_charts.NO_PACKS in (section / "index.html").read_text()
    assert (workflow.root / "results" / "report" / "data" / "index.html").exists()
    merged = [p.name for p in (workflow.root / "results" / "merged").iterdir()]
    assert merged and all(name.startswith("valid_") for name in merged)  # held-out packs only
