"""The reference trainer's model against ``transformers``: on the same weights (mapped by train/hf/layout)
its logits equal LlamaForCausalLM's, with grouped-query attention or without, tied or untied."""

from __future__ import annotations

import pytest
import torch

from tests.utils import tiny_llama
from workflow_scripts.train.hf import config as hf_config
from workflow_scripts.train.hf import layout as hf_layout
from workflow_scripts.train.reference.config import model_config
from workflow_scripts.train.reference.model import GPT

PADDED = 128


def reference_of(hf_model) -> GPT:
    config = hf_model.config.to_dict()
    keys = hf_config.neox_model_keys(config) | {"attention_dropout": 0.0, "hidden_dropout": 0.0}
    gpt = GPT(model_config(keys, "test", PADDED, 32, keys["max_position_embeddings"])).eval()
    shape = hf_layout.shape_of(config, PADDED)
    state = hf_model.state_dict()
    gpt.load_state_dict(dict(hf_layout.to_neox(state.__getitem__, shape, 0)), strict=True)
    return gpt


@pytest.mark.parametrize(
    "config",
    [
        {"num_key_value_heads": 2},
        {"num_key_value_heads": 4},
        {"num_key_value_heads": 1, "tie_word_embeddings": True, "rope_theta": 500000.0},
    ],
    ids=["gqa-untied", "mha-untied", "mqa-tied"],
)
def test_logits_equal_transformers_llama(config):
    hf_model = tiny_llama(**config)
    gpt = reference_of(hf_model)
    tokens = torch.randint(0, 100, (2, 32), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = hf_model(tokens).logits
        got = gpt(tokens)[..., :100]
    assert torch.allclose(got, expected, atol=1e-5, rtol=1e-4), (got - expected).abs().max()
    assert not gpt(tokens)[..., 100:].any()  # GPT-NeoX's padding rows are zero


def test_state_dict_names_are_gpt_neox_sequential_ones():
    gpt = reference_of(tiny_llama())
    names = set(gpt.state_dict())
    assert "sequential.0.word_embeddings.weight" in names and "sequential.5.norm.scale" in names
    assert "sequential.6.final_linear.weight" in names and not any("bias" in n for n in names)
