"""The datapack plan's settings (config ``training``, ``datapacks``, ``mixtures`` and ``seed``), typed."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from workflow_scripts.core.settings import from_config, setting


@dataclass(frozen=True)
class TrainingSettings:
    """Iteration math and the wall-time estimate."""

    seq_length: int = setting("training", "seq_length")
    global_batch_size: int = setting("training", "global_batch_size")
    epoch_rule: str = setting("training", "epoch_rule")
    model_params: float | None = setting("training", "model_params")
    gpus: int | None = setting("training", "gpus")
    tflops_per_gpu: float | None = setting("training", "tflops_per_gpu")

    @property
    def tokens_per_iter(self) -> int:
        """Sequence length times global batch size: the tokens one iteration consumes."""
        return self.seq_length * self.global_batch_size


@dataclass(frozen=True)
class Phase:
    """One phase: a name, its mixture, and its size in ``iters``, ``tokens`` or a ``fraction``."""

    name: str = setting("datapacks.phases.items", "name")
    mixture: str | None = setting("datapacks.phases.items", "mixture")
    iters: int | None = setting("datapacks.phases.items", "iters")
    tokens: float | None = setting("datapacks.phases.items", "tokens")
    fraction: float | None = setting("datapacks.phases.items", "fraction")


@dataclass(frozen=True)
class DatapacksSettings:
    """Pack size limits, shuffling, the hold-out, the documents taken out and the phases."""

    max_tokens_per_pack: float | None = setting("datapacks", "max_tokens_per_pack")
    max_iters_per_pack: int | None = setting("datapacks", "max_iters_per_pack")
    shuffle: bool = setting("datapacks", "shuffle")
    validation_tokens: int = setting("datapacks", "validation_tokens")
    replan_started: bool = setting("datapacks", "replan_started")
    exclude: tuple[str, ...] | str = setting("datapacks", "exclude")  # entries, or a file listing them
    phases: tuple[Phase, ...] = ()


@dataclass(frozen=True)
class PlanSettings:
    """Everything the plan depends on."""

    seed: int = setting("", "seed")
    training: TrainingSettings = field(default_factory=TrainingSettings)
    datapacks: DatapacksSettings = field(default_factory=DatapacksSettings)
    mixtures: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> PlanSettings:
        """From a config (or the plan's part of it); missing keys take the schema's defaults."""
        packs = config.get("datapacks", {})
        phases = tuple(from_config(Phase, p) for p in packs.get("phases", ()))
        return from_config(
            cls,
            config,
            training=from_config(TrainingSettings, config.get("training", {})),
            datapacks=from_config(DatapacksSettings, packs, phases=phases),
            mixtures=dict(config.get("mixtures", {})),
        )
