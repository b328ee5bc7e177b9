"""The learning-rate schedules: GPT-NeoX's (``AnnealingLR``, ``Schedule``), at the pack's local iteration,
and Megatron-LM's (``OptimizerParamScheduler``, ``MegatronSchedule``), over the whole run in samples.

``warmup`` is a fraction of ``train_iters`` (``warmup_iter = warmup x train_iters``); during warmup the LR
rises linearly from 0 (``start_lr x n / warmup_iter``, so a warmup pack's first step runs at LR 0, as
GPT-NeoX's), then decays to ``train_iters`` by ``lr_decay_style``: constant, linear
(``start_lr x (end - n) / end``) or cosine (to ``min_lr``), never below ``min_lr`` after warmup. ``n`` is the
local iteration (global - ``iteration_offset``), the LUMI fork's reading with offsets; the step that makes
iteration ``n + 1`` runs at ``lr(n)``.

The schedule's settings are saved in every checkpoint. On a resume they come from the checkpoint (GPT-NeoX's
``use_checkpoint_lr_scheduler``), unless ``override_lr_scheduler`` is true, the run starts fresh, or it is a
``finetune`` start: then the config's are used. So a later pack must override to change the schedule, which
is why the workflow sets ``override_lr_scheduler: true`` on later packs.

Megatron-LM's scheduler counts ``num_steps`` in samples: each iteration adds the global batch, and the
iteration uses the LR and weight decay at the samples before it. Its values are those of
``get_optimizer_param_scheduler`` (``configs.megatron.scheduler_state``); a resume takes ``num_steps`` from
the checkpoint and checks the values as ``load_state_dict`` does; ``--finetune`` starts a fresh scheduler.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Any

from workflow_scripts.train.configs.megatron import SCHEDULER
from workflow_scripts.train.reference.run_config import ConfigError


@dataclass(frozen=True)
class Schedule:
    """One ``AnnealingLR``: ``lr(n)`` for local iteration ``n``."""

    start_lr: float
    min_lr: float
    warmup_iter: float
    end_iter: int
    decay_style: str

    @classmethod
    def of(cls, lr: float, min_lr: float, warmup: float, train_iters: int, decay_style: str) -> Schedule:
        end = max(1, train_iters)
        return cls(lr, min_lr, warmup * end, end, decay_style)

    def lr(self, n: int) -> float:
        if self.warmup_iter > 0 and n <= self.warmup_iter:
            return self.start_lr * n / self.warmup_iter
        n = n - self.warmup_iter
        end = self.end_iter - self.warmup_iter
        if self.decay_style == "linear" and end > 0:
            lr = self.start_lr * (end - n) / end
        elif self.decay_style == "cosine" and end > 0:
            lr = self.min_lr + (self.start_lr - self.min_lr) / 2.0 * (math.cos(math.pi * n / end) + 1)
        else:
            lr = self.start_lr
        return max(lr, self.min_lr)

    def wd(self, n: int) -> None:
        """GPT-NeoX's weight decay is the config's throughout: None, the parameter groups keep theirs."""
        return None

    def state(self, n: int) -> dict[str, Any]:
        """The settings saved in a checkpoint (``n``, the local iteration, is the checkpoint's own)."""
        return asdict(self)

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Schedule:
        return cls(**state)


DECAY_STYLES = ("constant", "linear", "cosine", "inverse-square-root", "WSD")
WSD_STYLES = ("exponential", "linear", "cosine", "minus_sqrt")
WD_STYLES = ("constant", "linear", "cosine")


@dataclass(frozen=True)
class MegatronSchedule:
    """One ``OptimizerParamScheduler`` (its ``state_dict`` names): ``lr(n)`` and ``wd(n)`` at local
    iteration ``n``, where it has counted ``steps + (n - at) x batch`` samples."""

    max_lr: float
    min_lr: float
    lr_warmup_steps: float
    lr_decay_steps: int
    lr_decay_style: str
    start_wd: float
    end_wd: float
    wd_incr_steps: int
    wd_incr_style: str
    init_lr: float
    wsd_decay_steps: int | None
    lr_wsd_decay_style: str
    batch: int
    steps: int = 0
    at: int = 0

    @classmethod
    def of(cls, state: dict[str, Any], batch: int) -> MegatronSchedule:
        """A fresh scheduler of ``configs.megatron.scheduler_state``'s values; what its constructor
        asserts and the styles ``get_lr`` and ``get_wd`` do not know are refused."""
        s = cls(**state, batch=batch)
        for value, known, flag in [
            (s.lr_decay_style, DECAY_STYLES, "--lr-decay-style"),
            (s.lr_wsd_decay_style, WSD_STYLES, "--lr-wsd-decay-style"),
            (s.wd_incr_style, WD_STYLES, "--weight-decay-incr-style"),
        ]:
            if value not in known:
                raise ConfigError(f"{flag} {value}: Megatron-LM's scheduler knows {', '.join(known)}")
        for ok, what in [
            (s.min_lr >= 0.0 and s.max_lr >= s.min_lr >= 0.0, "0 <= --min-lr <= --lr"),
            (s.init_lr <= s.max_lr, "--lr-warmup-init <= --lr"),
            (s.lr_decay_steps > 0, "the LR decays over more than 0 samples"),
            (s.lr_warmup_steps < s.lr_decay_steps, "the warmup is shorter than the decay"),
            (
                s.lr_decay_style != "WSD" or s.wsd_decay_steps is not None,
                "WSD has --lr-wsd-decay-samples (or -iters)",
            ),
            (0.0 <= s.start_wd <= s.end_wd, "0 <= --start-weight-decay <= --end-weight-decay"),
        ]:
            if not ok:
                raise ConfigError(f"Megatron-LM's OptimizerParamScheduler asserts that {what}: {state}")
        return s

    def num_steps(self, n: int) -> int:
        return self.steps + (n - self.at) * self.batch

    def lr(self, n: int) -> float:
        """``get_lr`` at local iteration ``n``."""
        steps = self.num_steps(n)
        if self.lr_warmup_steps > 0 and steps <= self.lr_warmup_steps:
            return self.init_lr + (self.max_lr - self.init_lr) * float(steps) / float(self.lr_warmup_steps)
        if self.lr_decay_style == "constant":
            return self.max_lr
        if steps > self.lr_decay_steps:
            return self.min_lr
        if self.lr_decay_style == "inverse-square-root":
            lr = self.max_lr * max(self.lr_warmup_steps, 1) ** 0.5 / (max(steps, 1) ** 0.5)
            return max(self.min_lr, lr)
        ratio = float(steps - self.lr_warmup_steps) / float(self.lr_decay_steps - self.lr_warmup_steps)
        if self.lr_decay_style == "linear":
            coeff = 1.0 - ratio
        elif self.lr_decay_style == "cosine":
            coeff = 0.5 * (math.cos(math.pi * ratio) + 1.0)
        else:  # WSD: constant, then the last wsd_decay_steps anneal
            assert self.wsd_decay_steps is not None  # of() refuses WSD without
            anneal = self.lr_decay_steps - self.wsd_decay_steps
            coeff = 1.0 if steps <= anneal else self._wsd(float(steps - anneal) / float(self.wsd_decay_steps))
        return self.min_lr + coeff * (self.max_lr - self.min_lr)

    def _wsd(self, ratio: float) -> float:
        if self.lr_wsd_decay_style == "linear":
            return 1.0 - ratio
        if self.lr_wsd_decay_style == "cosine":
            return 0.5 * (math.cos(math.pi * ratio) + 1.0)
        if self.lr_wsd_decay_style == "exponential":
            return (2.0 * math.pow(0.5, ratio)) - 1.0
        return 1.0 - math.sqrt(ratio)  # minus_sqrt

    def wd(self, n: int) -> float:
        """``get_wd`` at local iteration ``n`` (the decayed parameters'; biases and norms have none)."""
        steps = self.num_steps(n)
        if steps > self.wd_incr_steps or self.wd_incr_style == "constant":
            return self.end_wd
        ratio = float(steps) / float(self.wd_incr_steps)
        linear = self.wd_incr_style == "linear"
        coeff = ratio if linear else 0.5 * (math.cos(math.pi * (1 - ratio)) + 1.0)  # or cosine
        return self.start_wd + coeff * (self.end_wd - self.start_wd)

    def state(self, n: int) -> dict[str, Any]:
        """``state_dict`` at local iteration ``n``: the checked values and ``num_steps``."""
        return {**{key: getattr(self, key) for key in SCHEDULER}, "num_steps": self.num_steps(n)}

    def resumed(self, state: dict[str, Any], n: int, winner: str | None) -> MegatronSchedule:
        """This scheduler after ``load_state_dict(state)`` at local iteration ``n``: ``num_steps`` is the
        checkpoint's; each checked value must match it (``winner`` None), or is the checkpoint's
        (``checkpoint``, --use-checkpoint-opt-param-scheduler) or this one's (``override``)."""
        values = {}
        for key, name in SCHEDULER.items():
            ours, theirs = getattr(self, key), state[key]
            if winner is None and ours != theirs:
                raise ConfigError(
                    f"OptimizerParamScheduler: class input value {ours} and checkpoint value {theirs} for "
                    f"{name} do not match (Megatron-LM asserts so on this resume; "
                    "--override-opt-param-scheduler or --use-checkpoint-opt-param-scheduler says whose win)"
                )
            values[key] = ours if winner == "override" else theirs
        return replace(self, **values, steps=state["num_steps"], at=n)
