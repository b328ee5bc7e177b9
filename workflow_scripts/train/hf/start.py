"""Models in and out of the run, as far as the plan needs to know (cheap: the Snakefile imports it).

``train.init_from.hf`` names a local Hugging Face folder. The run's start becomes its import
(core/train_layout's ``import/global_step0``), so every fine-tuning step (finetune-start, the first pack's
``finetune: true``, retention) treats it as seed 003's ``finetune_from``. Refused before any job: no folder
or ``config.json``, ``finetune_from`` as well, or Megatron-LM as the trainer (its pinned ``tools/checkpoint``
has no LLaMA loader from Hugging Face nor a GPT saver to it). The model's tokenizer is compared with the
data's (train/hf/model_tokenizer) as soon as the data's exists.

``train.export`` names what goes back out: every pack's last checkpoint and named milestones, as folders
``export/{pack}`` and ``export/step{N}``.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

import yaml

from workflow_scripts.core.cli import UserError
from workflow_scripts.core.train_layout import TrainLayout

if TYPE_CHECKING:
    from workflow_scripts.tokens.kinds import TokenizerFiles

NEOX_DEFAULTS = {"model_parallel_size": 1, "pipe_parallel_size": 1, "make_vocab_size_divisible_by": 128}


class ModelImportError(UserError, ValueError):
    """A Hugging Face folder that cannot be used; the message names the file and why."""


def read_config(hf_dir: str) -> dict[str, Any]:
    """The folder's ``config.json``."""
    path = os.path.join(hf_dir, "config.json")
    if not os.path.isfile(path):
        raise ModelImportError(f"train.init_from.hf: {hf_dir} has no config.json")
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def resolve(section: dict[str, Any], layout: TrainLayout) -> dict[str, Any]:
    """The ``train`` section with ``finetune_from`` set to the import of ``init_from.hf`` (if any)."""
    hf = (section.get("init_from") or {}).get("hf")
    if not hf:
        return section
    if section.get("finetune_from"):
        raise ModelImportError(
            f"train.init_from.hf ({hf}) and train.finetune_from ({section['finetune_from']}) both name the "
            "run's start: keep one"
        )
    if section.get("trainer") == "megatron":
        raise ModelImportError(
            f"train.init_from.hf ({hf}): Megatron-LM's tools/checkpoint (the pinned version) has no LLaMA "
            "loader from Hugging Face and no GPT saver to it; start Megatron-LM from a checkpoint of its own "
            "(train.finetune_from), or train with trainer: neox"
        )
    read_config(hf)
    return {**section, "finetune_from": layout.import_checkpoint}


def model_files(hf_dir: str) -> list[str]:
    """The folder's files an import reads: ``config.json``, the safetensors (and index), the tokenizer."""
    names = sorted(os.listdir(hf_dir))
    wanted = ("config.json", "model.safetensors.index.json", "tokenizer.model", "tokenizer.json")
    return [os.path.join(hf_dir, n) for n in names if n in wanted or n.endswith(".safetensors")]


def import_args(base_path: str) -> str:
    """``hf-import``'s layout options from the base GPT-NeoX config (GPT-NeoX's defaults where unset):
    ``--tp``, ``--pipe`` (``pipe_parallel_size`` >= 1: pipeline files) and ``--divisible-by``."""
    with open(base_path, encoding="utf-8") as f:
        base = {k.replace("-", "_"): v for k, v in (yaml.safe_load(f) or {}).items()}
    tp, pp, divisible = (int(base.get(k) if base.get(k) is not None else v) for k, v in NEOX_DEFAULTS.items())
    return f"--tp {tp} --divisible-by {divisible}" + (" --pipe" if pp >= 1 else "")


def check_tokenizer(hf_dir: str, data: TokenizerFiles) -> None:
    """Stop the plan when the model's tokenizer is not the data's (nothing to compare yet: no check)."""
    if all(os.path.isfile(p) for p in data.paths):
        from workflow_scripts.train.hf import model_tokenizer

        model_tokenizer.match(hf_dir, read_config(hf_dir), data)


def export_steps(
    packs: dict[str, int], export_packs: bool, milestones: tuple[int, ...], kept: tuple[int, ...]
) -> dict[str, int]:
    """Each export's name and global step: ``{pack: its last step}`` and ``step{N}`` for the milestones
    (each must be a checkpoint the run keeps: a pack's end or one of ``train.milestones``)."""
    names = dict(packs) if export_packs else {}
    for step in milestones:
        if step not in kept and step not in packs.values():
            raise ModelImportError(
                f"train.export.milestones: step {step} is neither a pack's end nor in train.milestones, so "
                "the retention policy may delete it before it is exported"
            )
        if step not in names.values():
            names[f"step{step}"] = step
    return names
