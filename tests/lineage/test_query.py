"""``snakepack lineage`` with the plan: a step's sequences named by their tokenized source and document, and
a source document's steps and checkpoints, on a pack the pack writer made from a real plan."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.datapacks.test_packer import plan_for
from tests.lineage.packs import trained_pack, write_plan
from tests.train.conftest import model  # noqa: F401 (a fixture)
from workflow_scripts.cli import main as snakepack
from workflow_scripts.lineage.sources import PackSources
from workflow_scripts.lineage.steps import StepMap
from workflow_scripts.train.reference.config import load_config

pytestmark = pytest.mark.fast


def lineage(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    assert snakepack(["lineage", *args]) == 0
    return json.loads(capsys.readouterr().out)


def test_steps_and_source_documents_through_the_plan(
    tmp_path: Path,
    model: Path,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    plan = plan_for(tmp_path, shuffle=True, sequences=1)
    plan_json = write_plan(plan, tmp_path / "plan.json")
    name = plan.packs[1].name
    prefix, config, _ = trained_pack(plan, 1, model, tmp_path, 10, save=tmp_path / "checkpoints")
    args = ("--config", str(config), "--plan", str(plan_json))
    sources = PackSources.of_plan(plan, name)
    out = lineage(capsys, *args, "--steps", "11:12")
    assert out["documents"] and {d["path"] for d in out["documents"]} == {str(prefix)}
    for d in out["documents"]:
        where = sources.source_of(d["document"])
        assert (d["source"], d["source_document"], d["epoch"]) == (where.source, where.doc, where.epoch)
        assert d["document"] == d["sequence"]  # one sequence a document
    first = out["documents"][0]
    (tmp_path / "checkpoints" / "global_step12").mkdir(parents=True)
    out = lineage(capsys, *args, "--source-doc", f"{first['source']}:{first['source_document']}")
    (pack,) = out["packs"]
    steps = StepMap(load_config([str(config)]))
    assert pack["documents"] == sources.pack_documents(first["source"], first["source_document"])
    assert pack["steps"] == sorted({s for d in pack["documents"] for s in steps.steps(0, d)})
    assert pack["steps"][0] in (11, 12) and pack["checkpoints"] == ["global_step12"]
    assert snakepack(["lineage", "--config", str(config), "--source-doc", "x:1"]) == 2  # needs --plan
