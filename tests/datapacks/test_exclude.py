"""Taking documents out (``datapacks.exclude``): the unstarted packs are planned again without them, the
started ones kept byte for byte; the audit counts them as excluded; the plan names the started packs that
hold them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.datapacks.test_planner import config, plan_of
from tests.datapacks.test_remix import PHASES, kept, plan_command, sample, specs_of
from workflow_scripts.cli import main as snakepack
from workflow_scripts.core.cli import UserError
from workflow_scripts.core.fsio import read_json, write_json
from workflow_scripts.core.indexed_dataset import IndexedDataset
from workflow_scripts.datapacks import audit, packer, plan_table
from workflow_scripts.datapacks.plan import Plan
from workflow_scripts.datapacks.planner import Kept, make_plan, shuffle_permutation
from workflow_scripts.datapacks.settings import PlanSettings
from workflow_scripts.report import plan as plan_report
from workflow_scripts.tokens import ledger

pytestmark = pytest.mark.fast


def remixed(cfg: dict, sig: list[dict], lengths: dict, keep: list[Kept], excluded: dict) -> dict:
    return make_plan(PlanSettings.from_config(cfg), sig, lengths.__getitem__, keep, excluded)


def reads(pack: dict, source: str) -> set[int]:
    """The documents (reading order) ``pack`` reads of ``source``."""
    return {
        d for s in pack["slices"] if s["source"] == source for _, a, b in s["ranges"] for d in range(a, b)
    }


@pytest.mark.parametrize("shuffle", [False, True])
def test_excluded_documents_leave_the_unstarted_packs_only(shuffle: bool) -> None:
    sig, lengths = sample()
    cfg = config(PHASES, shuffle=shuffle)
    before = plan_of(cfg, sig, lengths.__getitem__)
    in_started = min(reads(before["packs"][0], "en_web_a"))
    in_unstarted = min(reads(before["packs"][3], "en_web_a"))
    order = shuffle_permutation(400, cfg["seed"], "en_web_a") if shuffle else np.arange(400)
    excluded = {"en_web_a": [int(order[in_started]), int(order[in_unstarted])]}
    after = remixed(cfg, sig, lengths, kept(before, 2), excluded)
    assert after["packs"][:2] == before["packs"][:2], "the started packs as they were"
    for pack in after["packs"][2:]:
        assert not reads(pack, "en_web_a") & {in_started, in_unstarted}, pack["name"]
        assert pack["budget"] <= pack["tokens"] < pack["budget"] + 200
    (entry,) = after["excluded"]
    assert entry["source"] == "en_web_a" and entry["started_packs"] == [before["packs"][0]["name"]]
    result = audit.check(Plan.from_dict(after))
    assert result["excluded"] == 2
    assert sum(result["read"].values()) + result["excluded"] + result["held_out"] == result["documents"]
    assert remixed(config(PHASES, shuffle=shuffle), sig, lengths, kept(before, 2), {}) == before
    # a pack planned without them starts training: the next plan keeps it, skipping them as it did
    again = remixed(cfg, sig, lengths, kept(after, 4), excluded)
    assert again["packs"] == after["packs"] and again["sources"] == after["sources"]
    assert audit.check(Plan.from_dict(again))["excluded"] == 2


def with_ledgers(tmp_path: Path) -> None:
    """Ledgers for ``plan_command``'s sources: en_web_a's document d from en.jsonl line d + 1, hash
    1000 + d."""
    plan_command(tmp_path, {"lang_prob": {"en": 0.6, "de": 0.4}})
    for name, raw, base in (("en_web_a", "en.jsonl", 1000), ("de_news_a", "de.jsonl", 5000)):
        ledger.save(str(tmp_path / "tokenized" / name), [raw], [0], [1], [200], np.arange(200) + base)


def test_exclude_by_hash_and_raw_line_rebuilds_only_the_unstarted_specs(tmp_path: Path) -> None:
    with_ledgers(tmp_path)
    mixture = {"lang_prob": {"en": 0.6, "de": 0.4}}
    plan_json = plan_command(tmp_path, mixture)
    before, old = specs_of(plan_json), Plan.read(plan_json)
    write_json(tmp_path / "train" / "main_1" / "segments" / "1.json", {"pack": "main_1"})
    first = read_json(plan_json.parent / "specs" / "warmup_0.json")["slices"]
    started_doc = next(s for s in first if s["source"] == "en_web_a")["ranges"][0][1]
    later = read_json(plan_json.parent / "specs" / "main_3.json")["slices"]
    later_doc = next(s for s in later if s["source"] == "en_web_a")["ranges"][0][1] + 1
    exclude = [f"{1000 + started_doc:016x}", f"en.jsonl:{later_doc + 1}"]
    plan_json = plan_command(tmp_path, mixture, exclude=exclude)
    after, new = specs_of(plan_json), Plan.read(plan_json)
    assert {k: after[k] for k in ("warmup_0", "main_1")} == {k: before[k] for k in ("warmup_0", "main_1")}
    assert after["main_3"][0] != before["main_3"][0]
    for pack in new.packs[2:]:
        held = reads({"slices": plan_table.pack_rows(new, pack.name)}, "en_web_a")
        assert not held & {started_doc, later_doc}, pack.name
    spec = read_json(plan_json.parent / "specs" / "main_3.json")
    stats = packer.write_pack(spec, tmp_path / "main_3")
    assert (
        IndexedDataset(str(tmp_path / "main_3")).num_documents == stats["documents"] == new.packs[3].documents
    )
    result = audit.check(new)
    assert result["excluded"] == 2 and snakepack(["audit-packs", "--plan", str(plan_json)]) == 0
    text = (plan_json.parent / "plan.md").read_text()
    assert "**Excluded**: 2 documents" in text and "warmup_0" in text.split("**Excluded**")[1]
    assert [p.name for p in new.packs] == [p.name for p in old.packs]
    chart = plan_report.excluded(new)
    assert chart.table.to_dict("records") == [
        {"source": "en_web_a", "documents": 2, "held_out": 0, "started_packs": "warmup_0"}
    ]
    with pytest.raises(UserError, match=r"en\.jsonl:999 matches no document"):
        plan_command(tmp_path, mixture, exclude=["en.jsonl:999"])
    listing = tmp_path / "exclude.txt"
    listing.write_text("\n".join(exclude) + "\n")
    plan_json = plan_command(tmp_path, mixture, exclude=str(listing))
    assert specs_of(plan_json) == after, "a file listing them: the same plan, nothing rewritten"


def test_taking_an_entry_back_out_of_exclude_after_its_packs_started_is_refused_saying_why(
    tmp_path: Path,
) -> None:
    """An entry removed from ``exclude`` once a pack planned without its document has started: refused,
    naming the entry, the started packs planned without it, and the two ways on."""
    with_ledgers(tmp_path)
    mixture = {"lang_prob": {"en": 0.6, "de": 0.4}}
    plan_json = plan_command(tmp_path, mixture)
    later = read_json(plan_json.parent / "specs" / "main_3.json")["slices"]
    doc = next(s for s in later if s["source"] == "en_web_a")["ranges"][0][1] + 1  # inside main_3
    entries = [f"en.jsonl:{doc + 1}", f"{1000 + doc + 2:016x}"]
    plan_json = plan_command(tmp_path, mixture, exclude=entries)
    write_json(tmp_path / "train" / "main_3" / "segments" / "1.json", {"pack": "main_3"})
    before = specs_of(plan_json)
    with pytest.raises(UserError) as refused:
        plan_command(tmp_path, mixture, exclude=entries[1:])
    message = str(refused.value)
    assert f"datapacks.exclude no longer lists en.jsonl:{doc + 1} (hash {1000 + doc:016x})" in message
    assert "started pack main_3 was planned without it" in message, message
    assert entries[1] not in message, "the entry still listed is not named"
    assert "keep the entry" in message and "datapacks.replan_started: true" in message
    assert specs_of(plan_json) == before, "nothing written"
    with pytest.raises(
        UserError,
        match=rf"en.jsonl:{doc + 1} .*, en.jsonl:{doc + 3} \(hash {entries[1]}\) \(source en_web_a\)",
    ):
        plan_command(tmp_path, mixture, exclude=[])
    assert specs_of(plan_command(tmp_path, mixture, exclude=entries[::-1])) == before


def test_excluding_a_document_only_started_packs_hold_changes_no_pack(tmp_path: Path) -> None:
    """The reverse: a document that only started packs hold is taken out of none (their bytes stay), no
    other pack changes, and plan.md and the report name the started pack that holds it."""
    with_ledgers(tmp_path)
    mixture = {"lang_prob": {"en": 0.6, "de": 0.4}}
    plan_json = plan_command(tmp_path, mixture)
    write_json(tmp_path / "train" / "main_1" / "segments" / "1.json", {"pack": "main_1"})
    first = read_json(plan_json.parent / "specs" / "warmup_0.json")["slices"]
    doc = next(s for s in first if s["source"] == "en_web_a")["ranges"][0][1]
    before = specs_of(plan_json)
    plan_json = plan_command(tmp_path, mixture, exclude=[f"{1000 + doc:016x}"])
    assert specs_of(plan_json) == before
    assert "warmup_0" in (plan_json.parent / "plan.md").read_text().split("**Excluded**")[1]
    report = ["report", "plan", "--plan", str(plan_json), "--out-dir", str(tmp_path / "report")]
    assert snakepack([*report, "--excluded"]) == 0
    assert pd.read_csv(tmp_path / "report" / "excluded.csv").to_dict("records") == [
        {"source": "en_web_a", "documents": 1, "held_out": 0, "started_packs": "warmup_0"}
    ]
    assert snakepack(report) == 0  # exclude no longer set: the chart of an earlier run is gone
    assert not list((tmp_path / "report").glob("excluded.*"))
