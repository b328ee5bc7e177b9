"""What dedup calls an "exact" duplicate is the same text once normalised: its report and terminal line say
so (the stats keys stay ``exact``/``near``)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tests.dedup.test_steps import doc, run, text
from workflow_scripts.core.fsio import read_json
from workflow_scripts.dedup import report
from workflow_scripts.dedup.settings import DedupSettings


def test_texts_differing_only_in_digits_are_normalised_exact_copies(tmp_path: Path) -> None:
    t = text(random.Random(3))
    r = run(tmp_path, {"en_web_cc_split_0000.jsonl": [doc("a", f"{t} 2019"), doc("b", f"{t} 2024")]})
    assert r["stats"]["removed"] == {"exact": 1, "near": 0, "total": 1}  # the keys readers use
    exact = read_json(r["out"] / "dedup_report.json")["reasons"]["exact"]
    assert exact.startswith("normalised-exact: the same words after NFKC, lowercase, every number as 0, ")
    assert exact.endswith("so texts that differ only there are copies")
    assert report.summary_line(r["stats"]) == "2 in, 1 out, removed 1 normalised-exact, 0 near"


@pytest.mark.parametrize("off", ["digits", "lowercase", "nfkc", "punctuation"])
def test_the_definition_follows_the_settings(off: str) -> None:
    on = report.reasons(DedupSettings())["exact"]
    without = report.reasons(DedupSettings(**{off: False}))["exact"]
    assert without != on and without.startswith("normalised-exact: the same words after ")


def test_the_removal_chart_says_normalised_exact(tmp_path: Path) -> None:
    from workflow_scripts.report import data

    t = text(random.Random(4))
    r = run(tmp_path, {"en_web_cc_split_0000.jsonl": [doc("a", t), doc("b", t.upper())]})
    chart = data.dedup_removal(read_json(r["out"] / "dedup_report.json"))
    labels = [t.get_text() for t in chart.figure.axes[0].get_legend().get_texts()]
    assert labels == ["normalised-exact", "near"]
