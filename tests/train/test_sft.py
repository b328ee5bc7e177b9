"""SFT packs: train_iters counts the LUMI fork's k_bin_packed samples (bins), offsets chain over them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import yaml

from tests.train.configs.conftest import small_plan
from tests.utils import build_dataset
from workflow_scripts.core.fsio import read_json
from workflow_scripts.core.indexed_dataset import IndexedDataset
from workflow_scripts.tokens.kinds import TokenizerFiles
from workflow_scripts.train import sft
from workflow_scripts.train.configs.write import write_pack_config
from workflow_scripts.train.settings import TrainSettings


def test_k_bin_packing_keeps_documents_whole() -> None:
    lengths = np.random.default_rng(3).integers(5, 300, 2000).astype(np.int32)
    sizes = sft.k_bin_sample_sizes(lengths, 256, seed=9, epochs=2)
    assert max(sizes) <= 257 and sum(sizes) == 2 * int(lengths[lengths <= 257].sum())  # long ones skipped
    assert len(sizes) == sft.k_bin_samples(lengths, 256, 9, 2) > 2 * lengths[lengths <= 257].sum() / 257
    assert sizes == sft.k_bin_sample_sizes(lengths, 256, seed=9, epochs=2)  # seeded
    assert sizes != sft.k_bin_sample_sizes(lengths, 256, seed=10, epochs=2)
    # the LUMI fork's own _build_index_mappings gives these same samples (checked against its source)
    assert sft._merged([100, 200, 30, 250], 257) == [250, 200, 130]


def test_sft_pack_configs_count_bins(tmp_path: Path, model: Path) -> None:
    rng = np.random.default_rng(1)
    packs = []
    for name in ("sft_0", "sft_1"):
        docs = [[[3] * int(n)] for n in rng.integers(4, 60, 300)]
        prefix = build_dataset(tmp_path / "merged" / name / name, docs)
        packs.append((name, "sft", 999, 0, prefix))
    plan = small_plan(64, 4, packs)
    base = tmp_path / "base.yml"
    base.write_text(
        yaml.safe_dump(
            {"train_micro_batch_size_per_gpu": 4, "max_position_embeddings": 64, "precision": "bfloat16"}
        )  # bfloat16: the LUMI fork cannot load with fp32 and no ZeRO (train/lint.py)
    )
    train = TrainSettings.from_config(
        {
            "base_config": str(base),
            "nodes": 1,
            "gpus_per_node": 1,
            "seconds_per_iter": 1,
            "checkpoint_hours": 0.01,
            "time_limit_minutes": 60,
            "sft_epochs": 3,
        }
    )
    signature = {"prefixes": [{"identity": {"tokenizer": {"eod_id": 3}}}]}
    expected = []
    for p in plan.packs:
        lengths = IndexedDataset(p.merged_prefix).lengths
        expected.append(sft.sft_train_iters(lengths, 64, 4, 1234, 3))
    for name in ("sft_0", "sft_1"):
        write_pack_config(
            plan,
            signature,
            name,
            str(base),
            train,
            TokenizerFiles.resolve(str(model)),
            str(tmp_path / "t"),
            str(tmp_path / "c"),
            1234,
            sft=True,
        )
    first = yaml.safe_load((tmp_path / "t" / "sft_0" / "sft_0.yml").read_text())
    second = yaml.safe_load((tmp_path / "t" / "sft_1" / "sft_1.yml").read_text())
    assert first["pack_impl"] == second["pack_impl"] == "k_bin_packed"
    assert (first["train_iters"], first["iteration_offset"]) == (expected[0], 0)
    assert (second["train_iters"], second["iteration_offset"]) == (expected[1], expected[0])
    record = read_json(tmp_path / "t" / "sft_0" / "keys.json")
    assert record["environment"] == {"SFT_ENABLED": "1", "CURSE_ATTENTION": "1"}
    assert "k_bin_packed" in record["set"]["train_iters"]["why"]
