"""Re-mixing the unstarted packs: the packs up to the last started one keep their rows, the others are
planned again from where those stopped; a change that would alter a started pack is refused, naming it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson
import pytest

from tests.datapacks.test_planner import config, plan_of, signature
from workflow_scripts.cli import main as snakepack
from workflow_scripts.core.fsio import write_json
from workflow_scripts.core.indexed_dataset import IndexedDataset, IndexedDatasetBuilder
from workflow_scripts.core.train_layout import TrainLayout
from workflow_scripts.datapacks import audit, plan_files, plan_table
from workflow_scripts.datapacks.plan import Plan
from workflow_scripts.datapacks.planner import Kept, PlanError, make_plan
from workflow_scripts.datapacks.settings import PlanSettings

pytestmark = pytest.mark.fast

PHASES = [
    {"name": "warmup", "iters": 5, "mixture": "main"},
    {"name": "main", "tokens": 60_000, "mixture": "main"},
]


def sample() -> tuple[list[dict], dict[str, np.ndarray]]:
    sig, lengths = signature({"en_web_a": 400, "de_web_a": 400, "en_news_a": 300}, 1)
    rng = np.random.default_rng(5)
    for entry in sig:
        lengths[entry["name"]] = rng.integers(20, 200, size=len(lengths[entry["name"]])).astype(np.int32)
        entry["tokens"] = int(lengths[entry["name"]].sum())
    return sig, lengths


def kept(plan: dict, count: int) -> list[Kept]:
    """The first ``count`` packs of ``plan`` as started ones (what their specs hold)."""
    return [
        Kept(p["name"], p["budget"], p["slices"], "train/x/segments/1.json") for p in plan["packs"][:count]
    ]


def remixed(cfg: dict, sig: list[dict], lengths: dict, keep: list[Kept]) -> dict:
    return make_plan(PlanSettings.from_config(cfg), sig, lengths.__getitem__, keep)


def test_a_new_mixture_replans_only_the_packs_after_the_started_ones() -> None:
    sig, lengths = sample()
    before = plan_of(config(PHASES), sig, lengths.__getitem__)
    new = config(PHASES)
    new["mixtures"]["main"] = {"lang_prob": {"en": 0.3, "de": 0.7}}
    fresh = plan_of(new, sig, lengths.__getitem__)
    after = remixed(new, sig, lengths, kept(before, 2))
    assert len(after["packs"]) == len(before["packs"]) >= 3
    assert after["packs"][:2] == before["packs"][:2], "the started packs, rows and iterations, as they were"
    assert fresh["packs"][1] != before["packs"][1], "the new mixture alone would change them"
    # the next pack starts each source where the started ones left it, and reads the new mixture
    ends: dict[str, dict] = {}
    for pack in before["packs"][:2]:
        ends |= {s["source"]: s["end"] for s in pack["slices"]}
    for s in after["packs"][2]["slices"]:
        assert s["start"] == ends.get(s["source"], {"epoch": 0, "doc": 0})
    de = sum(s["tokens"] for s in after["packs"][2]["slices"] if s["lang"] == "de")
    assert de / after["packs"][2]["tokens"] == pytest.approx(0.7, abs=0.05)
    assert after["packs"][2]["iteration_offset"] == before["packs"][2]["iteration_offset"]


def test_nothing_started_plans_as_before() -> None:
    sig, lengths = sample()
    assert remixed(config(PHASES), sig, lengths, []) == plan_of(config(PHASES), sig, lengths.__getitem__)


@pytest.mark.parametrize(
    "change, pack, why",
    [
        (lambda cfg, lengths: cfg["datapacks"].update(max_iters_per_pack=40), "main_1", "budget"),
        (
            lambda cfg, lengths: cfg["datapacks"]["phases"].__setitem__(1, {**PHASES[1], "tokens": 20_000}),
            "main_1",
            "budget",
        ),
        (lambda cfg, lengths: cfg["datapacks"].update(phases=PHASES[:1]), "main_1", "no longer planned"),
        (lambda cfg, lengths: cfg["datapacks"].update(validation_tokens=20_000), "warmup_0", "hold-out"),
        (lambda cfg, lengths: lengths["en_web_a"].__setitem__(0, 7), "warmup_0", "en_web_a"),
    ],
    ids=["pack size", "phase size", "phase removed", "hold-out", "source content"],
)
def test_a_change_of_a_started_pack_is_refused_naming_it(change, pack: str, why: str) -> None:
    sig, lengths = sample()
    before = plan_of(config(PHASES), sig, lengths.__getitem__)
    new = config(PHASES)
    lengths = {k: v.copy() for k, v in lengths.items()}
    change(new, lengths)
    with pytest.raises(
        PlanError, match=rf"pack {pack} has started training \(train/x/segments/1\.json\)"
    ) as e:
        remixed(new, sig, lengths, kept(before, 2))
    assert why in str(e.value) and "datapacks.replan_started" in str(e.value)


def plan_command(tmp_path: Path, mixture: dict, **datapacks: object) -> Path:
    """``snakepack plan`` over two sources into ``tmp_path/out``, the train folder ``tmp_path/train``."""
    rng = np.random.default_rng(4)
    signature = []
    for name, docs in {"en_web_a": 200, "de_news_a": 200}.items():
        prefix = str(tmp_path / "tokenized" / name)
        if not Path(prefix + ".idx").exists():
            with IndexedDatasetBuilder(prefix, np.uint16) as builder:
                for n in rng.integers(10, 40, size=docs):
                    builder.add_document(rng.integers(0, 60000, size=n, dtype=np.uint16))
        lengths = IndexedDataset(prefix).lengths
        lang, domain = name.split("_")[:2]
        signature.append(
            {"prefix": prefix, "name": name, "lang": lang, "domain": domain, "tokens": int(lengths.sum())}
        )
    write_json(tmp_path / "signature.json", {"prefixes": signature})
    config = {
        "seed": 7,
        "training": {"seq_length": 16, "global_batch_size": 2},
        "datapacks": {
            "max_iters_per_pack": 40,
            "validation_tokens": 100,
            "phases": [
                {"name": "warmup", "iters": 30, "mixture": "m"},
                {"name": "main", "tokens": 4000, "mixture": "m"},
            ],
            **datapacks,
        },
        "mixtures": {"m": mixture},
    }
    out = tmp_path / "out"
    plan_files.main(
        [
            *("--config-json", orjson.dumps(config).decode()),
            *("--signature", str(tmp_path / "signature.json")),
            *("--json", str(out / "plan.json"), "--csv", str(out / "plan.csv"), "--md", str(out / "plan.md")),
            *("--merged-dir", str(out / "merged"), "--specs-dir", str(out / "specs")),
            *("--train-dir", str(tmp_path / "train")),
        ]
    )
    return out / "plan.json"


def specs_of(plan_json: Path) -> dict[str, tuple[bytes, int]]:
    return {
        p.stem: (p.read_bytes(), p.stat().st_mtime_ns) for p in (plan_json.parent / "specs").glob("*.json")
    }


def test_the_plan_keeps_the_started_packs_specs_and_replans_the_rest(tmp_path: Path) -> None:
    plan_json = plan_command(tmp_path, {"lang_prob": {"en": 0.6, "de": 0.4}})
    before, old = specs_of(plan_json), Plan.read(plan_json)
    assert [p.name for p in old.packs] == ["warmup_0", "main_1", "main_2", "main_3", "main_4"]
    write_json(
        tmp_path / "train" / "main_1" / "segments" / "1.json", {"pack": "main_1"}
    )  # main_1 has trained
    plan_json = plan_command(tmp_path, {"lang_prob": {"en": 0.2, "de": 0.8}})
    after, new = specs_of(plan_json), Plan.read(plan_json)
    assert {k: after[k] for k in ("warmup_0", "main_1")} == {k: before[k] for k in ("warmup_0", "main_1")}
    assert all(after[k][0] != before[k][0] for k in ("main_2", "main_3"))
    for name in ("warmup_0", "main_1"):
        assert plan_table.pack_rows(new, name) == plan_table.pack_rows(old, name)
        assert (
            new.packs[[p.name for p in new.packs].index(name)]
            == old.packs[[p.name for p in old.packs].index(name)]
        )
    assert audit.summary(audit.audit(new))["ok"]
    assert snakepack(["audit-packs", "--plan", str(plan_json)]) == 0
    assert (
        "**Started packs kept as they are** (planned after them): warmup_0, main_1"
        in (plan_json.parent / "plan.md").read_text()
    )
    with pytest.raises(PlanError, match=r"pack main_1 has started training \(.*segments/1\.json\).*budget"):
        plan_command(tmp_path, {"lang_prob": {"en": 0.2, "de": 0.8}}, max_iters_per_pack=30)
    plan_json = plan_command(
        tmp_path, {"lang_prob": {"en": 0.2, "de": 0.8}}, max_iters_per_pack=30, replan_started=True
    )
    assert specs_of(plan_json)["main_1"][0] != before["main_1"][0], "forced: planned again"


def test_only_a_segment_record_or_attempt_marks_a_pack_started(tmp_path: Path) -> None:
    """Another run's checkpoints in the folder (a fine-tune's source, a shared folder) are no evidence."""
    layout = TrainLayout(str(tmp_path / "train"))
    write_json(layout.keys("main_1"), {"set": {"iteration_offset": {"value": 30}}})
    (tmp_path / "train" / "checkpoints" / "global_step39").mkdir(parents=True)
    assert layout.started("main_1") is None
    attempt = Path(layout.record("main_1", 0)).parent / "attempts" / "0.1.2.json"
    write_json(attempt, {})
    assert layout.started("main_1") == str(attempt)
