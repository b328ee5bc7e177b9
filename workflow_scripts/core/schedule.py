"""Training-schedule arithmetic the runbooks do by hand in shell comments, as checked functions.

Batch-size ramp-up (Megatron-LM's ``--rampup-batch-size START INCR SAMPLES``), warmup and decay in samples,
data-parallel divisibility, parameter count, wall time, checkpoint cadence, ``exit_interval`` under a Slurm
time limit, checkpoint rounds and checkpoint disk. Seed 004's comments get several of these wrong; the unit
tests hold the correct values (and docs/training.md's "Training configs" says where the seed erred).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from workflow_scripts.core.cli import UserError


class ScheduleError(UserError, ValueError):
    """Training settings that cannot work together; the message says what to change."""


# --- batch-size ramp-up -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RampStep:
    """A run of iterations at one global batch size."""

    batch_size: int
    iterations: int
    first_iteration: int  # 0-based index of the first iteration at this size
    consumed_before: int  # samples consumed before the first of them


@dataclass(frozen=True)
class Rampup:
    """Megatron-LM's linear ramp-up: ``start`` growing by ``increment`` every ``samples / increments``
    consumed samples, until ``samples`` are consumed; then ``global_batch_size``.

    Megatron's rule (``RampupBatchsizeNumMicroBatches.update``): with ``c`` samples consumed, the batch is
    ``global_batch_size`` if ``c > samples``, else ``start + int(c / per_increment) * increment``.
    """

    start: int
    increment: int
    samples: int
    global_batch_size: int

    def __post_init__(self) -> None:
        diff = self.global_batch_size - self.start
        if self.start < 1 or self.increment < 1 or self.samples < 0 or diff < 0 or diff % self.increment:
            raise ScheduleError(
                f"rampup {self.start} {self.increment} {self.samples}: global batch size "
                f"{self.global_batch_size} - start {self.start} must be a non-negative multiple of the "
                f"increment {self.increment}"
            )

    @property
    def increments(self) -> int:
        return (self.global_batch_size - self.start) // self.increment

    @property
    def per_increment(self) -> float:
        """Samples consumed at each batch size (Megatron's float)."""
        return self.samples / self.increments if self.increments else 0.0

    def batch_size(self, consumed: int) -> int:
        """The global batch size after ``consumed`` samples."""
        if consumed > self.samples or not self.increments:
            return self.global_batch_size
        return self.start + int(consumed / self.per_increment) * self.increment

    def steps(self) -> list[RampStep]:
        """Every batch size of the ramp with its iterations, until the final size is reached."""
        steps: list[RampStep] = []
        consumed = iteration = 0
        while (size := self.batch_size(consumed)) < self.global_batch_size:
            level = (size - self.start) // self.increment
            n = max(1, math.ceil(((level + 1) * self.per_increment - consumed) / size))
            while n > 1 and self.batch_size(consumed + (n - 1) * size) != size:
                n -= 1
            while self.batch_size(consumed + n * size) == size:
                n += 1
            steps.append(RampStep(size, n, iteration, consumed))
            consumed += n * size
            iteration += n
        steps.append(RampStep(self.global_batch_size, 0, iteration, consumed))  # open-ended final size
        return steps

    @property
    def end_iteration(self) -> int:
        """The first iteration run at the final batch size."""
        return self.steps()[-1].first_iteration

    def consumed(self, iterations: int) -> int:
        """Samples consumed by the first ``iterations`` iterations."""
        for step in self.steps():
            if step.iterations == 0 or iterations <= step.first_iteration + step.iterations:
                return step.consumed_before + (iterations - step.first_iteration) * step.batch_size
        raise AssertionError("unreachable: the last step is open-ended")

    def iterations(self, samples: int) -> int:
        """The fewest iterations that consume at least ``samples`` samples."""
        for step in self.steps():
            end = step.consumed_before + step.iterations * step.batch_size
            if step.iterations == 0 or samples <= end:
                return step.first_iteration + -(-(samples - step.consumed_before) // step.batch_size)
        raise AssertionError("unreachable: the last step is open-ended")


def samples_from_tokens(tokens: float, seq_length: int) -> int:
    """Samples (sequences of ``seq_length``) in ``tokens`` tokens, for ``--lr-decay-samples`` and friends."""
    return math.ceil(tokens / seq_length)


# --- parallelism -------------------------------------------------------------------------------------------


def data_parallel_size(
    nodes: int, gpus_per_node: int, tensor_parallel: int = 1, pipeline_parallel: int = 1
) -> int:
    """DP = nodes x GPUs per node / (TP x PP); the GPUs must split evenly."""
    gpus, model = nodes * gpus_per_node, tensor_parallel * pipeline_parallel
    if gpus % model:
        raise ScheduleError(
            f"{gpus} GPUs ({nodes} nodes x {gpus_per_node}) do not split into model replicas of "
            f"TP {tensor_parallel} x PP {pipeline_parallel} = {model} GPUs"
        )
    return gpus // model


def check_batch(
    global_batch_size: int, micro_batch_size: int, dp: int, what: str = "global batch size"
) -> int:
    """Gradient accumulation steps for ``global = micro x DP x accumulation``; else an error naming the
    nearest valid batch sizes."""
    unit = micro_batch_size * dp
    if global_batch_size % unit == 0 and global_batch_size > 0:
        return global_batch_size // unit
    below, above = global_batch_size // unit * unit, (global_batch_size // unit + 1) * unit
    nearest = " or ".join(str(v) for v in (below, above) if v > 0)
    raise ScheduleError(
        f"{what} {global_batch_size} is not divisible by micro batch {micro_batch_size} x data parallel {dp} "
        f"= {unit}: use {nearest}, or a micro batch / DP that divides it"
    )


# --- model size, time ---------------------------------------------------------------------------------------


def parameter_count(
    layers: int, hidden: int, vocab: int, seq_length: int, ffn_hidden: int | None = None
) -> int:
    """Parameters of a GPT: per layer attention 4h^2 + 4h, MLP 2 h f + f + h, two layer norms 4h (12h^2 + 13h
    when f = 4h, seed 004's formula), plus word (v h) and position (s h) embeddings."""
    f = 4 * hidden if ffn_hidden is None else ffn_hidden
    per_layer = 4 * hidden * hidden + 4 * hidden + 2 * hidden * f + f + hidden + 4 * hidden
    return layers * per_layer + vocab * hidden + seq_length * hidden


def check_heads(hidden: int, heads: int, head_size: int | None = None) -> int:
    """The head size; heads x head size must equal the hidden size."""
    size = hidden // heads if head_size is None else head_size
    if heads * size != hidden:
        raise ScheduleError(
            f"{heads} heads x head size {size} = {heads * size}, not the hidden size {hidden}"
        )
    return size


def training_days(tokens: float, params: float, gpus: int, tflops_per_gpu: float) -> float:
    """Best-case days: ``tokens x 8 x params / (gpus x TFLOP/s)`` (seed 004's formula)."""
    return tokens * 8 * params / (gpus * tflops_per_gpu * 1e12) / 86400


# --- checkpoints and Slurm segments -------------------------------------------------------------------------


def checkpoint_factor(seconds_per_iter: float, hours_between_checkpoints: float) -> int:
    """Iterations between checkpoints for a target time between them (at least 1)."""
    return max(1, round(hours_between_checkpoints * 3600 / seconds_per_iter))


def exit_interval(
    time_limit_minutes: float,
    seconds_per_iter: float,
    factor: int,
    startup_minutes: float = 10,
    save_minutes: float = 10,
) -> int:
    """The largest multiple of ``factor`` iterations that fits a job's time limit minus start-up and final
    save margins (GPT-NeoX saves only on checkpoint iterations, so a segment must end on one)."""
    usable = (time_limit_minutes - startup_minutes - save_minutes) * 60
    fits = int(usable // (seconds_per_iter * factor)) * factor
    if fits < factor:
        raise ScheduleError(
            f"a {time_limit_minutes:g}-minute job minus {startup_minutes + save_minutes:g} minutes of "
            f"margins fits {int(max(usable, 0) // seconds_per_iter)} iterations at {seconds_per_iter:g} "
            f"s/iter, fewer than one checkpoint interval ({factor}): raise the time limit or lower "
            "checkpoint_hours"
        )
    return fits


def exit_duration_minutes(time_limit_minutes: float, save_minutes: float = 10) -> int:
    """Megatron-LM's ``--exit-duration-in-mins``: the time limit minus the final save (20 h -> 1190)."""
    return int(time_limit_minutes - save_minutes)


def segments(train_iters: int, interval: int, spares: int = 0, offset: int | None = None) -> int:
    """Slurm jobs needed for a pack: ceil(train_iters / exit_interval), plus spares. With ``offset`` (the
    pack's first global step) the exits fall on global multiples of the interval (Megatron-LM)."""
    if not train_iters:
        return 0
    if offset is None:
        return -(-train_iters // interval) + spares
    stop = offset + train_iters
    return (stop - 1) // interval - offset // interval + 1 + spares


@dataclass(frozen=True)
class Round:
    """Checkpoints every ``interval`` iterations up to iteration ``until`` (None: to the end)."""

    interval: int
    until: int | None = None


def save_iterations(rounds: Sequence[Round], start: int, stop: int) -> list[int]:
    """Global iterations in ``(start, stop]`` where checkpoints are saved: multiples of each round's interval
    within its range (both trainers test ``iteration % interval == 0``), and ``stop`` itself."""
    saves, lower = set(), 0
    for r in rounds:
        upper = stop if r.until is None else min(r.until, stop)
        first = max(lower, start) // r.interval + 1
        saves.update(k * r.interval for k in range(first, upper // r.interval + 1))
        lower = upper
        if r.until is None:
            break
    return sorted(i for i in saves | {stop} if start < i <= stop)


def neox_rounds(rounds: Sequence[Round], start: int, stop: int) -> tuple[int, list[int]]:
    """Rounds as GPT-NeoX keys: (``checkpoint_factor``, ``extra_save_iters``): the last round's interval,
    and the earlier rounds' saves that it does not make."""
    last = rounds[-1].interval
    return last, [i for i in save_iterations(rounds[:-1], start, stop) if i % last and i != stop]


def start_step(checkpoint: str | None) -> int:
    """N of a start checkpoint folder (seed 003's finetune start): GPT-NeoX's ``global_stepN`` or
    Megatron-LM's ``iter_NNNNNNN``; 0 without one."""
    if not checkpoint:
        return 0
    name = os.path.basename(os.path.normpath(checkpoint))
    match = re.fullmatch(r"global_step(\d+)|iter_(\d{7})", name)
    if not match:
        raise ScheduleError(
            f"train.finetune_from: {checkpoint} is not a global_stepN (GPT-NeoX) or iter_NNNNNNN "
            "(Megatron-LM) checkpoint directory"
        )
    return int(match.group(1) or match.group(2))


def start_offset(checkpoint: str | None, trainer: str) -> int:
    """The global step the first pack starts at: the start checkpoint's for GPT-NeoX (``finetune`` keeps
    its iteration), 0 for Megatron-LM (``--finetune`` restarts the iteration count at 0)."""
    return start_step(checkpoint) if trainer == "neox" else 0


def checkpoint_bytes(params: float, bytes_per_param: float = 14.0) -> float:
    """One checkpoint: bf16 weights (2) + fp32 master weights (4) + Adam moments (8) = 14 bytes/param."""
    return params * bytes_per_param


def kept_checkpoints(saves: Sequence[int], keep_last: int, milestones: Sequence[int] = ()) -> list[int]:
    """The checkpoints a retention policy keeps at the end: the last ``keep_last`` (0: all) and every
    milestone."""
    keep = set(saves[-keep_last:]) if keep_last > 0 else set(saves)
    return sorted(keep | (set(saves) & set(milestones)))


@dataclass(frozen=True)
class Cadence:
    """How a pack is cut into checkpoints and Slurm segments (the config's ``train`` section)."""

    seconds_per_iter: float
    checkpoint_hours: float
    time_limit_minutes: float
    startup_minutes: float = 10
    save_minutes: float = 10
    spare_segments: int = 0
    rounds: tuple[Round, ...] = ()
    global_exits: bool = False  # Megatron-LM: exit_interval counts global iterations, not the pack's

    @classmethod
    def from_config(cls, train: dict[str, Any]) -> Cadence:
        """From the config's (validated) ``train`` section."""
        rounds = tuple(Round(r["interval"], r.get("until")) for r in train.get("checkpoint_rounds") or ())
        return cls(
            seconds_per_iter=float(train["seconds_per_iter"]),
            checkpoint_hours=float(train["checkpoint_hours"]),
            time_limit_minutes=float(train["time_limit_minutes"]),
            startup_minutes=float(train["startup_minutes"]),
            save_minutes=float(train["save_minutes"]),
            spare_segments=int(train["spare_segments"]),
            rounds=rounds,
            global_exits=train.get("trainer") == "megatron",
        )

    def pack(self, offset: int, train_iters: int, factor: int | None = None) -> PackCadence:
        """A pack spanning global iterations ``(offset, offset + train_iters]``; ``factor`` overrides the
        rounds and ``checkpoint_hours``."""
        stop, extra = offset + train_iters, []
        if factor is None and self.rounds:
            factor, extra = neox_rounds(self.rounds, offset, stop)
        elif factor is None:
            factor = checkpoint_factor(self.seconds_per_iter, self.checkpoint_hours)
        interval = exit_interval(
            self.time_limit_minutes, self.seconds_per_iter, factor, self.startup_minutes, self.save_minutes
        )
        rounds = [*self.rounds[:-1], Round(factor)] if self.rounds else [Round(factor)]
        return PackCadence(
            checkpoint_factor=factor,
            extra_save_iters=extra,
            exit_interval=interval,
            segments=segments(
                train_iters, interval, self.spare_segments, offset if self.global_exits else None
            ),
            hours=round(train_iters * self.seconds_per_iter / 3600, 3),
            saves=save_iterations(rounds, offset, stop),
        )


@dataclass(frozen=True)
class PackCadence:
    """One pack's checkpoints and Slurm segments."""

    checkpoint_factor: int
    extra_save_iters: list[int]  # GPT-NeoX's explicit saves besides the factor's multiples
    exit_interval: int
    segments: int  # Slurm jobs, spares included
    hours: float  # at the s/iter guess
    saves: list[int]  # the global iterations it saves
