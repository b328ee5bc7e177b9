"""What a run reads from its config, whichever trainer's: the model's shape (``ModelConfig``), the run
(``RunConfig``, GPT-NeoX's names and defaults), and ``ConfigError``, which refuses a config the reference
trainer cannot run as the trainer would."""

from __future__ import annotations

import math
import signal
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from workflow_scripts.core.cli import UserError

if TYPE_CHECKING:
    from workflow_scripts.train.reference.lr import MegatronSchedule


class ConfigError(UserError, ValueError):
    """A config the reference trainer cannot run as GPT-NeoX would; the message names the key."""


@dataclass(frozen=True)
class ModelConfig:
    """The model's shape (GPT-NeoX key names and defaults; ``ffn_hidden_size`` Megatron-LM's)."""

    vocab_size: int  # padded to make_vocab_size_divisible_by, as GPT-NeoX does
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    seq_length: int
    max_position_embeddings: int
    tied: bool = True
    attention_dropout: float = 0.0
    hidden_dropout: float = 0.0
    norm: str = "layernorm"  # or rmsnorm
    norm_epsilon: float = 1e-5  # layernorm_epsilon or rms_norm_epsilon, by norm
    pos_emb: str = "learned"  # or rotary, none
    rotary_pct: float = 1.0
    rotary_emb_base: int = 10000
    activation: str = "gelu"  # or swiglu
    intermediate_size: int | None = None
    mlp_multiple_of: int = 1
    ffn_hidden_size: int | None = None  # Megatron-LM's: linear2's input (each SwiGLU half), exact
    num_kv_heads: int | None = None
    attn_bias: bool = True  # use_bias_in_attn_linear
    mlp_bias: bool = True  # use_bias_in_mlp
    norm_bias: bool = True  # use_bias_in_norms (LayerNorm only)
    init_method_std: float = 0.02

    @property
    def kv_heads(self) -> int:
        return self.num_kv_heads or self.num_attention_heads

    @property
    def rotary(self) -> bool:
        return self.pos_emb == "rotary"

    def _ffn(self) -> tuple[int, int]:
        """The MLP's sizes, ``linear1``'s output and ``linear2``'s input: Megatron-LM's ``ffn_hidden_size``
        when given, GPT-NeoX's ParallelMLP's from ``intermediate_size`` and ``mlp_multiple_of`` otherwise."""
        if self.ffn_hidden_size is not None:
            gated = self.activation == "swiglu"
            return (2 if gated else 1) * self.ffn_hidden_size, self.ffn_hidden_size
        ffn = self.intermediate_size or 4 * self.hidden_size
        ffn_in = ffn
        if self.activation == "swiglu":
            ffn = int(ffn * 2 / 3)
            ffn_in = ffn // 2
        m = self.mlp_multiple_of
        return 2 * m * math.ceil(ffn / (2 * m)), m * math.ceil(ffn_in / m)

    @property
    def ffn_size(self) -> int:
        return self._ffn()[0]

    @property
    def ffn_in_size(self) -> int:
        return self._ffn()[1]


@dataclass(frozen=True)
class MegatronValidation:
    """Megatron-LM's validation blend and where its evaluations read it.

    ``samples`` is what ``get_train_valid_test_num_samples`` asks: ``(train_iters // eval_interval + 1) x
    eval_iters x batch`` of the whole run (its ``--train-iters``, or ``--train-samples`` / batch, not the
    phase's), or ``eval_iters x batch`` for an evaluation (``--skip-train``). One prefix is asked for exactly
    that; several with weights (``W1 P1 W2 P2 ...``) are each asked ``ceil(ceil(samples x w) x (1 +
    surplus))`` and blended to ``sum(ceil(samples x w))``; several without weights are each built for one
    epoch and blended by their lengths, capped at ``samples`` (the blend Megatron-LM runs out of).
    Evaluations read from a running position, ``consumed_valid_samples`` (``eval_iters x batch`` further
    each time; 0 for an evaluation and a ``--finetune`` start), which each checkpoint saves; a run of
    ``--train-iters`` resuming a checkpoint that saved none takes ``iteration // eval_interval x eval_iters
    x batch``, as Megatron-LM's data loaders do."""

    samples: int
    weights: list[float] | None  # as given; None: none given
    surplus: float = 0.005  # --mid-level-dataset-surplus
    by_iterations: bool = False  # --train-iters (not --train-samples)

    @property
    def weighted(self) -> bool:
        return self.weights is not None

    @property
    def normalized(self) -> list[float]:
        """Megatron-LM's ``normalize``: each weight over their sum (numpy's, in float64)."""
        import numpy as np

        w = np.asarray(self.weights or [], dtype=np.float64)
        return (w / np.sum(w)).tolist()


@dataclass(frozen=True)
class RunConfig:
    """Everything the trainer reads from the config (GPT-NeoX's defaults where a key is missing)."""

    path: str
    name: str
    train_paths: list[str]
    train_weights: list[float]
    valid_paths: list[str]
    valid_weights: list[float]
    seq_length: int
    pack_impl: str
    batch: int
    micro: int
    accumulation: int
    data_parallel: int
    train_iters: int
    offset: int
    lr: float
    betas: tuple[float, float]
    eps: float
    min_lr: float
    decay_style: str
    warmup: float
    override_lr_scheduler: bool
    weight_decay: float
    clipping: float
    checkpoint_factor: int | None
    extra_save_iters: tuple[int, ...]
    exit_interval: int | None
    save: str | None
    load: str | None
    finetune: bool
    seed: int
    eval_interval: int | None
    eval_iters: int
    log_interval: int
    precision: str  # as given: fp32, bf16/bfloat16, fp16
    zero_stage: int
    backend: str | None
    vocab_file: str
    model: ModelConfig
    eod_id: int
    tokenizer: tuple[str, str | None] = ("SPMTokenizer", None)  # GPT-NeoX's tokenizer_type, merge_file
    not_implemented: list[str] = field(default_factory=list)
    trainer: str = "neox"  # whose config, checkpoint layout and exit rules: neox or megatron
    keep_last: int | None = None  # GPT-NeoX's keep_last_n_checkpoints
    phase_transitions: tuple[int, ...] = ()  # Megatron-LM: save and exit there
    save_signals: tuple[int, ...] = (signal.SIGTERM, signal.SIGUSR1)  # signals that save and exit
    # Megatron-LM: its OptimizerParamScheduler over the whole run, fresh; on a resume the checkpoint's values
    # must match, unless scheduler_from says whose win (override: these, checkpoint: the checkpoint's)
    megatron_schedule: MegatronSchedule | None = None
    scheduler_from: str | None = None
    vocab_divisible_by: int = 128  # make_vocab_size_divisible_by (Megatron-LM's checkpoint args name it)
    megatron_validation: MegatronValidation | None = None  # Megatron-LM's validation blend and position

    @property
    def end(self) -> int:
        """The global iteration the pack ends at."""
        return self.offset + self.train_iters
