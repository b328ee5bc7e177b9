"""Slices are exact byte-range cuts of the sources, following the plan's cursor, and merge back in order."""

import numpy as np
import pytest

from workflow_scripts.core.dataset_merge import merge, write_slice
from workflow_scripts.core.dataset_verify import verify
from workflow_scripts.core.fsio import write_json
from workflow_scripts.core.indexed_dataset import IndexedDataset, IndexedDatasetBuilder
from workflow_scripts.datapacks.planner import make_plan, shuffle_permutation
from workflow_scripts.datapacks.settings import PlanSettings
from workflow_scripts.datapacks.slicer import StateMismatch, pack_spec, slice_main, slice_pack, write_shuffled


def make_source(path, docs: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = [rng.integers(0, 60000, size=rng.integers(5, 80), dtype=np.uint16) for _ in range(docs)]
    with IndexedDatasetBuilder(path, np.uint16) as b:
        for doc in out:
            b.add_document(doc)
    return out


@pytest.fixture
def sources(tmp_path):
    docs = {
        "en_web_a": make_source(tmp_path / "en_web_a", 120, 1),
        "de_web_a": make_source(tmp_path / "de_web_a", 30, 2),
    }
    sig = [
        {"prefix": str(tmp_path / n), "name": n, "lang": n[:2], "domain": "web", "tokens": sum(map(len, d))}
        for n, d in docs.items()
    ]
    return tmp_path, docs, sig


def plan_for(sig, shuffle=False):
    cfg = {
        "seed": 5,
        "training": {"seq_length": 16, "global_batch_size": 2, "epoch_rule": "neox"},
        "datapacks": {
            "max_iters_per_pack": 40,
            "shuffle": shuffle,
            "phases": [{"name": "main", "tokens": 4000, "mixture": "m"}],
        },
        "mixtures": {"m": {"lang_prob": {"en": 0.6, "de": 0.4}}},
    }
    return make_plan(PlanSettings.from_config(cfg), sig, lambda p: IndexedDataset(p).lengths)


def test_a_slice_wraps_around_its_source(sources) -> None:
    tmp, docs, sig = sources
    counts = write_slice(sig[1]["prefix"], [(25, 30), (0, 3)], str(tmp / "wrapped"))
    ds = IndexedDataset(tmp / "wrapped")
    verify(tmp / "wrapped")
    expected = docs["de_web_a"][25:30] + docs["de_web_a"][0:3]
    assert counts["documents"] == ds.num_documents == 8
    for i, doc in enumerate(expected):
        assert np.array_equal(ds.document(i), doc)


def test_packs_hold_the_planned_documents_in_a_cursor_chain(sources) -> None:
    tmp, docs, sig = sources
    plan = plan_for(sig)
    write_json(tmp / "plan.json", plan)
    assert len(plan["packs"]) == 4
    state = None
    for index, pack in enumerate(plan["packs"]):
        out = tmp / pack["name"]
        write_json(tmp / "spec.json", pack_spec(plan, index, {}))
        args = [
            "--spec",
            str(tmp / "spec.json"),
            "--out-dir",
            str(out),
            "--state-out",
            str(out / "state.json"),
            "--stats",
            str(out / "stats.json"),
            "--list",
            str(out / "slices.txt"),
        ]
        slice_main(args + (["--state-in", state] if state else []))
        state = str(out / "state.json")
        prefixes = (out / "slices.txt").read_text().split()
        merged = merge(prefixes, tmp / f"{pack['name']}_merged")
        assert merged["tokens"] == pack["tokens"]
        ds = IndexedDataset(tmp / f"{pack['name']}_merged")
        i = 0
        for s in pack["slices"]:
            for _, a, b in s["ranges"]:
                for doc in docs[s["source"]][a:b]:
                    assert np.array_equal(ds.document(i), doc)
                    i += 1
    de = [s for p in plan["packs"] for s in p["slices"] if s["source"] == "de_web_a"]
    assert any(s["upsampled"] for s in de), "the small source wraps around and says so"


def test_state_mismatch_is_refused(sources) -> None:
    tmp, _, sig = sources
    plan = plan_for(sig)
    write_json(tmp / "bad_state.json", {"pack": "x", "cursors": {"en_web_a": {"epoch": 0, "doc": 1}}})
    with pytest.raises(StateMismatch):
        slice_pack(pack_spec(plan, 1, {}), str(tmp / "p1"), str(tmp / "bad_state.json"), None)


def test_shuffled_copy_follows_the_plans_order(sources) -> None:
    tmp, docs, sig = sources
    write_shuffled(sig[0]["prefix"], "en_web_a", 5, str(tmp / "shuffled" / "en_web_a"))
    order = shuffle_permutation(120, 5, "en_web_a")
    ds = IndexedDataset(tmp / "shuffled" / "en_web_a")
    assert all(np.array_equal(ds.document(i), docs["en_web_a"][j]) for i, j in enumerate(order))
    plan = plan_for(sig, shuffle=True)
    first = plan["packs"][0]["slices"][0]
    lengths = np.array([len(docs["en_web_a"][j]) for j in order])
    _, a, b = first["ranges"][0]
    assert first["tokens"] == lengths[a:b].sum()
