"""A hold-out spread over several sources is written like any pack: the end documents of each."""

import numpy as np

from workflow_scripts.core.indexed_dataset import IndexedDataset, IndexedDatasetBuilder
from workflow_scripts.datapacks.packer import write_pack
from workflow_scripts.datapacks.plan import Plan
from workflow_scripts.datapacks.planner import make_plan
from workflow_scripts.datapacks.settings import PlanSettings
from workflow_scripts.datapacks.specs import pack_spec


def test_a_validation_pack_from_several_sources_holds_their_last_documents(tmp_path) -> None:
    rng = np.random.default_rng(3)
    sizes = {"en_web_big": [5000], "en_web_a": [40] * 60, "en_web_b": [30] * 70, "de_web_a": [20] * 200}
    docs = {n: [rng.integers(0, 60000, size=k, dtype=np.uint16) for k in ks] for n, ks in sizes.items()}
    for name, documents in docs.items():
        with IndexedDatasetBuilder(tmp_path / name, np.uint16) as builder:
            for doc in documents:
                builder.add_document(doc)
    sig = [
        {"prefix": str(tmp_path / n), "name": n, "lang": n[:2], "domain": "web", "tokens": sum(sizes[n])}
        for n in docs
    ]
    cfg = {
        "seed": 5,
        "training": {"seq_length": 16, "global_batch_size": 2},
        "datapacks": {
            "max_iters_per_pack": 40,
            "validation_tokens": 1500,
            "phases": [{"name": "main", "tokens": 3000, "mixture": "m"}],
        },
        # en_web_big's one document is longer than a pack may pass its budget by: no pack reads it
        "mixtures": {"m": {"lang_prob": {"en": 0.6, "de": 0.4}, "exclude": ["en_web_big"]}},
    }
    plan = make_plan(PlanSettings.from_config(cfg), sig, lambda p: IndexedDataset(p).lengths)
    valid = next(v for v in plan["validation"] if v["name"] == "valid_en")
    # en_web_big (one document) is skipped; en_web_a gives half of itself (1200), en_web_b the rest (300)
    assert [(s["source"], s["ranges"]) for s in valid["slices"]] == [
        ("en_web_a", [[0, 30, 60]]),
        ("en_web_b", [[0, 60, 70]]),
    ]
    stats = write_pack(pack_spec(Plan.from_dict(plan), None, {}, "valid_en"), tmp_path / "valid_en_merged")
    assert stats["tokens"] == valid["tokens"] == 1500
    ds = IndexedDataset(tmp_path / "valid_en_merged")
    expected = docs["en_web_a"][30:] + docs["en_web_b"][60:]
    assert ds.num_documents == len(expected)
    assert all(np.array_equal(ds.document(i), doc) for i, doc in enumerate(expected))
