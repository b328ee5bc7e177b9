"""Every document of every source accounted for by the plan's packs (datapacks/audit.py): read as often as
the epochs say, held out, or not reached yet; a plan whose rows lose or repeat a document is named, source
and pack; the plan audits what it writes."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from tests.datapacks.test_packer import plan_for
from tests.datapacks.test_plan import write_plan
from workflow_scripts.cli import main as snakepack
from workflow_scripts.core.fsio import write_json
from workflow_scripts.datapacks import audit, plan_table
from workflow_scripts.datapacks.plan import Plan

pytestmark = pytest.mark.fast


@pytest.mark.parametrize("shuffle", [False, True])
def test_every_document_is_read_as_the_epochs_say_held_out_or_not_reached(
    tmp_path: Path, shuffle: bool
) -> None:
    plan = plan_for(tmp_path, shuffle, 1)
    audits = audit.audit(plan)
    result = audit.summary(audits)
    assert result["ok"], result["problems"]
    de = next(a for a in audits if a.source == "de_web_a")
    assert max(de.reads) >= 2 and de.held_out > 0  # upsampled, and its tail held out
    assert sum(result["read"].values()) + result["held_out"] == result["documents"] == 200


def tamper(tmp_path: Path, change) -> Path:
    """The plan of ``plan_of`` on disk, one slice row changed by ``change(rows)``."""
    plan = plan_for(tmp_path, False, 1)
    plan_json = tmp_path / "plan.json"
    write_json(plan_json, plan.to_dict())
    tables = plan_table.tables(plan)
    rows = tables.slices.to_pylist()
    change(rows)
    plan_table.write(
        plan_table.Tables(pa.Table.from_pylist(rows, plan_table.SLICES), tables.sources), plan_json
    )
    return plan_json


def _second_slice_of(rows: list[dict], source: str) -> dict:
    return [r for r in rows if r["source"] == source and r["start_epoch"] is not None][1]


def _skip_one(rows: list[dict]) -> None:  # the pack starts one document late: one is never read
    row = _second_slice_of(rows, "en_web_a")
    row["start_doc"] += 1
    row["ranges"][0][1] += 1
    row["documents"] -= 1


def _read_twice(rows: list[dict]) -> None:  # the pack reads one document more: the next pack reads it again
    row = _second_slice_of(rows, "en_web_a")
    row["ranges"][-1][2] += 1
    row["documents"] += 1


def _train_on_held_out(rows: list[dict]) -> None:  # the validation tail begins one document later
    row = next(r for r in rows if r["source"] == "de_web_a" and r["start_epoch"] is None)
    row["ranges"][0][1] += 1


@pytest.mark.parametrize(
    ("change", "found"),
    [(_skip_one, "starts at"), (_read_twice, "ends at"), (_train_on_held_out, "held-out range")],
)
def test_a_plan_that_loses_or_repeats_a_document_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], change, found: str
) -> None:
    plan_json = tamper(tmp_path, change)
    assert snakepack(["audit-packs", "--plan", str(plan_json), "--csv", str(tmp_path / "audit.csv")]) == 2
    result = json.loads(capsys.readouterr().out)
    assert not result["ok"] and any(found in p for p in result["problems"]), result["problems"]
    assert all(p.split(":")[0] in ("en_web_a", "de_web_a") for p in result["problems"])
    assert "problems" in (tmp_path / "audit.csv").read_text().splitlines()[0]
    with pytest.raises(audit.AuditError, match="lose or repeat"):
        audit.check(Plan.read(plan_json))


def test_the_plan_audits_what_it_writes(tmp_path: Path) -> None:
    plan_md = write_plan(tmp_path, train=False).with_name("plan.md").read_text()
    assert "**Audit**: the " in plan_md and "held out for validation" in plan_md
