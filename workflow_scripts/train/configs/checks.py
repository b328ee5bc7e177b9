"""The base config checked before any key is written: against the plan (``seq_length`` and the global batch
size must agree; the error names both values), the cluster (the batch must split over the GPUs:
``train.nodes`` x ``gpus_per_node`` / (TP x PP)), the model (heads x head size must equal the hidden size)
and the data (the EOD the trainer will use must be the one the data ends with: GPT-NeoX's ``SPMTokenizer``
uses ``<|endoftext|>``, or ``<unk>`` when the model lacks it). Base config keys of either trainer are read.
"""

from __future__ import annotations

from typing import Any

from workflow_scripts.core import schedule
from workflow_scripts.core.cli import UserError
from workflow_scripts.datapacks.plan import Plan
from workflow_scripts.tokens.kinds import TokenizerFiles
from workflow_scripts.train.settings import TrainSettings
from workflow_scripts.train.trainer_tokenizers import TRAINER_TOKENIZERS, trainer_eod

NEOX_EOD_PIECE = "<|endoftext|>"


class ConfigError(UserError, ValueError):
    """A base config or setting that disagrees with the plan; the message names both values."""


def _first(base: dict[str, Any], *names: str) -> Any:
    return next((base[n] for n in names if base.get(n) is not None), None)


def check_base(base: dict[str, Any], plan: Plan, train: TrainSettings, base_path: str) -> dict[str, int]:
    """Check the base config against the plan and the cluster; return the parallel layout."""
    seq = _first(base, "seq_length")
    if seq is not None and int(seq) != plan.seq_length:
        raise ConfigError(
            f"{base_path}: seq_length {seq}, but the plan uses training.seq_length {plan.seq_length}"
        )
    batch = _first(base, "train_batch_size", "global_batch_size")
    if batch is not None and int(batch) != plan.global_batch_size:
        raise ConfigError(
            f"{base_path}: train batch size {batch}, but the plan uses training.global_batch_size "
            f"{plan.global_batch_size}"
        )
    tp = int(_first(base, "model_parallel_size", "tensor_model_parallel_size") or 1)
    pp = int(_first(base, "pipe_parallel_size", "pipeline_model_parallel_size") or 1)
    dp = schedule.data_parallel_size(train.nodes, train.gpus_per_node, tp, pp)
    micro = int(_first(base, "train_micro_batch_size_per_gpu", "micro_batch_size") or 1)
    accumulation = schedule.check_batch(plan.global_batch_size, micro, dp)
    given = _first(base, "gradient_accumulation_steps")
    if given is not None and int(given) != accumulation:
        raise ConfigError(
            f"{base_path}: gradient_accumulation_steps {given}, but {plan.global_batch_size} = micro "
            f"batch {micro} x data parallel {dp} x {accumulation}"
        )
    hidden, heads = _first(base, "hidden_size"), _first(base, "num_attention_heads")
    if hidden is not None and heads is not None:
        schedule.check_heads(int(hidden), int(heads), _first(base, "kv_channels"))
    return {"tp": tp, "pp": pp, "dp": dp, "micro": micro, "accumulation": accumulation}


def check_eod(signature: dict[str, Any], files: TokenizerFiles, trainer: str) -> int | None:
    """The EOD id the data ends with (from the signature); the trainer's tokenizer must take the same."""
    ids = {
        (e.get("identity") or {}).get("tokenizer", {}).get("eod_id")
        for e in signature["prefixes"]
        if (e.get("identity") or {}).get("tokenizer")
    }
    if len(ids) != 1:
        return None
    eod = ids.pop()
    if eod is None:
        return eod
    tok = files.load()
    theirs, rule = trainer_eod(tok, trainer)
    if theirs != eod:
        owner = "GPT-NeoX's" if trainer == "neox" else "Megatron-LM's"
        hint = (
            f" Use a model with '{NEOX_EOD_PIECE}' (tokenize.eod_piece then picks it) or train with "
            "Megatron-LM"
            if tok.kind == "sentencepiece" and trainer == "neox"
            else ""
        )
        raise ConfigError(
            f"the data ends documents with id {eod} ({tok.piece(eod)!r}), but {owner} "
            f"{TRAINER_TOKENIZERS[tok.kind, trainer]} takes EOD = {rule} = {theirs} ({tok.piece(theirs)!r}) "
            f"with {files.model}: end-of-document masking would point at the wrong token.{hint}"
        )
    return eod
