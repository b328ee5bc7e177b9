"""Models in and out of the run, as far as the plan needs to know (cheap: the Snakefile imports it).

``train.init_from.hf`` names a local Hugging Face folder. The run's start becomes its import, a step-0
checkpoint as the trainer names it (core/train_layout's ``import/global_step0`` for GPT-NeoX,
``import/iter_0000000`` for Megatron-LM, in its ``torch_dist`` format), so every fine-tuning step
(finetune-start, the first pack's ``finetune: true`` or ``--finetune``, retention) treats it as seed 003's
``finetune_from``. Refused before any job: no folder or ``config.json``, or ``finetune_from`` as well. The
model's tokenizer is compared with the data's (train/hf/model_tokenizer) as soon as the data's exists.

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
# Megatron-LM's parse_args defaults of what shapes a torch_dist import (a test checks them against the pin)
MEGATRON_DEFAULTS = {"tensor_model_parallel_size": 1, "make_vocab_size_divisible_by": 128}


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
    read_config(hf)
    return {**section, "finetune_from": layout.import_checkpoint(section.get("trainer") or "neox")}


def model_files(hf_dir: str) -> list[str]:
    """The folder's files an import reads: ``config.json``, the safetensors (and index), the tokenizer."""
    names = sorted(os.listdir(hf_dir))
    wanted = ("config.json", "model.safetensors.index.json", "tokenizer.model", "tokenizer.json")
    return [os.path.join(hf_dir, n) for n in names if n in wanted or n.endswith(".safetensors")]


def import_args(base_path: str, trainer: str = "neox") -> str:
    """``hf-import``'s layout options from the base config (the trainer's defaults where unset).

    GPT-NeoX (``model_parallel_size``, ``pipe_parallel_size``, ``make_vocab_size_divisible_by``): ``--tp``,
    ``--pipe`` (``pipe_parallel_size`` >= 1: pipeline files) and ``--divisible-by``. Megatron-LM
    (``--tensor-model-parallel-size``, ``--make-vocab-size-divisible-by``): ``--trainer megatron``, ``--tp``
    and ``--divisible-by``. A ``torch_dist`` checkpoint is resharded on load, so of the layout only the
    padded vocabulary (divisible-by x TP) shapes it; ``--pipeline-model-parallel-size`` changes nothing."""
    if trainer == "megatron":
        from workflow_scripts.train.configs.megatron import read_base

        base = read_base(base_path)
        tp, divisible = (_given(base, k, MEGATRON_DEFAULTS) for k in MEGATRON_DEFAULTS)
        return f"--trainer megatron --tp {tp} --divisible-by {divisible}"
    with open(base_path, encoding="utf-8") as f:
        base = {k.replace("-", "_"): v for k, v in (yaml.safe_load(f) or {}).items()}
    tp, pp, divisible = (_given(base, k, NEOX_DEFAULTS) for k in NEOX_DEFAULTS)
    return f"--tp {tp} --divisible-by {divisible}" + (" --pipe" if pp >= 1 else "")


def _given(base: dict[str, Any], key: str, defaults: dict[str, int]) -> int:
    return int(base[key] if base.get(key) is not None else defaults[key])


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
