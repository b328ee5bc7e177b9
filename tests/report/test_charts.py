"""The report's sections on the sample: every chart and table is written, the tables hold the numbers of the
stage outputs, the bytes are stable, and what has not run is absent without an error."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import orjson
import pandas as pd
import pytest

from tests.report.conftest import RUN, write_training_records
from tests.utils import Workflow
from workflow_scripts.cli import main as snakepack
from workflow_scripts.core.settings import schema_entry
from workflow_scripts.datapacks import plan_table
from workflow_scripts.datapacks.iterations import NO_ESTIMATE
from workflow_scripts.datapacks.plan import Plan
from workflow_scripts.datapacks.plan_files import add_training
from workflow_scripts.datapacks.planner import make_plan
from workflow_scripts.datapacks.settings import PlanSettings
from workflow_scripts.report import plan as plan_charts
from workflow_scripts.report.charts import write_section

CHARTS = {
    "plan": ["schedule", "tokens_by_language", "tokens_by_domain", "epochs", "mixture", "checkpoints"],
    "data": ["funnel", "dedup_clusters", "dedup_removal", "doc_tokens", "quarantine"],
    "training": ["loss", "speed", "timeline", "consumption"],
}


def read_json(path: Path) -> dict:
    return orjson.loads(path.read_bytes())


def test_every_section_writes_its_charts_tables_and_page(trained: Workflow) -> None:
    report = trained.root / "results" / "report"
    for section, charts in CHARTS.items():
        for chart in charts:
            assert (report / section / f"{chart}.png").read_bytes().startswith(b"\x89PNG"), (section, chart)
            assert (report / section / f"{chart}.csv").stat().st_size > 0, (section, chart)
        page = (report / section / "index.html").read_text()
        assert all(f'id="chart-{chart}"' in page for chart in charts), section


def test_plan_tables_hold_the_plan(sample_run: Workflow) -> None:
    results = sample_run.root / "results"
    plan = read_json(results / "plan.json")
    schedule = pd.read_csv(results / "report" / "plan" / "schedule.csv")
    keys = ["name", "phase", "tokens", "train_iters", "iteration_offset", "trained_tokens", "wall_hours"]
    assert schedule.rename(columns={"pack": "name"}).to_dict("records") == [
        {k: p[k] for k in keys} for p in plan["packs"]
    ]
    by_lang = pd.read_csv(results / "report" / "plan" / "tokens_by_language.csv").set_index("pack")
    assert by_lang.sum(axis=1).to_dict() == {p["name"]: p["tokens"] for p in plan["packs"]}
    epochs = pd.read_csv(results / "report" / "plan" / "epochs.csv").set_index("source")
    final = epochs[plan["packs"][-1]["phase"]].to_dict()
    sources = plan_table.source_frame(Plan.read(results / "plan.json"))
    read = dict(zip(sources["source"], sources["epochs"], strict=True))
    assert final == pytest.approx(read)
    assert set(epochs.index[epochs["read_again"]]) == {s for s, e in read.items() if e > 1}


def test_data_tables_add_up(sample_run: Workflow) -> None:
    results = sample_run.root / "results"
    funnel = pd.read_csv(results / "report" / "data" / "funnel.csv").set_index("stage")
    for stage, path in (("ingest", "shards"), ("dedup", "dedup"), ("tokenize", "tokenized")):
        stats = read_json(results / path / "stats.json")
        assert (funnel.loc[stage, "docs_in"], funnel.loc[stage, "docs_out"]) == (
            stats["docs_in"],
            stats["docs_out"],
        )
    assert funnel["adds_up"].dropna().astype(bool).all()
    plan = read_json(results / "plan.json")
    assert funnel.loc["packs", "tokens"] == sum(p["tokens"] for p in plan["packs"])
    signature = read_json(results / "tokenized" / "signature.json")
    lengths = pd.read_csv(results / "report" / "data" / "doc_tokens.csv")
    assert lengths["documents"].sum() == sum(p["documents"] for p in signature["prefixes"])
    manifest = read_json(results / "sample" / "manifest.json")
    with open(results / "report" / "data" / "quarantine.csv") as f:
        quarantined = {(r["reason"], r["example"]) for r in csv.DictReader(f)}
    bad = [(b["reason"], f"{b['file']}:{b['line']}") for b in manifest["bad_records"]]
    assert quarantined <= set(bad) and {r for r, _ in quarantined} == {r for r, _ in bad}


def test_charts_are_byte_stable(sample_run: Workflow, tmp_path: Path) -> None:
    results = sample_run.root / "results"
    args = [
        "report",
        "plan",
        "--plan",
        str(results / "plan.json"),
        "--configs",
        str(results / "train/configs.csv"),
    ]
    args += ["--mixtures", *map(str, sorted((results / "mixtures").glob("*.json")))]
    captions = sorted(map(str, (sample_run.root / "report" / "plan").glob("*.rst")))
    for out in ("a", "b"):
        assert snakepack([*args, "--captions", *captions, "--out-dir", str(tmp_path / out)]) == 0
    for path in sorted((results / "report" / "plan").iterdir()):
        assert (tmp_path / "a" / path.name).read_bytes() == path.read_bytes(), path.name
        assert (tmp_path / "b" / path.name).read_bytes() == path.read_bytes(), path.name


def test_training_charts_read_the_records(sample_run: Workflow, tmp_path: Path) -> None:
    plan_path = sample_run.root / "results" / "plan.json"
    plan = read_json(plan_path)
    args = ["report-training", "--plan", str(plan_path), "--seconds-per-iter", "2"]
    assert (
        snakepack([*args, "--train-dir", str(tmp_path / "none"), "--out-dir", str(tmp_path / "empty")]) == 0
    )
    assert all((tmp_path / "empty" / f"{c}.png").is_file() for c in CHARTS["training"])
    assert all(not (tmp_path / "empty" / f"{c}.csv").read_text().strip(' "\n') for c in CHARTS["training"])
    write_training_records(tmp_path / "train", plan)
    assert snakepack([*args, "--train-dir", str(tmp_path / "train"), "--out-dir", str(tmp_path / "out")]) == 0
    speed = pd.read_csv(tmp_path / "out" / "speed.csv")
    assert speed["s_per_iter"].tolist() == [1.5, 1.75, 2.0] and set(speed["planned_s_per_iter"]) == {2.0}
    timeline = pd.read_csv(tmp_path / "out" / "timeline.csv")
    assert timeline["slurm_job_id"].tolist() == [1001, 1002, 1003, 1004]  # the killed run before its retry
    assert (timeline["retries"].tolist(), timeline["failed"].tolist()) == ([0, 0, 0, 1], [0, 0, 1, 0])
    starts = [0, 600 / 3600, 1260 / 3600, 1560 / 3600]
    assert timeline["start_hours"].tolist() == pytest.approx(starts, abs=1e-6)
    loss = pd.read_csv(tmp_path / "out" / "loss.csv")
    first, second = plan["packs"][:2]
    train = loss[loss["kind"] == "train"]
    assert train.groupby("pack").size().to_dict() == {
        first["name"]: first["train_iters"],  # the reference trainer's curve
        second["name"]: second["train_iters"],  # the Slurm segments' curve
    }
    assert loss[loss["kind"] == "validation"]["loss"].tolist() == [8.5, 6.9]
    assert loss[loss["kind"] == "segment train"]["loss"].tolist() == [7.0, 6.0, 5.0]


def test_a_partial_tree_reports_what_exists(workflow: Workflow) -> None:
    """Nothing ran: the report is made, without charts; after the ingest, still without an error."""
    workflow.ok("--report", "empty.html")
    workflow.ok(*RUN, "--until", "ingest_stats")
    workflow.ok("--report", "partial.html")
    assert not (workflow.root / "results" / "report").exists()
    assert "report_plan" in workflow.ok(*RUN, "-n")


def test_plan_charts_without_a_time_estimate(tmp_path: Path) -> None:
    """No ``training.model_params``: the plan's charts are drawn and say that no estimate was made."""
    lengths = {name: np.full(300, 100, dtype=np.int32) for name in ("en_web_a", "de_news_a")}
    signature = [{"prefix": n, "name": n, "lang": n[:2], "domain": n[3:7], "tokens": 30_000} for n in lengths]
    config = {
        "seed": 1,
        "training": {"seq_length": 128, "global_batch_size": 4},
        "datapacks": {
            "max_iters_per_pack": 50,
            "validation_tokens": 500,
            "phases": [{"name": "main", "tokens": 40_000, "mixture": "main"}],
        },
        "mixtures": {"main": {"lang_prob": {"en": 0.5, "de": 0.5}}},
    }
    plan = make_plan(PlanSettings.from_config(config), signature, lengths.__getitem__)
    train = {k: v.get("default") for k, v in schema_entry("", "train")["properties"].items()}
    add_training(plan, {**config, "train": {**train, "base_config": "base.yml"}})
    configs = pd.DataFrame([{"pack": p["name"], **p["training"]} for p in plan["packs"]])
    made = plan_charts.charts(Plan.from_dict(plan), {"main": {"by_domain": {}}}, configs)
    schedule, *_, checkpoints = made
    assert NO_ESTIMATE in schedule.title and NO_ESTIMATE in schedule.figure.axes[0].get_title()
    assert "disk needed unknown" in checkpoints.figure.axes[1].get_title()
    write_section(tmp_path, "Plan", made, {})
    for chart in CHARTS["plan"]:
        assert (tmp_path / f"{chart}.png").read_bytes().startswith(b"\x89PNG"), chart
    assert pd.read_csv(tmp_path / "schedule.csv")["wall_hours"].isna().all()
    assert NO_ESTIMATE in (tmp_path / "index.html").read_text()


