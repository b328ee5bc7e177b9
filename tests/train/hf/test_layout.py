"""Hugging Face LLaMA weights <-> GPT-NeoX's (train/hf/layout): exact round trips at every tensor
parallel size, the layout GPT-NeoX's attention reads, and configs that cannot carry over refused."""

from __future__ import annotations

import pytest
import torch

from tests.utils import tiny_llama
from workflow_scripts.train.hf import layout as hf_layout


def neox_ranks(hf: dict[str, torch.Tensor], shape: hf_layout.Shape) -> list[dict[str, torch.Tensor]]:
    return [dict(hf_layout.to_neox(hf.__getitem__, shape, r)) for r in range(shape.tp)]


def back_to_hf(ranks: list[dict[str, torch.Tensor]], shape: hf_layout.Shape) -> dict[str, torch.Tensor]:
    return dict(hf_layout.to_hf(lambda r, name: ranks[r][name], shape))


@pytest.mark.parametrize("heads", [{"num_key_value_heads": 2}, {"num_key_value_heads": 4}])
@pytest.mark.parametrize("tied", [False, True])
def test_hf_to_neox_to_hf_is_exact_at_tp_1_and_2(heads, tied):
    model = tiny_llama(tie_word_embeddings=tied, **heads)
    hf = model.state_dict()
    config = model.config.to_dict()
    for tp in (1, 2):
        shape = hf_layout.shape_of(config, padded_vocab_size=128, tp=tp)
        ranks = neox_ranks(hf, shape)
        rows = ranks[0]["sequential.0.word_embeddings.weight"].shape[0]
        assert rows == 128 // tp  # padded to GPT-NeoX's vocabulary, then split
        back = back_to_hf(ranks, shape)
        expected = {k: v for k, v in hf.items() if not (tied and k == "lm_head.weight")}
        assert back.keys() == expected.keys()
        for name, tensor in expected.items():
            assert torch.equal(back[name], tensor), (tp, name)


def test_tp_1_to_2_to_1_gives_the_same_tensors():
    model = tiny_llama()
    config = model.config.to_dict()
    one, two = (hf_layout.shape_of(config, 128, tp) for tp in (1, 2))
    first = neox_ranks(model.state_dict(), one)
    split = neox_ranks(back_to_hf(first, one), two)
    again = neox_ranks(back_to_hf(split, two), one)
    assert first[0].keys() == again[0].keys()
    assert all(torch.equal(first[0][k], again[0][k]) for k in first[0])


def test_query_key_value_is_laid_out_as_gpt_neox_reads_it():
    """Without GQA GPT-NeoX views a rank's fused weight as [heads, 3 x head_dim]: per head [q; k; v]; with
    GQA as [all q; all k; all v] of the rank's heads."""
    d = 16
    for kv, per_head in ((4, True), (2, False)):
        model = tiny_llama(num_key_value_heads=kv)
        shape = hf_layout.shape_of(model.config.to_dict(), 128, tp=2)
        hf = model.state_dict()
        q, k = hf["model.layers.0.self_attn.q_proj.weight"], hf["model.layers.0.self_attn.k_proj.weight"]
        rank1 = dict(hf_layout.to_neox(hf.__getitem__, shape, 1))
        rank1 = rank1["sequential.2.attention.query_key_value.weight"]
        if per_head:  # rank 1 holds heads 2 and 3; its second head's key rows
            assert torch.equal(rank1.view(2, 3 * d, -1)[1, d : 2 * d], k[3 * d : 4 * d])
        else:  # rank 1 holds q heads 2, 3 and kv head 1
            assert torch.equal(rank1[: 2 * d], q[2 * d : 4 * d]) and torch.equal(rank1[2 * d : 3 * d], k[d:])


def test_a_tensor_parallel_size_the_heads_do_not_divide_is_refused():
    config = tiny_llama().config.to_dict()
    with pytest.raises(ValueError, match="num_kv_heads 2 is not divisible by the tensor parallel size 4"):
        list(hf_layout.to_neox(tiny_llama().state_dict().__getitem__, hf_layout.shape_of(config, 128, 4), 0))
