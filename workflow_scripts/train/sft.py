"""SFT packs (seed 003): ``pack_impl: k_bin_packed`` counts training samples in bins, not in tokens.

The LUMI fork's ``k_bin_packed`` shuffles the pack's documents (``np.random.RandomState(seed)``), places
each into the open bin (at most 16, each ``seq_length + 1`` tokens) it fills best, skips documents longer
than a bin, retires the fullest bin when a 17th would be needed, and at the end of every pass over the
documents merges the open bins (fullest first) into samples. So ``train_iters`` must count the samples that
packing makes in the passes (epochs) asked for, which ``k_bin_samples`` reproduces from the lengths alone.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from workflow_scripts.core.indexed_dataset import IndexedDataset
from workflow_scripts.datapacks.iterations import neox_samples
from workflow_scripts.datapacks.plan import Plan

BINS = 16


def _merged(bins: list[int], capacity: int) -> list[int]:
    """The samples (their token counts) the open bins make when flushed: fullest first, joined while they
    fit."""
    samples: list[int] = []
    used = 0
    for size in sorted(bins, reverse=True):
        if used + size >= capacity and used:
            samples.append(used)
            used = 0
        used += size
    return [*samples, used] if used else samples


def k_bin_sample_sizes(
    lengths: np.ndarray, seq_length: int, seed: int, epochs: int = 1, k: int = BINS
) -> list[int]:
    """The token count of every sample ``k_bin_packed`` makes from documents of ``lengths`` in ``epochs``
    passes, in order."""
    capacity = seq_length + 1
    rng = np.random.RandomState(seed)
    order = np.arange(len(lengths), dtype=np.int32)
    samples: list[int] = []
    for _ in range(epochs):
        rng.shuffle(order)
        bins: list[int] = []
        for doc in order.tolist():
            size = int(lengths[doc])
            if size > capacity:
                continue
            best, slack = -1, capacity + 1
            for i, used in enumerate(bins):
                room = capacity - used - size
                if 0 <= room < slack:
                    best, slack = i, room
            if best >= 0:
                bins[best] += size
                continue
            if len(bins) == k:
                samples.append(bins.pop(bins.index(max(bins))))
            bins.append(size)
        samples += _merged(bins, capacity)
    return samples


def k_bin_samples(lengths: np.ndarray, seq_length: int, seed: int, epochs: int = 1) -> int:
    """Samples ``k_bin_packed`` makes from documents of ``lengths`` in ``epochs`` passes."""
    return len(k_bin_sample_sizes(lengths, seq_length, seed, epochs))


def sft_train_iters(lengths: np.ndarray, seq_length: int, batch: int, seed: int, epochs: int = 1) -> int:
    """The most iterations whose samples (with GPT-NeoX's 0.5 % surplus) k-bin packing makes in ``epochs``."""
    available = k_bin_samples(lengths, seq_length, seed, epochs)
    n = available // batch
    while n > 0 and neox_samples(n, batch) > available:
        n -= 1
    return n


def sft_plan(plan: Plan, seq_length: int, batch: int, seed: int, epochs: int) -> Plan:
    """The plan with SFT packs' ``train_iters`` counted in ``k_bin_packed`` bins (from each merged pack's
    lengths) and the offsets chained over them."""
    packs, offset = [], 0
    for pack in plan.packs:
        lengths = IndexedDataset(pack.merged_prefix).lengths
        iters = sft_train_iters(lengths, seq_length, batch, seed, epochs)
        packs.append(dataclasses.replace(pack, train_iters=iters, iteration_offset=offset))
        offset += iters
    return dataclasses.replace(plan, packs=tuple(packs))