def test_the_epochs_chart_of_many_sources_has_a_row_per_group(tmp_path: Path) -> None:
    """Beyond MAX_SOURCE_ROWS sources (a real delivery has 100,000), the epochs chart draws a row per
    group: the highest epochs of its sources, and how many there are; the image stays small."""
    groups = {"en_web_a": 50, "de_news_a": 30}
    names = [f"{g}_split_{i:04d}" for g, n in groups.items() for i in range(n)]
    lengths = {name: np.full(3 + k % 5, 100, dtype=np.int32) for k, name in enumerate(names)}
    signature = [
        {
            "prefix": n,
            "name": n,
            "lang": n[:2],
            "domain": n[3:].split("_")[0],
            "tokens": int(lengths[n].sum()),
        }
        for n in names
    ]
    config = {
        "seed": 1,
        "training": {"seq_length": 128, "global_batch_size": 4},
        "datapacks": {
            "max_iters_per_pack": 50,
            "phases": [{"name": "main", "tokens": 40_000, "mixture": "main"}],
        },
        "mixtures": {"main": {"lang_prob": {"en": 0.5, "de": 0.5}}},
    }
    plan = make_plan(PlanSettings.from_config(config), signature, lengths.__getitem__)
    assert len(names) > plan_charts.MAX_SOURCE_ROWS
    chart = plan_charts.epochs(Plan.from_dict(plan))
    table = chart.table.set_index("group")
    assert table["sources"].to_dict() == groups
    final = list(zip(plan["sources"]["source"], plan["sources"]["epochs"], strict=True))
    highest = {g: max(e for s, e in final if s.startswith(g)) for g in groups}
    assert table["main"].to_dict() == pytest.approx(highest)
    assert table["read_again"].to_dict() == {g: e > 1 for g, e in highest.items()}
    assert chart.figure.get_figheight() < 5


