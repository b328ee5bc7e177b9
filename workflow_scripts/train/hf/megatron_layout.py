"""The reference model's weights <-> Megatron-core's ``GPTModel`` names ("Megatron names"), tensor by tensor.

The reference model (train/reference/model) is named as GPT-NeoX's sequential model on one tensor-parallel
rank; Megatron names are the sharded keys of Megatron-core's checkpoints, one entry a layer in memory
(``decoder.layers.{i}.<rest>``, whole tensors: a ``torch_dist`` checkpoint is not split by tensor
parallelism; train/megatron_checkpoint stacks the layers on disk). Both hold the padded vocabulary.

Outside the layers: ``sequential.0.word_embeddings`` / ``position_embeddings`` (learned) are
``embedding.word_embeddings`` / ``position_embeddings``, ``sequential.{N + 3}.norm`` is
``decoder.final_layernorm`` and ``sequential.{N + 4}.final_linear`` (untied) ``output_layer``. In layer ``i``
(``sequential.{i + 2}``): ``attention.query_key_value`` / ``attention.dense`` / ``mlp.linear1`` /
``mlp.linear2`` are ``self_attention.linear_qkv`` / ``self_attention.linear_proj`` / ``mlp.linear_fc1`` /
``mlp.linear_fc2`` (weight and bias), and the norms are the sharded keys of the linear they precede:
``input_layernorm`` is ``self_attention.linear_qkv.layer_norm_weight`` / ``_bias`` and
``post_attention_layernorm`` ``mlp.linear_fc1.layer_norm_weight`` / ``_bias`` (RMSNorm's weight is the
reference's ``scale``).

Two tensors are reordered. Megatron's fused QKV is grouped by query group (``SelfAttention``'s
``get_query_key_value_tensors``: for each group, its query heads, then its key, then its value); the
reference's is per head ``[q; k; v]`` without grouped-query attention (the same order: every head its own
group) and ``[all q; all k; all v]`` with it. Megatron's SwiGLU ``linear_fc1`` is ``[gate; up]`` (it
computes ``silu(first half) x second half``), the reference's ``[up; gate]``. Both use rotate-half rotary
embeddings, so q and k are not permuted.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from workflow_scripts.train.reference.run_config import ModelConfig

Tensor = torch.Tensor

LINEARS = {  # the reference's modules in a layer -> Megatron's
    "attention.query_key_value": "self_attention.linear_qkv",
    "attention.dense": "self_attention.linear_proj",
    "mlp.linear1": "mlp.linear_fc1",
    "mlp.linear2": "mlp.linear_fc2",
}
NORMS = {  # the layer's norms -> the prefix of Megatron's sharded keys (the linear they precede)
    "input_layernorm": "self_attention.linear_qkv.layer_norm_",
    "post_attention_layernorm": "mlp.linear_fc1.layer_norm_",
}


def layer_names(cfg: ModelConfig) -> dict[str, str]:
    """A layer's reference names -> Megatron's ``<rest>`` (RMSNorm's weight is the reference's ``scale``)."""
    weight = "scale" if cfg.norm == "rmsnorm" else "weight"
    names = {f"{ours}.{p}": f"{theirs}.{p}" for ours, theirs in LINEARS.items() for p in ("weight", "bias")}
    for ours, theirs in NORMS.items():
        names |= {f"{ours}.{weight}": f"{theirs}weight", f"{ours}.bias": f"{theirs}bias"}
    return names


def outer_names(cfg: ModelConfig) -> dict[str, str]:
    """The reference's names outside the layers -> Megatron's."""
    n, weight = cfg.num_layers, "scale" if cfg.norm == "rmsnorm" else "weight"
    return {
        "sequential.0.word_embeddings.weight": "embedding.word_embeddings.weight",
        "sequential.0.position_embeddings.weight": "embedding.position_embeddings.weight",
        f"sequential.{n + 3}.norm.{weight}": "decoder.final_layernorm.weight",
        f"sequential.{n + 3}.norm.bias": "decoder.final_layernorm.bias",
        f"sequential.{n + 4}.final_linear.weight": "output_layer.weight",
    }


def _qkv_to_megatron(t: Tensor, cfg: ModelConfig) -> Tensor:
    heads, groups, d = cfg.num_attention_heads, cfg.kv_heads, cfg.hidden_size // cfg.num_attention_heads
    if groups == heads:  # per head [q; k; v]: already Megatron's groups
        return t.clone()
    rest = t.shape[1:]
    q, k, v = t.split([heads * d, groups * d, groups * d])
    q = q.reshape(groups, heads // groups * d, *rest)
    k, v = k.reshape(groups, d, *rest), v.reshape(groups, d, *rest)
    return torch.cat([q, k, v], dim=1).reshape(t.shape)


def _qkv_from_megatron(t: Tensor, cfg: ModelConfig) -> Tensor:
    heads, groups, d = cfg.num_attention_heads, cfg.kv_heads, cfg.hidden_size // cfg.num_attention_heads
    if groups == heads:
        return t.clone()
    rest, per = t.shape[1:], heads // groups
    q, k, v = t.reshape(groups, (per + 2) * d, *rest).split([per * d, d, d], dim=1)
    return torch.cat([x.reshape(-1, *rest) for x in (q, k, v)])


def _swap_halves(t: Tensor, cfg: ModelConfig) -> Tensor:
    """SwiGLU's ``linear_fc1``: [up; gate] <-> [gate; up] (the same swap both ways)."""
    if cfg.activation != "swiglu":
        return t.clone()
    first, second = t.chunk(2)
    return torch.cat([second, first])


