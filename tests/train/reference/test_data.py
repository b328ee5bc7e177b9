"""The reference trainer's data: GPT-NeoX's packed index mappings, the LUMI fork's k-bin packing, blending,
and the single-epoch guard."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import numpy as np
import pytest

from tests.train.reference.conftest import BATCH, SEQ, make_pack, pattern_docs
from tests.utils import build_dataset
from workflow_scripts.core.indexed_dataset import IndexedDataset
from workflow_scripts.datapacks.iterations import neox_samples, train_iters
from workflow_scripts.train import sft
from workflow_scripts.train.reference import data


def neox_sample_idx(sizes: np.ndarray, doc_idx: np.ndarray, seq_length: int, tokens: int) -> np.ndarray:
    """GPT-NeoX's ``_build_sample_idx`` (the loop helpers.cpp implements), line by line."""
    num_samples = (tokens - 1) // seq_length
    out = np.zeros([num_samples + 1, 2], dtype=np.int64)
    index, doc_index, offset = 1, 0, 0
    while index <= num_samples:
        remaining = seq_length + 1
        while remaining != 0:
            length = sizes[doc_idx[doc_index]] - offset
            remaining -= length
            if remaining <= 0:
                offset += remaining + length - 1
                remaining = 0
            else:
                doc_index += 1
                offset = 0
        out[index] = doc_index, offset
        index += 1
    return out


@pytest.mark.parametrize("seq_length", [1, 7, 32])
def test_sample_index_is_neox_loop(seq_length: int) -> None:
    rng = np.random.default_rng(seq_length)
    sizes = rng.integers(0, 40, 200).astype(np.int32)  # zero-length documents included
    sizes[:3] = [1, 0, 45]
    for epochs in (1, 3):
        doc_idx = data.build_doc_idx(len(sizes), epochs, np.random.RandomState(5))
        tokens = epochs * int(sizes.sum())
        ours = data.build_sample_idx(sizes, doc_idx, seq_length, tokens)
        assert np.array_equal(ours, neox_sample_idx(sizes, doc_idx, seq_length, tokens))
        assert ours.dtype == np.int32


def test_doc_index_shuffles_all_epochs_together() -> None:
    doc_idx = data.build_doc_idx(50, 3, np.random.RandomState(1234))
    assert doc_idx.dtype == np.int32 and sorted(doc_idx.tolist()) == sorted(list(range(50)) * 3)
    expected = np.tile(np.arange(50, dtype=np.int32), 3)
    np.random.RandomState(1234).shuffle(expected)  # GPT-NeoX's _build_doc_idx
    assert np.array_equal(doc_idx, expected)


def test_epochs_and_weighted_samples_follow_neox() -> None:
    assert data.weighted_num_samples(30 * 8, [1.0]) == [neox_samples(30, 8)] == [242]
    assert data.weighted_num_samples(100, [1.0, 3.0]) == [26, 76]  # ceil(100 x w x 1.005)
    for tokens, seq, n in [(1000, 10, 99), (1000, 10, 100), (1001, 10, 100), (50, 10, 12), (7, 3, 0)]:
        epochs = 1
        while (epochs * tokens - 1) // seq < n:  # GPT-NeoX's _num_epochs loop
            epochs += 1
        assert data.num_epochs(tokens, seq, n) == epochs


def test_samples_overlap_by_one_token_across_documents(tmp_path: Path, eod: int) -> None:
    prefix = make_pack(tmp_path / "p" / "p", pattern_docs(40, 3, eod))
    spec = data.IndexSpec(prefix, "train", 30, SEQ, 1234, "packed")
    assert spec.ensure() and not spec.ensure()  # built once, then reused
    assert sorted(os.listdir(tmp_path / "p")) == sorted(
        ["p.bin", "p.idx"]
        + [
            f"p_train_indexmap_30ns_{SEQ}sl_1234s_packedpi_ac_{k}_idx.npy"
            for k in ("doc", "sample", "shuffle")
        ]
    )
    dataset = data.GPTDataset(spec)
    raw = IndexedDataset(prefix)
    stream = np.concatenate([raw[int(d)] for d in dataset.doc_idx])
    for i in range(len(dataset)):
        tokens, real = dataset.sample(i)
        s = int(dataset.shuffle_idx[i])
        assert real == SEQ + 1 and np.array_equal(tokens, stream[s * SEQ : s * SEQ + SEQ + 1])
    assert sorted(int(x) for x in dataset.shuffle_idx) == list(range(len(dataset.sample_idx) - 1))


def test_k_bin_samples_are_the_plans_bins(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    lengths = rng.integers(3, 30, 400)
    lengths[:5] = 40  # longer than a bin (seq_length + 1 = 33): skipped
    prefix = build_dataset(tmp_path / "s" / "s", [[list(range(5, 5 + int(n)))] for n in lengths])
    for epochs in (1, 2):
        sizes = sft.k_bin_sample_sizes(lengths, SEQ, 99, epochs)
        spec = data.IndexSpec(prefix, "train", len(sizes), SEQ, 99, "k_bin_packed")
        doc_idx, sample_idx, shuffle, _ = data.k_bin_index(
            spec.lengths, SEQ, len(sizes), np.random.RandomState(99)
        )
        made = [int(lengths[doc_idx[a:b]].sum()) for (a, _), (b, _) in itertools.pairwise(sample_idx)]
        assert made == sizes  # the same bins, in the same order, as the plan counts
        spec.ensure()
        dataset = data.GPTDataset(spec)
        for i in range(len(dataset)):
            tokens, real = dataset.sample(i)
            assert real == made[int(dataset.shuffle_idx[i])] and not tokens[real:].any()  # padded with 0
        assert sorted(shuffle.tolist()) == list(range(len(sizes)))


def test_blending_follows_neox() -> None:
    which, within = data.blending_indices([1.0, 1.0], 6)
    assert which.tolist() == [0, 1, 0, 1, 0, 1] and within.tolist() == [0, 0, 1, 1, 2, 2]
    which, within = data.blending_indices([3.0, 1.0], 400)
    assert np.bincount(which).tolist() == [300, 100]
    assert within[which == 1].tolist() == list(range(100))


def test_epoch_guard_fires_one_iteration_past_the_plan(tmp_path: Path, eod: int) -> None:
    prefix = make_pack(tmp_path / "g" / "g", pattern_docs(60, 4, eod))
    tokens = int(IndexedDataset(prefix).lengths.sum())
    n = train_iters(tokens, SEQ, BATCH)  # the plan's single-epoch train_iters
    assert n > 0
    (spec,) = data.train_specs("g", [prefix], [1.0], n, BATCH, SEQ, 1234, "packed")
    assert spec.num_samples == neox_samples(n, BATCH) and spec.epochs() == 1
    with pytest.raises(data.EpochError) as info:
        data.train_specs("g", [prefix], [1.0], n + 1, BATCH, SEQ, 1234, "packed")
    message = str(info.value)
    needed, available = neox_samples(n + 1, BATCH), (tokens - 1) // SEQ
    assert needed > available
    for part in (
        "pack g",
        f"train_iters {n + 1}",
        f"needs {needed} samples",
        f"give {available} in one epoch",
    ):
        assert part in message, message
    assert f"single-epoch train_iters is {n}" in message
    # an SFT pack may be read several times
    specs = data.train_specs("g", [prefix], [1.0], 10 * n, BATCH, SEQ, 1234, "k_bin_packed")
    assert specs[0].num_samples == neox_samples(10 * n, BATCH)