@pytest.mark.parametrize("phases", [[], [{"name": "main", "tokens": 20_000, "mixture": "main"}]])
def test_the_excluded_chart_is_written_when_asked_even_without_documents(
    tmp_path: Path, phases: list
) -> None:
    """``datapacks.exclude`` set (a file that lists none, or a plan without packs): the rule declares the
    excluded chart, so it is written, saying none were taken out; not asked, it is not."""
    lengths = {name: np.full(300, 100, dtype=np.int32) for name in ("en_web_a", "de_news_a")}
    signature = [{"prefix": n, "name": n, "lang": n[:2], "domain": n[3:7], "tokens": 30_000} for n in lengths]
    config = {
        "seed": 1,
        "training": {"seq_length": 128, "global_batch_size": 4},
        "datapacks": {"max_iters_per_pack": 50, "validation_tokens": 500, "phases": phases},
        "mixtures": {"main": {"lang_prob": {"en": 0.5, "de": 0.5}}},
    }
    plan = Plan.from_dict(make_plan(PlanSettings.from_config(config), signature, lengths.__getitem__))
    assert "excluded" not in [c.name for c in plan_charts.charts(plan, {}, None)]
    made = plan_charts.charts(plan, {}, None, excluded_chart=True)
    assert made[-1].name == "excluded" and made[-1].table.empty
    write_section(tmp_path, "Plan", made, {})
    assert (tmp_path / "excluded.png").read_bytes().startswith(b"\x89PNG")
    assert made[-1].figure.axes[0].texts[0].get_text() == plan_charts.NONE_EXCLUDED
