"""A pack written straight from its sources holds the bytes that cutting one slice per source and merging
the slices gave (seed 000's two steps), unshuffled and shuffled, an upsampled source's epochs included."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from workflow_scripts.cli import main as snakepack
from workflow_scripts.core.dataset_merge import merge, write_documents, write_slice
from workflow_scripts.core.fsio import read_json, write_json
from workflow_scripts.core.indexed_dataset import IndexedDataset, IndexedDatasetBuilder
from workflow_scripts.datapacks import packer
from workflow_scripts.datapacks.plan import Plan
from workflow_scripts.datapacks.planner import make_plan
from workflow_scripts.datapacks.settings import PlanSettings
from workflow_scripts.datapacks.specs import pack_spec, reading_order


def make_source(path: Path, docs: int, seed: int, sequences: int = 1) -> None:
    """``docs`` documents of ``sequences`` sequences each (several: a document the index splits)."""
    rng = np.random.default_rng(seed)
    with IndexedDatasetBuilder(path, np.uint16) as builder:
        for _ in range(docs):
            for _ in range(sequences):
                builder.add_item(rng.integers(0, 60000, size=rng.integers(5, 80), dtype=np.uint16))
            builder.end_document()


def plan_for(tmp: Path, shuffle: bool, sequences: int = 1) -> Plan:
    """Four packs over a large English and a small German source (read in several epochs), and a validation
    pack of each language; each document of ``sequences`` sequences."""
    sizes = {"en_web_a": 160, "de_web_a": 40}
    for i, (name, docs) in enumerate(sizes.items()):
        make_source(tmp / name, docs, i, sequences)
    sig = [
        {
            "prefix": str(tmp / n),
            "name": n,
            "lang": n[:2],
            "domain": "web",
            "tokens": IndexedDataset(tmp / n).num_tokens,
        }
        for n in sizes
    ]
    cfg = {
        "seed": 5,
        "training": {"seq_length": 16, "global_batch_size": 2, "epoch_rule": "neox"},
        "datapacks": {
            "max_iters_per_pack": 40 * sequences,
            "shuffle": shuffle,
            "validation_tokens": 200 * sequences,
            "phases": [{"name": "main", "tokens": 5000 * sequences, "mixture": "m"}],
        },
        "mixtures": {"m": {"lang_prob": {"en": 0.6, "de": 0.4}}},
    }
    return Plan.from_dict(make_plan(PlanSettings.from_config(cfg), sig, document_lengths))


def specs_for(tmp: Path, shuffle: bool, sequences: int = 1) -> list[dict]:
    """The specs of ``plan_for``'s packs and validation packs."""
    plan = plan_for(tmp, shuffle, sequences)
    return [pack_spec(plan, i, {}) for i in range(len(plan.packs))] + [
        pack_spec(plan, None, {}, v.name) for v in plan.validation
    ]


def document_lengths(prefix: str) -> np.ndarray:
    """Each document's tokens (the sum of its sequences')."""
    ds = IndexedDataset(prefix)
    return np.add.reduceat(ds.lengths.astype(np.int64), ds.doc_idx[:-1])


def sliced_and_merged(spec: dict, work: Path) -> Path:
    """The pack as two steps made it: one slice per source (its ranges copied, or its documents gathered
    in the source's seeded order), then the slices merged in order."""
    prefixes = []
    for s in spec["slices"]:
        out = work / "slices" / s["name"]
        out.parent.mkdir(parents=True, exist_ok=True)
        ranges = [(a, b) for _, a, b in s["ranges"]]
        order = reading_order(spec, s["prefix"], s["source"])
        if order is None:
            write_slice(s["prefix"], ranges, out)
        else:
            write_documents(s["prefix"], np.concatenate([order[a:b] for a, b in ranges]), out)
        prefixes.append(out)
    merge(prefixes, work / "merged")
    return work / "merged"


