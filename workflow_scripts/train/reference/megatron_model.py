"""The model a Megatron-LM arguments file describes, read as its ``parse_args``, ``validate_args`` and
``core_transformer_config_from_args`` read it (the pinned Megatron-LM's defaults), as GPT-NeoX's keys for
the reference model, plus the exact ``--ffn-hidden-size`` (Megatron's meaning: ``linear_fc2``'s input, each
SwiGLU half; by default ``int(4h x 2/3 / 64) x 64`` with ``--swiglu``, else ``4h``).

Read: ``--normalization`` (LayerNorm, RMSNorm), ``--norm-epsilon`` (1e-5), ``--swiglu``,
``--ffn-hidden-size``, ``--position-embedding-type`` (learned_absolute, rope, none; the legacy
``--use-rotary-position-embeddings``), ``--rotary-base`` (10000), ``--rotary-percent`` (1.0),
``--group-query-attention`` with ``--num-query-groups`` (1), ``--disable-bias-linear``,
``--untie-embeddings-and-output-weights``, ``--init-method-std`` (0.02) and ``--ckpt-format`` (the reference
writes ``torch_dist``, Megatron-LM's default, only). A flag that makes Megatron-LM build another model
(``NOT_BUILT``), a position embedding or softmax the reference has not, and a ``--kv-channels`` other than
hidden / heads are refused with the reason: the reference would train another model than Megatron-LM, and
its checkpoints would not load there.
"""

from __future__ import annotations

from typing import Any

from workflow_scripts.train import lint
from workflow_scripts.train.reference.run_config import ConfigError

POSITIONS = {"learned_absolute": "learned", "rope": "rotary", "none": "none"}
NORMS = {"LayerNorm": "layernorm", "RMSNorm": "rmsnorm"}
NOT_BUILT = {  # dest -> what Megatron-LM builds with the flag, which the reference model has not
    "squared_relu": "a squared-ReLU MLP",
    "quick_geglu": "a quick-GeGLU MLP",
    "openai_gelu": "GELU's tanh approximation",
    "glu_linear_offset": "an offset gated unit",
    "activation_func_clamp_value": "a clamped activation",
    "qk_layernorm": "query and key norms",
    "qk_l2_norm": "query and key L2 norms",
    "qk_clip": "query-key clipping of the weights",
    "layernorm_zero_centered_gamma": "zero-centred norm weights (1 + gamma)",
    "apply_residual_connection_post_layernorm": "residuals taken after the norm",
    "rotary_interleaved": "interleaved rotary embeddings",
    "use_rope_scaling": "LLaMA 3's rotary scaling",
    "rotary_seq_len_interpolation_factor": "interpolated rotary positions",
    "no_rope_freq": "layers without rotary embeddings",
    "multi_latent_attention": "multi-latent attention",
    "experimental_attention_variant": "another attention",
    "attention_output_gate": "a gated attention output",
    "window_size": "sliding-window attention",
    "num_experts": "mixture-of-experts layers",
    "mtp_num_layers": "multi-token prediction layers",
    "hybrid_layer_pattern": "a hybrid model",
    "hybrid_override_pattern": "a hybrid model",
    "is_hybrid_model": "a hybrid model",
    "heterogeneous_layers_config_path": "heterogeneous layers",
    "spec": "its own layer spec",
    "mhc_num_residual_streams": "several residual streams",
    "mup_base_hidden_size": "muP's scaled forward",
    "mup_base_head_dim": "muP's scaled attention",
    "padded_vocab_size": "a vocabulary of the given size",
    "pad_vocab_size": "an unpadded vocabulary",
    "reset_attention_mask": "attention reset at each end of document",
    "reset_position_ids": "positions reset at each end of document",
}
MODEL_FLAGS = frozenset(
    {
        "normalization",
        "layernorm_epsilon",
        "swiglu",
        "ffn_hidden_size",
        "position_embedding_type",
        "use_rotary_position_embeddings",
        "add_position_embedding",
        "rotary_base",
        "rotary_percent",
        "group_query_attention",
        "num_query_groups",
        "add_bias_linear",
        "add_qkv_bias",
        "untie_embeddings_and_output_weights",
        "ckpt_format",
        "kv_channels",
        "softmax_type",
        *NOT_BUILT,
    }
)


