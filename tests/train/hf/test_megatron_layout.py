"""The reference model's weights <-> Megatron names (train/hf/megatron_layout): exact round trips for the
GPT-2 and LLaMA shapes, and the fused QKV and SwiGLU layouts against hand-built Megatron tensors."""

from __future__ import annotations

import pytest
import torch

from workflow_scripts.train.hf import megatron_layout
from workflow_scripts.train.reference.model import GPT
from workflow_scripts.train.reference.run_config import ModelConfig

GPT2 = ModelConfig(vocab_size=128, num_layers=2, hidden_size=64, num_attention_heads=4, seq_length=16,
                   max_position_embeddings=16)  # fmt: skip
LLAMA = dict(norm="rmsnorm", pos_emb="rotary", activation="swiglu", intermediate_size=288, attn_bias=False)
LLAMA |= dict(mlp_bias=False, norm_bias=False, tied=False)


def llama(**changes) -> ModelConfig:
    return ModelConfig(**{**GPT2.__dict__, **LLAMA, **changes})


def state(cfg: ModelConfig) -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    model = GPT(cfg)
    with torch.no_grad():  # biases and norms away from their initial zeros and ones
        for p in model.parameters():
            if p.dim() == 1:
                p.uniform_(-1, 1)
    return model.state_dict()


CASES = {
    "gpt2": GPT2,
    "gpt2-untied": ModelConfig(**{**GPT2.__dict__, "tied": False}),
    "llama-gqa": llama(num_kv_heads=2),
    "llama-mha": llama(),
    "llama-tied": llama(num_kv_heads=1, tied=True),
}


@pytest.mark.parametrize("cfg", CASES.values(), ids=CASES.keys())
def test_reference_to_megatron_and_back_is_exact(cfg):
    ours = state(cfg)
    theirs = megatron_layout.to_megatron(ours, cfg)
    assert len(theirs) == len(ours)
    back = megatron_layout.from_megatron(theirs, cfg)
    assert back.keys() == ours.keys()
    assert all(torch.equal(back[k], ours[k]) for k in ours)


def test_the_names_are_megatron_cores_sharded_keys():
    names = set(megatron_layout.to_megatron(state(GPT2), GPT2))
    layer = {f"decoder.layers.1.{p}" for p in (
        "self_attention.linear_qkv.layer_norm_weight", "self_attention.linear_qkv.layer_norm_bias",
        "self_attention.linear_qkv.weight", "self_attention.linear_qkv.bias",
        "self_attention.linear_proj.weight", "self_attention.linear_proj.bias",
        "mlp.linear_fc1.layer_norm_weight", "mlp.linear_fc1.layer_norm_bias",
        "mlp.linear_fc1.weight", "mlp.linear_fc1.bias", "mlp.linear_fc2.weight", "mlp.linear_fc2.bias",
    )}  # fmt: skip
    outer = {"embedding.word_embeddings.weight", "embedding.position_embeddings.weight"}
    outer |= {"decoder.final_layernorm.weight", "decoder.final_layernorm.bias"}
    assert {n for n in names if not n.startswith("decoder.layers.")} == outer
    assert {n for n in names if n.startswith("decoder.layers.1.")} == layer
    untied = set(megatron_layout.to_megatron(state(llama()), llama()))
    assert "output_layer.weight" in untied and "decoder.final_layernorm.bias" not in untied


def test_grouped_qkv_is_megatrons_per_group_order():
    """4 heads in 2 query groups, head_dim 16: the reference's [q0 q1 q2 q3; k0 k1; v0 v1] is Megatron's
    [q0 q1 k0 v0; q2 q3 k1 v1] (row blocks of 16)."""
    cfg = llama(num_kv_heads=2)
    ours = state(cfg)
    rows = ours["sequential.2.attention.query_key_value.weight"].split(16)
    q, k, v = rows[:4], rows[4:6], rows[6:]
    expected = torch.cat([q[0], q[1], k[0], v[0], q[2], q[3], k[1], v[1]])
    theirs = megatron_layout.to_megatron(ours, cfg)
    assert torch.equal(theirs["decoder.layers.0.self_attention.linear_qkv.weight"], expected)


def test_without_gqa_per_head_qkv_is_kept():
    cfg = llama()
    ours = state(cfg)
    theirs = megatron_layout.to_megatron(ours, cfg)
    assert torch.equal(
        theirs["decoder.layers.1.self_attention.linear_qkv.weight"],
        ours["sequential.3.attention.query_key_value.weight"],
    )


def test_swiglu_fc1_is_gate_then_up():
    cfg = llama()
    ours = state(cfg)
    up, gate = ours["sequential.2.mlp.linear1.weight"].chunk(2)  # the reference: silu(gate) x up
    theirs = megatron_layout.to_megatron(ours, cfg)["decoder.layers.0.mlp.linear_fc1.weight"]
    assert torch.equal(theirs, torch.cat([gate, up]))
    gelu = megatron_layout.to_megatron(state(GPT2), GPT2)  # an ungated MLP is left as it is
    assert torch.equal(
        gelu["decoder.layers.0.mlp.linear_fc1.weight"], state(GPT2)["sequential.2.mlp.linear1.weight"]
    )


def test_names_without_a_place_are_refused():
    with pytest.raises(KeyError, match=r"sequential\.9\.mlp\.linear1\.weight: no Megatron name"):
        megatron_layout.to_megatron({"sequential.9.mlp.linear1.weight": torch.zeros(1)}, GPT2)
    with pytest.raises(KeyError, match=r"decoder\.layers\.0\.mlp\.router\.weight: no place"):
        megatron_layout.from_megatron({"decoder.layers.0.mlp.router.weight": torch.zeros(1)}, GPT2)
