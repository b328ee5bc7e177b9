"""The base config checked before any key is written, the way each trainer's own argument code checks it
(GPT-NeoX's ``NeoXArgs.calculate_derived`` and ``validate_values``, Megatron-LM's ``validate_args`` and its
micro-batch calculator), with the config's numbers (``training.seq_length``, ``training.global_batch_size``:
the plan's; the base config's own values must agree): the positions (``max_position_embeddings`` >=
``seq_length``), the GPUs (``train.nodes`` x ``gpus_per_node`` / (TP x PP [x CP]) = data parallel), the batch
(global = micro batch x gradient accumulation x data parallel), the heads (x head size = hidden size); and the
data (the EOD the trainer will use must be the one the data ends with: GPT-NeoX's ``SPMTokenizer`` uses
``<|endoftext|>``, or ``<unk>`` when the model lacks it). Each error names the config's keys and the base
config's, and the values that would work. ``preflight`` runs them (the EOD aside) before any job.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from workflow_scripts.core import schedule
from workflow_scripts.core.cli import UserError
from workflow_scripts.tokens.kinds import TokenizerFiles
from workflow_scripts.train.settings import TrainSettings
from workflow_scripts.train.trainer_tokenizers import TRAINER_TOKENIZERS, trainer_eod

NEOX_EOD_PIECE = "<|endoftext|>"


class ConfigError(UserError, ValueError):
    """A base config or setting that disagrees with the plan; the message names both values."""


@dataclass(frozen=True)
class BaseKeys:
    """A trainer's names (GPT-NeoX's keys, Megatron-LM's argparse dests) of what the checks read."""

    trainer: str
    tp: str
    pp: str
    cp: str | None  # context parallel: Megatron-LM's data parallel divides by it too
    micro: str
    accumulation: str | None  # Megatron-LM has none: its number of micro batches is derived
    batch: str
    seq: str = "seq_length"
    positions: str = "max_position_embeddings"

    def shown(self, key: str) -> str:
        """The key as the base config spells it (Megatron-LM: the flag)."""
        return key if self.trainer == "GPT-NeoX" else "--" + key.replace("_", "-")


NEOX_KEYS = BaseKeys(
    "GPT-NeoX",
    "model_parallel_size",
    "pipe_parallel_size",
    None,
    "train_micro_batch_size_per_gpu",
    "gradient_accumulation_steps",
    "train_batch_size",
)
MEGATRON_KEYS = BaseKeys(
    "Megatron-LM",
    "tensor_model_parallel_size",
    "pipeline_model_parallel_size",
    "context_parallel_size",
    "micro_batch_size",
    None,
    "global_batch_size",
)


def _int(base: dict[str, Any], key: str | None, path: str, names: BaseKeys, least: int = 0) -> int | None:
    """The base config's whole number ``key`` (None: not set), at least ``least``."""
    value = base.get(key) if key else None
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | str) or not str(value).isdigit():
        raise ConfigError(f"{path}: {names.shown(key or '')} {value!r} is not a whole number")
    if int(value) < least:
        raise ConfigError(f"{path}: {names.shown(key or '')} {value}: at least {least}")
    return int(value)


def _closest(current: int, works: Callable[[int], bool], candidates: Iterable[int]) -> int | None:
    """The value nearest ``current`` (the smaller on a tie) that ``works``, other than ``current``."""
    found = [v for v in candidates if v != current and works(v)]
    return min(found, key=lambda v: (abs(v - current), v), default=None)


