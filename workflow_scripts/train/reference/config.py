"""The trainer config: ``load_config`` reads a GPT-NeoX YAML (``neox_config``) or a Megatron-LM arguments
file (``megatron_config``) into a ``RunConfig`` (``run_config``), checked the same way for both.

Every key it reads is in ``IMPLEMENTED``; any other known key, and an implemented key whose value the
reference trainer does not support (``pos_emb: rotary``, ``precision: fp16``...), is listed in
``RunConfig.not_implemented`` with what is used instead, which the trainer prints once at start. Values that
would change which samples are read or when the run saves (the batch arithmetic, ``pack_impl``, model or
pipeline parallelism, ``checkpoint_scale``) are refused with a ``ConfigError`` naming the key. The trainer's
own tokenizer class gives the vocabulary size and the end of document (``tokenizer_ids``).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from typing import Any

from workflow_scripts.train.configs.megatron import scheduler_state
from workflow_scripts.train.reference import megatron_config, neox_config
from workflow_scripts.train.reference.lr import MegatronSchedule
from workflow_scripts.train.reference.run_config import ConfigError, ModelConfig, RunConfig

NEOX_EOD_PIECE = "<|endoftext|>"
ASSISTANT_PIECE = "<|assistant|>"
PACK_IMPLS = ("packed", "k_bin_packed")
DECAY_STYLES = ("constant", "linear", "cosine")

IMPLEMENTED = frozenset(
    {
        # data
        "train_data_paths",
        "train_data_weights",
        "valid_data_paths",
        "valid_data_weights",
        "seq_length",
        "pack_impl",
        "data_impl",
        "vocab_file",
        "merge_file",
        "tokenizer_type",
        "make_vocab_size_divisible_by",
        # batch and iterations
        "train_batch_size",
        "train_micro_batch_size_per_gpu",
        "gradient_accumulation_steps",
        "train_iters",
        "iteration_offset",
        # optimizer and schedule
        "optimizer",
        "min_lr",
        "lr_decay_style",
        "warmup",
        "override_lr_scheduler",
        "weight_decay",
        "gradient_clipping",
        # checkpoints and exits
        "checkpoint_factor",
        "checkpoint_scale",
        "extra_save_iters",
        "exit_interval",
        "save",
        "load",
        "finetune",
        # evaluation, logging, run
        "seed",
        "eval_interval",
        "eval_iters",
        "log_interval",
        "precision",
        "zero_optimization",
        "distributed_backend",
        "pipe_parallel_size",
        "model_parallel_size",
        # model
        "num_layers",
        "hidden_size",
        "num_attention_heads",
        "max_position_embeddings",
        "no_weight_tying",
        "attention_dropout",
        "hidden_dropout",
        "pos_emb",
        "rotary_pct",
        "rotary_emb_base",
        "norm",
        "layernorm_epsilon",
        "rms_norm_epsilon",
        "init_method_std",
        "activation",
        "intermediate_size",
        "mlp_multiple_of",
        "num_kv_heads",
        "use_bias_in_attn_linear",
        "use_bias_in_mlp",
        "use_bias_in_norms",
        "gpt_j_residual",
        "keep_last_n_checkpoints",
    }
)


def _int(raw: dict[str, Any], key: str, default: int | None = None, minimum: int | None = 0) -> int | None:
    value = raw.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or int(value) != value:
        raise ConfigError(f"{key}: {value!r} is not an integer")
    if minimum is not None and value < minimum:
        raise ConfigError(f"{key}: {value} is below {minimum}")
    return int(value)


def _required(raw: dict[str, Any], key: str, path: str) -> Any:
    if raw.get(key) is None:
        raise ConfigError(f"{path}: {key} is required")
    return raw[key]


def _paths(raw: dict[str, Any], key: str) -> list[str]:
    value = raw.get(key) or []
    if isinstance(value, str):
        value = [value]
    return [str(v) for v in value]


def _weights(raw: dict[str, Any], key: str, paths: list[str]) -> list[float]:
    weights = raw.get(key) or [1.0] * len(paths)
    if len(weights) != len(paths):
        raise ConfigError(f"{key}: {len(weights)} weights for {len(paths)} paths")
    if any(float(w) < 0 for w in weights) or (paths and sum(float(w) for w in weights) <= 0):
        raise ConfigError(f"{key}: weights must be >= 0 with a positive sum, got {weights}")
    return [float(w) for w in weights]


def batch_layout(raw: dict[str, Any], world_size: int) -> tuple[int, int, int]:
    """(train_batch_size, micro batch, gradient accumulation), completed as DeepSpeed does, and checked:
    the batch must be micro batch x accumulation x data parallel (the world size)."""
    batch = _int(raw, "train_batch_size", minimum=1)
    micro = _int(raw, "train_micro_batch_size_per_gpu", minimum=1)
    acc = _int(raw, "gradient_accumulation_steps", minimum=1)
    if batch is None and micro is None:
        raise ConfigError("train_batch_size or train_micro_batch_size_per_gpu is required")
    if batch is None:
        acc = acc or 1
        batch = micro * acc * world_size
    elif micro is None:
        acc = acc or 1
        micro = batch // (acc * world_size)
    elif acc is None:
        acc = batch // (micro * world_size)
    if micro < 1 or acc < 1 or batch != micro * acc * world_size:
        raise ConfigError(
            f"train_batch_size {batch} != train_micro_batch_size_per_gpu {micro} x "
            f"gradient_accumulation_steps {acc} x data parallel {world_size} (the number of processes)"
        )
    return batch, micro, acc


TOKENIZER_TYPES = ("SPMTokenizer", "HFTokenizer", "GPT2BPETokenizer")


def tokenizer_ids(
    vocab_file: str,
    sft: bool,
    tokenizer_type: str = "SPMTokenizer",
    merge_file: str | None = None,
    megatron: bool = False,
) -> tuple[int, int, int | None]:
    """(vocab size, EOD id, assistant id) by the trainer's own tokenizer class: GPT-NeoX's ``SPMTokenizer``
    (EOD ``piece_to_id('<|endoftext|>')``), ``HFTokenizer`` (``token_to_id('<|endoftext|>')``) and
    ``GPT2BPETokenizer`` (``encoder['<|endoftext|>']``); Megatron-LM's ``GPTSentencePieceTokenizer`` (the
    model's EOS), ``HuggingFaceTokenizer`` (``AutoTokenizer`` on the folder: its ``eos_token``) and
    ``GPT2BPETokenizer``. The assistant id only for SFT (``<|assistant|>`` must exist)."""
    if tokenizer_type not in TOKENIZER_TYPES:
        known = ", ".join(TOKENIZER_TYPES)
        raise ConfigError(f"tokenizer_type: {tokenizer_type}: the reference reads {known}")
    hf_folder = megatron and tokenizer_type == "HFTokenizer"
    if not (os.path.isdir(vocab_file) if hf_folder else os.path.isfile(vocab_file)):
        raise ConfigError(f"vocab_file: {vocab_file} is not a {'folder' if hf_folder else 'file'}")
    if tokenizer_type == "SPMTokenizer":
        import sentencepiece as spm

        sp = spm.SentencePieceProcessor(model_file=vocab_file)
        size, lookup = sp.get_piece_size(), sp.piece_to_id
        eod = sp.eos_id() if megatron else sp.piece_to_id(NEOX_EOD_PIECE)
        known = lambda piece: sp.id_to_piece(sp.piece_to_id(piece)) == piece  # noqa: E731
    elif tokenizer_type == "GPT2BPETokenizer":
        if not merge_file or not os.path.isfile(merge_file):
            raise ConfigError(f"merge_file: {merge_file} is not a file (GPT2BPETokenizer reads both)")
        with open(vocab_file, encoding="utf-8") as f:
            encoder = json.load(f)
        if NEOX_EOD_PIECE not in encoder:
            raise ConfigError(f"{vocab_file}: GPT2BPETokenizer takes EOD = encoder['{NEOX_EOD_PIECE}']: none")
        size, eod, lookup, known = len(encoder), encoder[NEOX_EOD_PIECE], encoder.get, encoder.__contains__
    elif hf_folder:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(vocab_file)
        if tok.eos_token_id is None:
            raise ConfigError(f"{vocab_file}: HuggingFaceTokenizer takes EOD = eos_token: none in the folder")
        size, eod, lookup = len(tok), tok.eos_token_id, tok.convert_tokens_to_ids
        known = lambda piece: piece in tok.get_vocab()  # noqa: E731
    else:
        from tokenizers import Tokenizer

        backend = Tokenizer.from_file(vocab_file)
        if (eod := backend.token_to_id(NEOX_EOD_PIECE)) is None:
            raise ConfigError(f"{vocab_file}: HFTokenizer takes EOD = token_to_id('{NEOX_EOD_PIECE}'): none")
        size, lookup = backend.get_vocab_size(), backend.token_to_id
        known = lambda piece: backend.token_to_id(piece) is not None  # noqa: E731
    assistant = None
    if sft:
        if not known(ASSISTANT_PIECE):
            raise ConfigError(
                f"SFT_ENABLED=1, but {vocab_file} has no {ASSISTANT_PIECE} piece to find assistant spans with"
            )
        assistant = lookup(ASSISTANT_PIECE)
    return size, eod, assistant


def padded_vocab(size: int, divisible_by: int) -> int:
    """GPT-NeoX's padded vocabulary: the next multiple of ``make_vocab_size_divisible_by``."""
    return int(math.ceil(size / divisible_by) * divisible_by)


