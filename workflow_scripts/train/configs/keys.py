"""The keys the workflow sets on a pack's config, each with the reason (the pack's keys file lists them),
under GPT-NeoX's names (``megatron`` renames them): nothing is typed by hand. ``train_data_paths``,
``train_iters``, ``iteration_offset``, ``save``/``load``, the LR keys of the first and later packs,
``checkpoint_factor`` (from ``checkpoint_hours`` and ``seconds_per_iter``, or the checkpoint rounds),
``exit_interval`` (the largest multiple of it that fits the Slurm time limit minus margins), then the phase
overrides.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from workflow_scripts.core import schedule
from workflow_scripts.core.settings import schema_entry
from workflow_scripts.datapacks.plan import Plan
from workflow_scripts.tokens.kinds import TokenizerFiles
from workflow_scripts.train.configs.checks import ConfigError
from workflow_scripts.train.settings import TrainSettings
from workflow_scripts.train.trainer_tokenizers import TRAINER_TOKENIZERS


@dataclass
class Keys:
    """The keys the workflow sets on a pack's config, with the reason for each."""

    pack: str
    values: dict[str, Any]
    why: dict[str, str]

    def set(self, key: str, value: Any, why: str) -> None:
        self.values[key] = value
        self.why[key] = why


def cadence_of(train: TrainSettings) -> schedule.Cadence:
    """The checkpoint and segment cadence of the train settings."""
    return schedule.Cadence(
        train.seconds_per_iter,
        train.checkpoint_hours,
        train.time_limit_minutes,
        train.startup_minutes,
        train.save_minutes,
        train.spare_segments,
        train.checkpoint_rounds,
        global_exits=train.trainer == "megatron",
    )


def pack_keys(
    plan: Plan,
    index: int,
    train: TrainSettings,
    checkpoints: str,
    tokenizer: TokenizerFiles,
    seed: int,
    sft_epochs: int | None = None,
) -> Keys:
    """Every key the workflow sets on pack ``index``'s config (trainer-neutral names: GPT-NeoX's);
    ``sft_epochs``: an SFT pack's passes over its documents (``train_iters`` count bins: ``sft.sft_plan``)."""
    pack = plan.packs[index]
    keys = Keys(pack.name, {}, {})
    start_offset = schedule.start_offset(train.finetune_from, train.trainer)
    offset = start_offset + pack.iteration_offset
    keys.set("train_data_paths", [pack.merged_prefix], "the merged pack (prefix, no .bin)")
    keys.set("train_data_weights", [1.0], "one path: the pack is already mixed")
    if plan.validation:
        valid = [v.merged_prefix for v in plan.validation]
        why = "the held-out validation packs (one per language), read by no pack"
    else:
        valid = [pack.merged_prefix]
        why = "no held-out set (datapacks.validation_tokens: 0): evaluation reads the training pack"
    keys.set("valid_data_paths", valid, why)
    keys.set("valid_data_weights", [1.0] * len(valid), "every language's held-out set alike")
    keys.set("test_data_paths", valid, "GPT-NeoX needs train, valid and test paths together; " + why)
    keys.set("test_data_weights", [1.0] * len(valid), "as valid_data_weights")
    if sft_epochs is not None:
        keys.set(
            "pack_impl", "k_bin_packed", "SFT: whole documents in bins, never split or joined (seed 003)"
        )
    keys.set(
        "train_iters",
        pack.train_iters,
        (
            f"the most iterations whose k_bin_packed samples {sft_epochs} pass(es) over the pack make"
            if sft_epochs is not None
            else f"the plan: the most iterations that read {pack.tokens} tokens once"
        ),
    )
    keys.set(
        "iteration_offset",
        offset,
        "global step before this pack: the previous packs' iterations"
        + (f" after the start checkpoint {start_offset}" if start_offset else ""),
    )
    keys.set("seq_length", plan.seq_length, "training.seq_length")
    keys.set("train_batch_size", plan.global_batch_size, "training.global_batch_size")
    keys.set("save", checkpoints, "one checkpoint directory for the whole run (the trainer's own layout)")
    keys.set("load", checkpoints, "resume from its latest checkpoint")
    keys.set("vocab_file", tokenizer.model, "the tokenizer the data was made with")
    if tokenizer.merges:
        keys.set("merge_file", tokenizer.merges, "the GPT-2 vocabulary's merges")
    why = {"sentencepiece": "a SentencePiece model", "hf": "a Hugging Face tokenizer.json", "gpt2": "GPT-2's"}
    keys.set("tokenizer_type", TRAINER_TOKENIZERS[tokenizer.kind, "neox"], why[tokenizer.kind])
    keys.set("seed", seed, "the workflow's seed")
    overrides = train.phase_overrides.get(pack.phase, {})
    given = overrides.get("checkpoint_factor")
    cadence = cadence_of(train).pack(offset, pack.train_iters, None if given is None else int(given))
    if given is not None:
        why = f"train.phase_overrides.{pack.phase}"
    elif train.checkpoint_rounds:
        why = "the last checkpoint round's interval"
    else:
        why = f"{train.checkpoint_hours:g} h between checkpoints at {train.seconds_per_iter:g} s/iter"
    keys.set("checkpoint_factor", cadence.checkpoint_factor, why)
    if cadence.extra_save_iters and train.trainer == "megatron":
        raise ConfigError(
            f"train.checkpoint_rounds: pack {pack.name} would save at {cadence.extra_save_iters[:5]}... "
            "besides every checkpoint_factor, but Megatron-LM saves only at multiples of --save-interval "
            "(it has no extra_save_iters, GPT-NeoX's key): give Megatron-LM one interval, or train with "
            "trainer: neox"
        )
    if cadence.extra_save_iters:
        keys.set("extra_save_iters", cadence.extra_save_iters, "the earlier checkpoint rounds")
    keys.set(
        "exit_interval",
        cadence.exit_interval,
        f"the largest multiple of checkpoint_factor within {train.time_limit_minutes:g} min minus "
        f"{train.startup_minutes + train.save_minutes:g} min of margins at {train.seconds_per_iter:g} s/iter",
    )
    keys.set(
        "keep_last_n_checkpoints",
        None,
        "retention is the workflow's alone (train.keep_last, train.milestones, pack ends): GPT-NeoX's own "
        "would delete the oldest checkpoints, milestones and pack ends included",
    )
    lr = train.first_pack if index == 0 else train.later_packs
    if (
        train.trainer == "megatron"
        and lr == schema_entry("train", "first_pack" if index == 0 else "later_packs")["default"]
    ):
        lr = {}  # GPT-NeoX's pack keys; Megatron-LM's phase transitions keep the LR schedule running
    for key, value in lr.items():
        keys.set(
            key, value, "train.first_pack (seed 000's warmup pack)" if index == 0 else "train.later_packs"
        )
    if train.finetune_from:
        keys.set("finetune", index == 0, "the first pack starts from train.finetune_from (weights only)")
    for key, value in overrides.items():
        if key != "checkpoint_factor":
            keys.set(key, value, f"train.phase_overrides.{pack.phase}")
    return keys