def _refuse(path: str, dest: str, value: Any, why: str) -> ConfigError:
    shown = "" if value is True else f" {value}"
    return ConfigError(f"{path}: {lint.flag_of(dest)}{shown}: {why}")


def model_keys(path: str, given: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """GPT-NeoX's model keys for the flags ``given`` (dest -> value; a flag without a value: True), and
    Megatron-LM's ``ffn_hidden_size``."""
    for dest, what in NOT_BUILT.items():
        if dest in given:
            raise _refuse(
                path, dest, given[dest], f"Megatron-LM builds {what}; the reference trainer does not"
            )
    fmt = given.get("ckpt_format", "torch_dist")
    if fmt != "torch_dist":
        raise _refuse(
            path, "ckpt_format", fmt, "the reference trainer writes torch_dist (Megatron-LM's default) only"
        )
    if given.get("softmax_type", "vanilla") != "vanilla":
        raise _refuse(
            path, "softmax_type", given["softmax_type"], "the reference's attention has the vanilla softmax"
        )
    position = "rope" if "use_rotary_position_embeddings" in given else given.get("position_embedding_type")
    position = position or "learned_absolute"
    if position not in POSITIONS:
        built = ", ".join(POSITIONS)
        raise _refuse(path, "position_embedding_type", position, f"the reference trainer builds {built}")
    if "add_position_embedding" in given and position != "rope":  # validate_args raises so
        raise _refuse(path, "add_position_embedding", True, "deprecated, use --position-embedding-type")
    hidden, heads = given.get("hidden_size"), given.get("num_attention_heads")
    if not isinstance(hidden, int) or not isinstance(heads, int) or heads < 1:
        raise ConfigError(f"{path}: Megatron-LM needs --hidden-size and --num-attention-heads (integers)")
    channels = given.get("kv_channels")
    if channels is not None and channels != hidden // heads:
        raise _refuse(
            path, "kv_channels", channels, f"the reference's heads are hidden / heads ({hidden // heads})"
        )
    biases = "add_bias_linear" not in given  # --disable-bias-linear: store_false
    if "add_qkv_bias" in given and not biases:
        raise _refuse(
            path, "add_qkv_bias", True, "a bias on the fused QKV only: the reference's are all or none"
        )
    norm = NORMS.get(str(given.get("normalization", "LayerNorm")))
    if norm is None:
        raise _refuse(
            path, "normalization", given["normalization"], f"Megatron-LM builds {' or '.join(NORMS)}"
        )
    swiglu = "swiglu" in given
    ffn = given.get("ffn_hidden_size")
    if ffn is None:
        ffn = int((4 * hidden * 2 / 3) / 64) * 64 if swiglu else 4 * hidden
    if not isinstance(ffn, int) or ffn < 1:
        raise _refuse(path, "ffn_hidden_size", ffn, "the MLP's size must be a positive integer")
    keys: dict[str, Any] = {
        "norm": norm,
        "rms_norm_epsilon" if norm == "rmsnorm" else "layernorm_epsilon": float(
            given.get("layernorm_epsilon", 1e-5)
        ),
        "pos_emb": POSITIONS[position],
        "rotary_emb_base": given.get("rotary_base", 10000),
        "rotary_pct": float(given.get("rotary_percent", 1.0)),
        "activation": "swiglu" if swiglu else "gelu",
        "use_bias_in_attn_linear": biases,
        "use_bias_in_mlp": biases,
        "no_weight_tying": "untie_embeddings_and_output_weights" in given,
    }
    if "group_query_attention" in given:  # without it Megatron-LM ignores --num-query-groups
        keys["num_kv_heads"] = given.get("num_query_groups", 1)
    return keys, ffn