@pytest.mark.parametrize(("shuffle", "sequences"), [(False, 1), (False, 3), (True, 1)])
def test_a_pack_written_at_once_equals_its_slices_merged(
    tmp_path: Path, shuffle: bool, sequences: int
) -> None:
    specs = specs_for(tmp_path, shuffle, sequences)
    german = [s for spec in specs for s in spec["slices"] if s["source"] == "de_web_a"]
    assert len({r[0] for s in german for r in s["ranges"]}) >= 2, "the small source is read in two epochs"
    assert any(len(s["ranges"]) > 1 and s["upsampled"] for s in german), "a slice wraps around its source"
    assert {spec["name"] for spec in specs} >= {"main_0", "main_3", "valid_de", "valid_en"}
    for spec in specs:
        expected = sliced_and_merged(spec, tmp_path / "old" / spec["name"])
        out = tmp_path / "new" / spec["name"] / spec["name"]
        stats = packer.write_pack(spec, out)
        for ext in (".bin", ".idx"):
            assert Path(f"{out}{ext}").read_bytes() == Path(f"{expected}{ext}").read_bytes(), spec["name"]
        assert stats["tokens"] == sum(s["tokens"] for s in spec["slices"])
        assert not list(out.parent.glob(".tmp.*"))


def test_snakepack_pack_writes_the_pack_its_cursor_and_what_each_source_gave(tmp_path: Path) -> None:
    spec = specs_for(tmp_path, shuffle=False)[1]
    write_json(tmp_path / "spec.json", spec)
    out = tmp_path / "merged" / "main_1" / "main_1"
    state, stats = tmp_path / "main_1" / "state.json", tmp_path / "main_1" / "stats.json"
    argv = ["pack", "--spec", str(tmp_path / "spec.json"), "--output", str(out)]
    assert snakepack([*argv, "--state-out", str(state), "--stats", str(stats)]) == 0
    assert read_json(state) == {"pack": "main_1", "cursors": spec["state_after"]}
    written, ds = read_json(stats), IndexedDataset(out)
    assert written["tokens"] == ds.num_tokens == sum(s["tokens"] for s in spec["slices"])
    assert written["documents"] == ds.num_documents == sum(s["documents"] for s in spec["slices"])
    assert written["over_budget"] == written["tokens"] - written["budget"]
    keys = ("name", "source", "tokens", "documents", "epochs_after", "upsampled")
    assert [{k: s[k] for k in keys} for s in written["sources"]] == [
        {k: s[k] for k in keys} for s in spec["slices"]
    ]
    assert not (tmp_path / "main_1" / "slices").exists()


def test_a_pack_is_flushed_once_whatever_its_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No file per source and no fsync per source: the pack's two files are flushed before their rename; the
    write-back starts as the pack grows, not once a source."""
    spec = specs_for(tmp_path, shuffle=False)[0]
    assert len(spec["slices"]) == 2
    calls: list[str] = []
    monkeypatch.setattr("workflow_scripts.core.fsio.fsync_path", lambda p: calls.append(Path(p).name))
    writebacks: list[int] = []  # started every WRITEBACK_BYTES, not once a source: a small pack has none
    monkeypatch.setattr(packer, "start_writeback", lambda fd, offset, n: writebacks.append(n))
    packer.write_pack(spec, tmp_path / "p" / "p")
    assert sorted(calls) == sorted([".tmp.p.bin", ".tmp.p.idx", "p", "p"]) and writebacks == []
    monkeypatch.setattr(packer, "WRITEBACK_BYTES", 1)
    packer.write_pack(spec, tmp_path / "p" / "p")
    assert len(writebacks) == 2 and sum(writebacks) == Path(tmp_path / "p" / "p.bin").stat().st_size
    assert sorted(f.name for f in (tmp_path / "p").iterdir()) == ["p.bin", "p.idx"]


def test_a_plan_the_sources_do_not_match_is_refused(tmp_path: Path) -> None:
    spec = specs_for(tmp_path, shuffle=False)[0]
    spec["slices"][0]["tokens"] += 1
    with pytest.raises(RuntimeError, match="the plan says"):
        packer.write_pack(spec, tmp_path / "p" / "p")
    assert not list((tmp_path / "p").iterdir())
