"""Exact iteration math: how many optimizer steps a pack of T tokens feeds in a single epoch.

GPT-NeoX asks every blended dataset (even a single path) for ``ceil(n * B * 1.005)`` samples and builds
more epochs until ``(epochs * T - 1) // seq_length`` covers them, shuffling all epochs together; a pack
sized to exactly ``n * B * seq_length`` tokens therefore runs two shuffled epochs (some documents twice,
some never). Megatron-LM, given a single ``--data-path`` without weight, asks for exactly ``n * B`` samples
and needs ``n * B * seq_length + 1`` tokens. ``train_iters`` below is the largest n read in one epoch.
"""

from __future__ import annotations

import math

NEOX_SURPLUS = 1.005
RULES = ("neox", "megatron")
# What the plan, plan.md and the report say when the wall-time settings are missing
NO_ESTIMATE = "no time estimate (set training.model_params, gpus and tflops_per_gpu)"


def neox_samples(train_iters: int, batch: int) -> int:
    """Samples GPT-NeoX requests for one training path (its own float arithmetic, reproduced)."""
    return math.ceil(train_iters * batch * 1.0 * NEOX_SURPLUS)


def train_iters(tokens: int, seq_length: int, batch: int, rule: str = "neox") -> int:
    """The largest number of iterations that reads a pack of ``tokens`` tokens in a single epoch."""
    if rule == "megatron":
        return max(0, (tokens - 1) // (seq_length * batch))
    if rule != "neox":
        raise ValueError(f"unknown epoch rule {rule!r}; choose one of {RULES}")
    available = (tokens - 1) // seq_length
    n = int(available / (batch * NEOX_SURPLUS)) + 1
    while n > 0 and neox_samples(n, batch) > available:
        n -= 1
    return n


def tokens_for_iters(iters: int, seq_length: int, batch: int, rule: str = "neox") -> int:
    """The fewest tokens a pack needs so that ``iters`` iterations read it in a single epoch."""
    if rule == "megatron":
        return iters * batch * seq_length + 1
    if rule != "neox":
        raise ValueError(f"unknown epoch rule {rule!r}; choose one of {RULES}")
    return neox_samples(iters, batch) * seq_length + 1


def wall_time_hours(tokens: int, params: float, gpus: int, tflops_per_gpu: float) -> float:
    """Training time estimate ``tokens * 8 * params / (gpus * TFLOP/s)`` (6 for the step, 2 for recompute)."""
    return tokens * 8 * params / (gpus * tflops_per_gpu * 1e12) / 3600