MODEL_CHOICES = {"norm": ("layernorm", "rmsnorm"), "pos_emb": ("learned", "rotary", "none"),
                 "activation": ("gelu", "swiglu")}  # fmt: skip


def model_config(
    raw: dict[str, Any],
    path: str,
    vocab_size: int,
    seq: int,
    max_pos: int,
    ffn_hidden_size: int | None = None,
) -> ModelConfig:
    """The model's shape from GPT-NeoX's keys (and Megatron-LM's exact ``ffn_hidden_size``); a shape the
    reference cannot build is refused (a checkpoint of another shape would not load, or would load as
    another model)."""
    for key, choices in MODEL_CHOICES.items():
        if key in raw and raw[key] not in choices:
            built = " or ".join(choices)
            raise ConfigError(f"{path}: {key}: {raw[key]}: the reference trainer builds {built}")
    if raw.get("gpt_j_residual"):
        raise ConfigError(f"{path}: gpt_j_residual: true: the reference trainer builds sequential layers")
    heads, hidden = raw["num_attention_heads"], raw["hidden_size"]  # checked by load_config
    kv_heads = _int(raw, "num_kv_heads", minimum=1)
    if kv_heads is not None and heads % kv_heads:
        raise ConfigError(f"num_kv_heads {kv_heads} must divide num_attention_heads {heads}")
    norm = str(raw.get("norm", "layernorm"))
    rotary_pct = float(raw.get("rotary_pct", 1.0))
    if not 0 < rotary_pct <= 1 or int(hidden // heads * rotary_pct) % 2:
        raise ConfigError(f"rotary_pct {rotary_pct}: must give an even number of each head's dimensions")
    return ModelConfig(
        vocab_size=vocab_size,
        num_layers=_int(raw, "num_layers", _required(raw, "num_layers", path), minimum=1),
        hidden_size=hidden,
        num_attention_heads=heads,
        seq_length=seq,
        max_position_embeddings=max_pos,
        tied=not bool(raw.get("no_weight_tying", False)),
        attention_dropout=float(raw.get("attention_dropout", 0.1)),
        hidden_dropout=float(raw.get("hidden_dropout", 0.1)),
        norm=norm,
        norm_epsilon=float(
            raw.get("rms_norm_epsilon", 1e-8) if norm == "rmsnorm" else raw.get("layernorm_epsilon", 1e-5)
        ),
        pos_emb=str(raw.get("pos_emb", "learned")),
        rotary_pct=rotary_pct,
        rotary_emb_base=_int(raw, "rotary_emb_base", 10000, minimum=1),
        activation=str(raw.get("activation", "gelu")),
        intermediate_size=_int(raw, "intermediate_size", minimum=1),
        mlp_multiple_of=_int(raw, "mlp_multiple_of", 1, minimum=1),
        ffn_hidden_size=ffn_hidden_size,
        num_kv_heads=kv_heads,
        attn_bias=bool(raw.get("use_bias_in_attn_linear", True)),
        mlp_bias=bool(raw.get("use_bias_in_mlp", True)),
        norm_bias=bool(raw.get("use_bias_in_norms", True)),
        init_method_std=float(raw.get("init_method_std", 0.02)),
    )


def _check_values(raw: dict[str, Any], bf16: bool) -> tuple[list[str], str, int]:
    """Values the reference supports only partly: the notes, the precision used and the ZeRO stage used."""
    notes: list[str] = []
    supported = {"data_impl": "mmap"}
    for key, value in supported.items():
        if key in raw and raw[key] != value:
            notes.append(f"{key}: {raw[key]} ({value} is used)")
    precision = str(raw.get("precision") or "fp32")
    if precision in ("bf16", "bfloat16") and not bf16:
        notes.append(f"precision: {precision} (fp32: no GPU with bf16 here)")
        precision = "fp32"
    elif precision in ("bf16", "bfloat16"):
        precision = "bf16"
    elif precision != "fp32":
        notes.append(f"precision: {precision} (fp32 is used)")
        precision = "fp32"
    zero = raw.get("zero_optimization") or {}
    stage = int(zero.get("stage", 0) or 0)
    if stage > 1:
        notes.append(f"zero_optimization.stage: {stage} (stage 1 is used)")
        stage = 1
    others = sorted(set(zero) - {"stage"})
    if others:
        notes.append("zero_optimization: " + ", ".join(others))
    optimizer = raw.get("optimizer") or {}
    if str(optimizer.get("type", "Adam")).lower() not in ("adam", "adamw"):
        notes.append(f"optimizer.type: {optimizer.get('type')} (Adam, decoupled weight decay, is used)")
    extra = sorted(set(optimizer.get("params") or {}) - {"lr", "betas", "eps"})
    if extra:
        notes.append("optimizer.params: " + ", ".join(extra))
    return notes, precision, stage


def load_config(
    paths: Sequence[str],
    world_size: int = 1,
    bf16: bool = False,
    evaluation: bool = False,
    pack_phase: int | None = None,
) -> RunConfig:
    """Read and check the config(s) for a run of ``world_size`` data-parallel processes (``bf16``: the GPU
    supports bfloat16; ``evaluation``: for ``--eval-only``, a Megatron-LM run read without its phases;
    ``pack_phase``: a Megatron-LM run read in that phase, not its checkpoints')."""
    path = paths[0]
    megatron: dict[str, Any] = {}
    if path.endswith(".args"):
        if len(paths) > 1:
            raise ConfigError(f"{', '.join(paths)}: Megatron-LM takes one arguments file")
        raw, megatron = megatron_config.read_megatron(path, evaluation, pack_phase)
    else:
        raw = neox_config.read_yaml(paths)
    for key in ("pipe_parallel_size", "model_parallel_size"):
        if int(raw.get(key) or 1) != 1:
            raise ConfigError(f"{key}: {raw[key]}: the reference trainer is data parallel only (1)")
    if raw.get("checkpoint_scale", "linear") != "linear":
        raise ConfigError(f"checkpoint_scale: {raw['checkpoint_scale']}: only linear is implemented")
    pack_impl = str(raw.get("pack_impl") or "packed")
    if pack_impl not in PACK_IMPLS:
        raise ConfigError(f"pack_impl: {pack_impl}: the reference trainer reads {' or '.join(PACK_IMPLS)}")
    decay = str(raw.get("lr_decay_style") or "linear")
    if decay not in DECAY_STYLES:
        raise ConfigError(f"lr_decay_style: {decay}: implemented are {', '.join(DECAY_STYLES)}")
    if megatron:
        raw["tokenizer_type"] = megatron_config.neox_tokenizer(megatron.get("tokenizer_type"))
    notes, precision, stage = _check_values(raw, bf16)
    unknown = sorted(set(raw) - IMPLEMENTED)
    if unknown:
        notes.append("ignored: " + ", ".join(unknown))
    train_paths = _paths(raw, "train_data_paths")
    if not train_paths:
        raise ConfigError(f"{path}: train_data_paths is required")
    valid_paths = _paths(raw, "valid_data_paths")
    batch, micro, acc = batch_layout(raw, world_size)
    seq = _int(raw, "seq_length", minimum=2)
    if seq is None:
        raise ConfigError(f"{path}: seq_length is required")
    optimizer = raw.get("optimizer") or {}
    params = optimizer.get("params") or {}
    if params.get("lr") is None:
        raise ConfigError(f"{path}: optimizer.params.lr is required")
    betas = tuple(float(b) for b in params.get("betas", (0.9, 0.999)))
    vocab_file = str(_required(raw, "vocab_file", path))
    tokenizer = (str(raw.get("tokenizer_type") or "GPT2BPETokenizer"), raw.get("merge_file"))
    vocab, eod, _ = tokenizer_ids(vocab_file, False, *tokenizer, megatron=bool(megatron))
    heads = _int(raw, "num_attention_heads", minimum=1)
    hidden = _int(raw, "hidden_size", minimum=1)
    if heads is None or hidden is None or hidden % heads:
        raise ConfigError(f"hidden_size {hidden} must be a multiple of num_attention_heads {heads}")
    max_pos = _int(raw, "max_position_embeddings", seq, minimum=1)
    if max_pos < seq:
        raise ConfigError(f"max_position_embeddings {max_pos} < seq_length {seq}")
    divisible_by = _int(raw, "make_vocab_size_divisible_by", 128, minimum=1)
    vocab_size = padded_vocab(vocab, divisible_by)
    model = model_config(raw, path, vocab_size, seq, max_pos, megatron.get("ffn_hidden_size"))
    factor = _int(raw, "checkpoint_factor", minimum=1)
    exit_interval = _int(raw, "exit_interval", minimum=1)
    eval_interval = _int(raw, "eval_interval", 1000, minimum=1)
    extra = tuple(int(i) for i in (raw.get("extra_save_iters") or ()))
    save, load = raw.get("save"), raw.get("load")
    return RunConfig(
        path=path,
        name=os.path.splitext(os.path.basename(path))[0],
        train_paths=train_paths,
        train_weights=_weights(raw, "train_data_weights", train_paths),
        valid_paths=valid_paths,
        valid_weights=_weights(raw, "valid_data_weights", valid_paths),
        seq_length=seq,
        pack_impl=pack_impl,
        batch=batch,
        micro=micro,
        accumulation=acc,
        data_parallel=world_size,
        train_iters=_int(raw, "train_iters", _required(raw, "train_iters", path)),
        offset=_int(raw, "iteration_offset", 0) or 0,
        lr=float(params["lr"]),
        betas=(betas[0], betas[1]),
        eps=float(params.get("eps", 1e-8)),
        min_lr=float(raw.get("min_lr", 0.0)),
        decay_style=decay,
        warmup=float(raw.get("warmup", 0.01)),
        override_lr_scheduler=bool(raw.get("override_lr_scheduler", False)),
        weight_decay=float(raw.get("weight_decay", 0.01)),
        clipping=float(raw.get("gradient_clipping", 1.0) or 0.0),
        checkpoint_factor=factor,
        extra_save_iters=extra,
        exit_interval=exit_interval,
        save=None if save is None else str(save),
        load=None if load is None else str(load),
        finetune=bool(raw.get("finetune", False)),
        seed=_int(raw, "seed", 1234),
        eval_interval=eval_interval,
        eval_iters=_int(raw, "eval_iters", 100),
        log_interval=_int(raw, "log_interval", 100, minimum=1),
        precision=precision,
        zero_stage=stage,
        backend=raw.get("distributed_backend"),
        vocab_file=vocab_file,
        model=model,
        eod_id=eod,
        tokenizer=tokenizer,
        not_implemented=notes,
        trainer="megatron" if megatron else "neox",
        keep_last=_int(raw, "keep_last_n_checkpoints", minimum=1),
        phase_transitions=megatron.get("phase_transitions", ()),
        save_signals=megatron.get("save_signals", RunConfig.save_signals),
        megatron_schedule=(
            MegatronSchedule.of(scheduler_state(megatron["scheduler"], batch), batch) if megatron else None
        ),
        scheduler_from=megatron.get("scheduler_from"),
        vocab_divisible_by=divisible_by,
        megatron_validation=megatron.get("validation"),
    )