def _divisors(n: int) -> list[int]:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted({*small, *(n // d for d in small)})


def check_base(
    base: dict[str, Any], seq_length: int, global_batch_size: int, train: TrainSettings, base_path: str
) -> dict[str, int]:
    """Check the base config (the model keys of ``train.init_from.hf`` over it) against the config's
    sequence length and global batch size and the cluster; return the parallel layout."""
    names = NEOX_KEYS if train.trainer == "neox" else MEGATRON_KEYS

    def number(key: str | None, least: int = 0) -> int | None:
        return _int(base, key, base_path, names, least)

    for key, ours, setting in (
        (names.seq, seq_length, "training.seq_length"),
        (names.batch, global_batch_size, "training.global_batch_size"),
    ):
        given = number(key)
        if given is not None and given != ours:
            raise ConfigError(
                f"{base_path}: {names.shown(key)} {given}, but the plan uses {setting} {ours}: leave "
                f"{names.shown(key)} out (the workflow sets it from {setting}), or set it to {ours}"
            )
    _check_positions(number(names.positions), seq_length, names, base_path)
    # GPT-NeoX takes pipe_parallel_size 0 as 1
    model = tuple(max(1, number(key) or 1) for key in (names.tp, names.pp, names.cp))
    dp = _data_parallel(train, model, names, base_path)
    batch = Batch(global_batch_size, number(names.micro, 1), number(names.accumulation, 1), names)
    micro, accumulation = batch.split(dp, train, model, base_path)
    hidden, heads = number("hidden_size"), number("num_attention_heads")
    if hidden is not None and heads is not None:
        schedule.check_heads(hidden, heads, number("kv_channels"))
    tp, pp, cp = model
    return {"tp": tp, "pp": pp, "cp": cp, "dp": dp, "micro": micro, "accumulation": accumulation}


def _check_positions(positions: int | None, seq_length: int, names: BaseKeys, base_path: str) -> None:
    """Both trainers require ``max_position_embeddings`` and refuse it below ``seq_length``."""
    key = names.shown(names.positions)
    if positions is None:
        raise ConfigError(
            f"{base_path}: {key} is not set, which {names.trainer} requires: set it to training.seq_length "
            f"{seq_length} or more"
        )
    if positions < seq_length:
        raise ConfigError(
            f"{base_path}: {key} {positions} < training.seq_length {seq_length}, which {names.trainer} "
            f"refuses. Would work: {key} {seq_length}, or training.seq_length {positions}"
        )


def _model_size(model: tuple[int, ...], names: BaseKeys) -> str:
    keys = (names.tp, names.pp, names.cp)
    return " x ".join(f"{names.shown(k)} {v}" for k, v in zip(keys, model, strict=True) if k)


def _data_parallel(train: TrainSettings, model: tuple[int, ...], names: BaseKeys, base_path: str) -> int:
    """Data parallel = GPUs / (TP x PP x CP), which must be whole."""
    size = math.prod(model)
    try:
        return schedule.data_parallel_size(train.nodes, train.gpus_per_node, size)
    except schedule.ScheduleError:
        gpus = _closest(train.gpus_per_node, lambda g: train.nodes * g % size == 0, range(1, 2 * size + 1))
        raise ConfigError(
            f"train.nodes {train.nodes} x train.gpus_per_node {train.gpus_per_node} GPUs do not split into "
            f"model replicas of {_model_size(model, names)} = {size} GPUs ({base_path}). Would work: "
            f"train.gpus_per_node {gpus}, or a model parallel layout that divides "
            f"{train.nodes * train.gpus_per_node}"
        ) from None


@dataclass(frozen=True)
class Batch:
    """The global batch and what the base config gives of its split: micro batch and gradient accumulation
    (None: not set). It must equal micro x accumulation x data parallel when both are known, else be a
    multiple of what is. GPT-NeoX's ``gradient_accumulation_steps`` is 1 unless set (DeepSpeed's default)
    and ``calculate_batch_parameters`` derives the micro batch when it is not set; Megatron-LM requires the
    micro batch and derives the number of micro batches."""

    size: int
    micro: int | None
    accumulation: int | None
    names: BaseKeys

    @property
    def known_accumulation(self) -> int | None:
        return self.accumulation or (1 if self.names.accumulation else None)

    def fits(self, dp: int, micro: int | None = None, accumulation: int | None = None) -> bool:
        """Whether the batch splits over ``dp`` replicas (with another micro batch or accumulation)."""
        m, a = micro or self.micro, accumulation or self.known_accumulation
        if m is not None and a is not None:
            return self.size == m * a * dp
        return self.size % ((m or 1) * (a or 1) * dp) == 0

    def split(self, dp: int, train: TrainSettings, model: tuple[int, ...], base_path: str) -> tuple[int, int]:
        """(micro batch, gradient accumulation) as the trainer derives them; else an error naming the keys
        and the values that would work."""
        names, micro, accumulation = self.names, self.micro, self.known_accumulation
        if micro is None and accumulation is None:
            raise ConfigError(
                f"{base_path}: {names.shown(names.micro)} is not set, which {names.trainer} requires"
                + (". Would work: " + names.shown(names.micro) + " 1" if self.fits(dp, micro=1) else "")
            )
        if self.fits(dp):
            if micro is None:
                return self.size // (dp * (accumulation or 1)), accumulation or 1
            return micro, self.size // (micro * dp)
        unit = (micro or 1) * (accumulation or 1) * dp
        parts = [f"{names.shown(names.micro)} {micro}"] if micro else []
        if names.accumulation:
            unset = " (unset: 1)" if self.accumulation is None else ""
            parts.append(f"{names.shown(names.accumulation)} {accumulation}{unset}")
        exact = micro is not None and accumulation is not None
        raise ConfigError(
            f"training.global_batch_size {self.size} {'must equal' if exact else 'must be a multiple of'} "
            f"{' x '.join([*parts, f'data parallel {dp}'])} = {unit} ({base_path}; data parallel = "
            f"train.nodes {train.nodes} x train.gpus_per_node {train.gpus_per_node} / "
            f"({_model_size(model, names)})), as {names.trainer} requires. Would work: "
            + ", or ".join(self._fixes(dp, unit, exact, train, math.prod(model)))
        )

    def _fixes(self, dp: int, unit: int, exact: bool, train: TrainSettings, size: int) -> list[str]:
        """Single changes that would make the batch split: the global batch, the GPUs per node (else the
        nodes), the micro batch or the gradient accumulation."""
        below, above = self.size // unit * unit, (self.size // unit + 1) * unit
        fixes = [f"training.global_batch_size {v}" for v in ((unit,) if exact else (below, above)) if v]

        def fits_on(nodes: int, per_node: int) -> bool:
            return nodes * per_node % size == 0 and self.fits(nodes * per_node // size)

        n, g = train.nodes, train.gpus_per_node
        if gpus := _closest(g, lambda v: fits_on(n, v), range(1, 2 * g + 1)):
            fixes.append(f"train.gpus_per_node {gpus}")
        elif nodes := _closest(n, lambda v: fits_on(v, g), range(1, 2 * n + 1)):
            fixes.append(f"train.nodes {nodes}")
        divisors = _divisors(self.size // dp) if self.size % dp == 0 else []
        for key, value, fits in (
            (self.names.micro, self.micro, lambda v: self.fits(dp, micro=v)),
            (self.names.accumulation, self.known_accumulation, lambda v: self.fits(dp, accumulation=v)),
        ):
            if key and value and (found := _closest(value, fits, divisors)):
                fixes.append(f"{self.names.shown(key)} {found}")
        return fixes


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
