"""The train stage's settings (config ``train``), typed."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from workflow_scripts.core.cli import UserError
from workflow_scripts.core.schedule import Round
from workflow_scripts.core.settings import from_config, setting

# How the training runs (commands, retries, detach, status), not what it trains: changing these reruns no
# plan and no trainer config.
RUN_KEYS = (
    "launch",
    "eval_launch",
    "eval_every",
    "evaluate_sft",
    "segment_retries",
    "stall_minutes",
    "detach",
    "sbatch",
    "request_gpus",
    "gpu_type",
    "cpus_per_task",
    "export",
    "megatron_python",
)


# The reference trainer's command (``snakepack train-reference``), a word of any launch that runs it.
REFERENCE_TRAINER = re.compile(r"(?<!\S)train-reference(?!\S)")


class TrainConfigError(UserError, ValueError):
    """A ``train`` section the run cannot use; the message names the key."""


def runs_reference(command: str | None) -> bool:
    """Whether a launch command runs the reference trainer."""
    return bool(command and REFERENCE_TRAINER.search(command))


def resolved(section: dict[str, Any]) -> dict[str, Any]:
    """The config's ``train`` section as the run reads it: an empty ``finetune_from`` is unset, and the
    reference trainer's evaluation (``eval_launch``'s default) is refused where ``launch`` runs another
    trainer, which would have its checkpoints evaluated by ours."""
    if "finetune_from" in section and not section["finetune_from"]:
        section = {**section, "finetune_from": None}
    launch = section.get("launch", TrainSettings.launch)
    evaluation = section.get("eval_launch", TrainSettings.eval_launch)
    if runs_reference(evaluation) and not runs_reference(launch):
        shown = " ".join(launch.split())[:80]
        raise TrainConfigError(
            f"train.eval_launch is the reference trainer's evaluation (its default), but train.launch runs "
            f"another trainer ({shown}): set train.eval_launch to that trainer's evaluation of a checkpoint "
            "(docs/training.md), or to null for no evaluation jobs"
        )
    return section


def trained_keys(section: dict[str, Any]) -> dict[str, Any]:
    """The keys of the config's ``train`` section that the plan and the trainer configs depend on."""
    return {k: v for k, v in section.items() if k not in RUN_KEYS}


@dataclass(frozen=True)
class TrainSettings:
    """How the per-pack trainer configs are made (see config/schema.yaml, section ``train``)."""

    trainer: str = setting("train", "trainer")
    neox: str = setting("train", "neox")
    base_config: str | None = setting("train", "base_config")
    checkpoints_dir: str | None = setting("train", "checkpoints_dir")
    data_cache_dir: str | None = setting("train", "data_cache_dir")
    megatron_python: str | None = setting("train", "megatron_python")
    nodes: int = setting("train", "nodes")
    gpus_per_node: int = setting("train", "gpus_per_node")
    request_gpus: bool = setting("train", "request_gpus")
    gpu_type: str | None = setting("train", "gpu_type")
    cpus_per_task: int | None = setting("train", "cpus_per_task")
    seconds_per_iter: float = setting("train", "seconds_per_iter")
    checkpoint_hours: float = setting("train", "checkpoint_hours")
    time_limit_minutes: float = setting("train", "time_limit_minutes")
    startup_minutes: float = setting("train", "startup_minutes")
    save_minutes: float = setting("train", "save_minutes")
    spare_segments: int = setting("train", "spare_segments")
    first_pack: dict[str, Any] = setting("train", "first_pack")
    later_packs: dict[str, Any] = setting("train", "later_packs")
    phase_overrides: dict[str, Any] = setting("train", "phase_overrides")
    checkpoint_rounds: tuple[Round, ...] = ()
    keep_last: int = setting("train", "keep_last")
    milestones: tuple[int, ...] = setting("train", "milestones")
    bytes_per_param: float = setting("train", "bytes_per_param")
    checkpoint_quota_tb: float | None = setting("train", "checkpoint_quota_tb")
    finetune_from: str | None = setting("train", "finetune_from")
    init_from: dict[str, Any] = setting("train", "init_from")
    export: dict[str, Any] = setting("train", "export")
    sft_epochs: int = setting("train", "sft_epochs")
    sft_env: dict[str, str] = setting("train", "sft_env")
    launch: str = setting("train", "launch")
    eval_launch: str | None = setting("train", "eval_launch")
    eval_every: str = setting("train", "eval_every")
    evaluate_sft: bool = setting("train", "evaluate_sft")
    segment_retries: int = setting("train", "segment_retries")
    stall_minutes: float = setting("train", "stall_minutes")
    detach: bool = setting("train", "detach")
    sbatch: tuple[str, ...] = setting("train", "sbatch")

    @property
    def init_hf(self) -> str | None:
        """The Hugging Face folder the run starts from (``train.init_from.hf``), if any."""
        return self.init_from.get("hf")

    @property
    def export_packs(self) -> bool:
        """Export every pack's last checkpoint (``train.export.packs``; unset: when starting from HF)."""
        packs = self.export.get("packs")
        return bool(self.init_hf) if packs is None else bool(packs)

    @property
    def export_milestones(self) -> tuple[int, ...]:
        return tuple(self.export.get("milestones", ()))

    @classmethod
    def from_config(cls, section: dict[str, Any]) -> TrainSettings:
        """From the config's ``train`` section (``resolved``); missing keys take the schema's defaults."""
        section = resolved(section)
        rounds = tuple(Round(r["interval"], r.get("until")) for r in section.get("checkpoint_rounds", ()))
        rest = {k: v for k, v in section.items() if k != "checkpoint_rounds"}
        return from_config(cls, rest, checkpoint_rounds=rounds)
