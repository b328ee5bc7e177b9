"""A pack's share of each source is its planned document ranges, following the plan's cursor: copied in the
source's order, or gathered in its seeded order."""

import numpy as np
import pytest

from workflow_scripts.core.dataset_merge import write_documents, write_slice
from workflow_scripts.core.dataset_verify import verify
from workflow_scripts.core.fsio import read_json, write_json
from workflow_scripts.core.indexed_dataset import IndexedDataset, IndexedDatasetBuilder, IndexedDatasetError
from workflow_scripts.datapacks import packer
from workflow_scripts.datapacks.plan import Plan
from workflow_scripts.datapacks.planner import make_plan, shuffle_permutation
from workflow_scripts.datapacks.settings import PlanSettings
from workflow_scripts.datapacks.specs import pack_spec


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


def plan_for(sig, shuffle=False) -> dict:
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


@pytest.mark.parametrize("shuffle", [False, True])
def test_packs_hold_the_planned_documents_in_a_cursor_chain(sources, shuffle) -> None:
    """Each pack holds its ranges of each source's documents: in the source's order, or shuffled in the
    plan's seeded order of that source (read from the source itself: no shuffled copy); its cursor state is
    where the next pack starts."""
    tmp, docs, sig = sources
    plan = plan_for(sig, shuffle)
    orders = {n: shuffle_permutation(len(d), 5, n) if shuffle else np.arange(len(d)) for n, d in docs.items()}
    assert len(plan["packs"]) == 4
    for index, pack in enumerate(plan["packs"]):
        out = tmp / pack["name"]
        spec = pack_spec(Plan.from_dict(plan), index, {})
        write_json(tmp / "spec.json", spec)
        args = [
            "--spec",
            str(tmp / "spec.json"),
            "--output",
            str(out / "merged"),
            "--stats",
            str(out / "stats"),
        ]
        packer.main([*args, "--state-out", str(out / "state.json")])
        if index:
            assert (
                spec["start"] == read_json(tmp / plan["packs"][index - 1]["name"] / "state.json")["cursors"]
            )
        ds = IndexedDataset(out / "merged")
        assert ds.num_tokens == pack["tokens"]
        i = 0
        for s in spec["slices"]:
            for _, a, b in s["ranges"]:
                for j in orders[s["source"]][a:b]:
                    assert np.array_equal(ds.document(i), docs[s["source"]][j])
                    i += 1
        assert i == ds.num_documents
    assert not (tmp / "shuffled").exists()
    de = [
        s
        for i in range(4)
        for s in pack_spec(Plan.from_dict(plan), i, {})["slices"]
        if s["source"] == "de_web_a"
    ]
    assert any(s["upsampled"] for s in de), "the small source wraps around and says so"


def test_gathered_documents_equal_a_copy_built_document_by_document(sources) -> None:
    """``write_documents`` (a shuffled slice) writes the same bytes as a builder fed the same documents, in
    steps of a few tokens as in one."""
    tmp, docs, sig = sources
    picked = np.array([7, 3, 3, 119, 0, 58])
    with IndexedDatasetBuilder(tmp / "expected", np.uint16) as builder:
        for j in picked:
            builder.add_document(docs["en_web_a"][j])
    for step, name in ((1 << 24, "gathered"), (50, "gathered_in_steps")):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr("workflow_scripts.core.dataset_merge.GATHER_TOKENS", step)
            counts = write_documents(sig[0]["prefix"], picked, tmp / name)
        for ext in (".bin", ".idx"):
            assert (tmp / f"{name}{ext}").read_bytes() == (tmp / f"expected{ext}").read_bytes()
        assert counts["documents"] == 6 and counts["tokens"] == sum(len(docs["en_web_a"][j]) for j in picked)


def test_gathering_needs_one_sequence_per_document(tmp_path) -> None:
    with IndexedDatasetBuilder(tmp_path / "multi", np.uint16) as builder:
        builder.add_item([1, 2])
        builder.add_item([3])
        builder.end_document()
    with pytest.raises(IndexedDatasetError, match="one sequence per document"):
        write_documents(tmp_path / "multi", np.array([0]), tmp_path / "out")


def test_a_shuffled_plans_ranges_count_the_seeded_order(sources) -> None:
    _, docs, sig = sources
    order = shuffle_permutation(120, 5, "en_web_a")
    plan = plan_for(sig, shuffle=True)
    first = pack_spec(Plan.from_dict(plan), 0, {})["slices"][0]
    lengths = np.array([len(docs["en_web_a"][j]) for j in order])
    _, a, b = first["ranges"][0]
    assert first["tokens"] == lengths[a:b].sum()
    unshuffled = Plan.from_dict(plan_for(sig))
    assert pack_spec(Plan.from_dict(plan), 0, {})["seed"] == 5 and "seed" not in pack_spec(unshuffled, 0, {})
