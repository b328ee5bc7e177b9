"""A Hugging Face LLaMA ``config.json`` as GPT-NeoX's model keys (no torch: the train config reads it)."""

from __future__ import annotations

LLAMA_FIXED = {  # GPT-NeoX's keys for every LLaMA-shaped model
    "pos_emb": "rotary",
    "rotary_pct": 1.0,
    "norm": "rmsnorm",
    "activation": "swiglu",
    "mlp_multiple_of": 1,
    "use_bias_in_attn_linear": False,
    "use_bias_in_mlp": False,
    "use_bias_in_norms": False,
    "gpt_j_residual": False,
}


class UnsupportedModel(ValueError):
    """A Hugging Face config this mapping cannot carry over exactly; the message names the field."""


def rope_theta(config: dict) -> float:
    """``rope_theta`` (transformers 4) or ``rope_parameters.rope_theta`` (transformers 5); plain RoPE only."""
    params = config.get("rope_parameters") or {}
    scaling = config.get("rope_scaling") or (
        params if params.get("rope_type", "default") != "default" else None
    )
    if scaling:
        raise UnsupportedModel(f"rope scaling {scaling}: only plain rotary embeddings carry over")
    return float(params.get("rope_theta", config.get("rope_theta", 10000.0)))


def neox_model_keys(config: dict) -> dict:
    """GPT-NeoX's model keys for a Hugging Face LLaMA ``config.json``. ``intermediate_size`` is 3x
    Hugging Face's with ``mlp_multiple_of: 1``: GPT-NeoX's gated MLP takes 2/3 of it and halves that,
    which gives Hugging Face's size back exactly."""
    if config.get("model_type") != "llama":
        raise UnsupportedModel(f"model_type {config.get('model_type')!r}: LLaMA-shaped models are supported")
    for field in ("attention_bias", "mlp_bias"):
        if config.get(field):
            raise UnsupportedModel(f"{field}: true: GPT-NeoX's LLaMA layers have no biases")
    if config.get("hidden_act", "silu") != "silu":
        raise UnsupportedModel(f"hidden_act {config['hidden_act']!r}: SwiGLU (silu) is supported")
    hidden, heads = int(config["hidden_size"]), int(config["num_attention_heads"])
    head_dim = config.get("head_dim") or hidden // heads
    if head_dim * heads != hidden:
        raise UnsupportedModel(f"head_dim {head_dim} x {heads} heads != hidden_size {hidden}")
    theta = rope_theta(config)
    if theta != int(theta):
        raise UnsupportedModel(f"rope_theta {theta}: GPT-NeoX's rotary_emb_base is an integer")
    return LLAMA_FIXED | {
        "num_layers": int(config["num_hidden_layers"]),
        "hidden_size": hidden,
        "num_attention_heads": heads,
        "num_kv_heads": int(config.get("num_key_value_heads") or heads),
        "intermediate_size": 3 * int(config["intermediate_size"]),
        "rms_norm_epsilon": float(config.get("rms_norm_eps", 1e-6)),
        "rotary_emb_base": int(theta),
        "max_position_embeddings": int(config["max_position_embeddings"]),
        "no_weight_tying": not config.get("tie_word_embeddings", False),
    }


def neox_architecture(config: dict) -> str:
    """The Hugging Face architecture of a GPT-NeoX config's model, as the LUMI fork's converter names it
    (``tools/ckpts/convert_neox_to_hf.py --architecture``, which seed 000's ``pp_tester_single.py`` runs,
    default ``neox``): ``llama`` for LLaMA's layers (RMSNorm and SwiGLU, as LLAMA_FIXED sets them),
    ``neox`` for GPT-NeoX's (LayerNorm and an ungated MLP: GPT-NeoX's defaults)."""
    keys = {str(k).replace("-", "_"): v for k, v in config.items()}
    norm, activation = keys.get("norm", "layernorm"), keys.get("activation", "gelu")
    if (norm, activation) == (LLAMA_FIXED["norm"], LLAMA_FIXED["activation"]):
        return "llama"
    if norm == "layernorm" and activation != "swiglu":
        return "neox"
    raise UnsupportedModel(
        f"norm {norm!r} with activation {activation!r}: neither LLaMA's layers (rmsnorm, swiglu) nor "
        "GPT-NeoX's (layernorm, an ungated MLP), the two the fork's converter takes"
    )