def _reorder(rest: str, t: Tensor, cfg: ModelConfig, to: bool) -> Tensor:
    """A layer tensor under Megatron's ``<rest>``, reordered towards Megatron (``to``) or back."""
    if rest.startswith("self_attention.linear_qkv.") and "layer_norm" not in rest:
        return (_qkv_to_megatron if to else _qkv_from_megatron)(t, cfg)
    if rest.startswith("mlp.linear_fc1.") and "layer_norm" not in rest:
        return _swap_halves(t, cfg)
    return t.clone()


def to_megatron(weights: Mapping[str, Tensor], cfg: ModelConfig) -> dict[str, Tensor]:
    """Megatron names of the reference model's ``weights`` (its state dict); a name that has none raises
    ``KeyError``."""
    layer, outer = layer_names(cfg), outer_names(cfg)
    out: dict[str, Tensor] = {}
    for name, t in weights.items():
        if name in outer:
            out[outer[name]] = t.clone()
            continue
        _, index, rest = name.split(".", 2)
        i = int(index) - 2
        if rest not in layer or not 0 <= i < cfg.num_layers:
            raise KeyError(f"{name}: no Megatron name for it (a model of {cfg.num_layers} layers)")
        out[f"decoder.layers.{i}.{layer[rest]}"] = _reorder(layer[rest], t, cfg, to=True)
    return out


def from_megatron(weights: Mapping[str, Tensor], cfg: ModelConfig) -> dict[str, Tensor]:
    """The reference model's state dict from Megatron names (``to_megatron``'s inverse); a Megatron name
    the reference model has no place for raises ``KeyError``."""
    layer = {v: k for k, v in layer_names(cfg).items()}
    outer = {v: k for k, v in outer_names(cfg).items()}
    out: dict[str, Tensor] = {}
    for name, t in weights.items():
        if name in outer:
            out[outer[name]] = t.clone()
            continue
        index, _, rest = name.removeprefix("decoder.layers.").partition(".")
        if (
            not name.startswith("decoder.layers.")
            or rest not in layer
            or not 0 <= int(index) < cfg.num_layers
        ):
            raise KeyError(f"{name}: no place for it in the reference model ({cfg.num_layers} layers)")
        out[f"sequential.{int(index) + 2}.{layer[rest]}"] = _reorder(rest, t, cfg, to=False)
    return out
