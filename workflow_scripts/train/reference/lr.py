"""GPT-NeoX's learning-rate schedule (``AnnealingLR``), at the pack's local iteration.

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
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any


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

    def state(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Schedule:
        return cls(**state)
