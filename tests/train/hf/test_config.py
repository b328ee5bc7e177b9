"""A Hugging Face LLaMA config.json as GPT-NeoX's model keys (train/hf/config)."""

from __future__ import annotations

import pytest

from tests.utils import tiny_llama
from workflow_scripts.train.hf import config as hf_config


def test_the_models_keys_are_gpt_neox_s():
    keys = hf_config.neox_model_keys(tiny_llama().config.to_dict())
    assert keys["norm"] == "rmsnorm" and keys["pos_emb"] == "rotary" and keys["activation"] == "swiglu"
    assert keys["num_kv_heads"] == 2 and keys["no_weight_tying"] is True
    assert keys["intermediate_size"] == 3 * tiny_llama().config.intermediate_size  # 2/3 of it, halved


@pytest.mark.parametrize(
    "change, field",
    [
        ({"attention_bias": True}, "attention_bias"),
        ({"hidden_act": "gelu"}, "hidden_act"),
        ({"rope_scaling": {"rope_type": "linear", "factor": 2.0}}, "rope scaling"),
        ({"model_type": "mistral"}, "model_type"),
    ],
)
def test_a_config_that_cannot_carry_over_is_refused_naming_the_field(change, field):
    config = tiny_llama().config.to_dict() | change
    with pytest.raises(hf_config.UnsupportedModel, match=field):
        hf_config.neox_model_keys(config)
