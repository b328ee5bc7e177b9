"""train/megatron_checkpoint without Megatron: what ``save`` writes and ``load_weights`` / ``load_common``
read back (tests/train/hf/test_megatron_checkpoint_compat.py runs the same folders through Megatron-LM)."""

from __future__ import annotations

import json

import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import FileSystemReader, FileSystemWriter

from workflow_scripts.train import megatron_checkpoint
from workflow_scripts.train.hf import megatron_layout
from workflow_scripts.train.reference.model import GPT
from workflow_scripts.train.reference.run_config import ModelConfig

LLAMA = dict(
    norm="rmsnorm", pos_emb="rotary", activation="swiglu", attn_bias=False, mlp_bias=False, tied=False
)
CFG = ModelConfig(vocab_size=128, num_layers=3, hidden_size=32, num_attention_heads=4, seq_length=8,
                  max_position_embeddings=8, intermediate_size=96, num_kv_heads=2, **LLAMA)  # fmt: skip


def weights() -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    return megatron_layout.to_megatron(GPT(CFG).state_dict(), CFG)


def test_save_stacks_the_layers_and_load_weights_gives_them_back(tmp_path):
    folder = tmp_path / "iter_0000000"
    ours = weights()
    megatron_checkpoint.save(str(folder), ours, megatron_checkpoint.import_common(CFG))
    assert sorted(p.name for p in folder.iterdir()) == [
        ".metadata",
        "__0_0.distcp",
        "common.pt",
        "metadata.json",
    ]
    assert json.loads((folder / "metadata.json").read_text())["sharded_backend"] == "torch_dist"
    stored = FileSystemReader(str(folder)).read_metadata().state_dict_metadata
    assert stored["decoder.layers.self_attention.linear_qkv.weight"].size == (
        3,
        64,
        32,
    )  # [layers, (4+2+2)x8, h]
    extra = {k for k in stored if "_extra_state" in k}
    assert extra == {
        f"decoder.layers.{m}._extra_state/shard_{i}_3"
        for m in (
            "self_attention.linear_qkv",
            "self_attention.linear_proj",
            "mlp.linear_fc1",
            "mlp.linear_fc2",
        )
        for i in range(3)
    } | {"decoder.final_layernorm._extra_state/shard_0_1"}  # TENorm's, with TE importable
    # each as Megatron's torch_dist stores a ShardedObject (a list of its data): TE 2.x's "no fp8" state
    state = {k: None for k in extra}
    megatron_checkpoint._dcp(dcp.load, state, storage_reader=FileSystemReader(str(folder)))
    assert all(
        isinstance(v, list) and len(v) == 1 and v[0].dtype == torch.uint8 and v[0].numel() == 0
        for v in state.values()
    ), state
    back = megatron_checkpoint.load_weights(str(folder))
    assert back.keys() == ours.keys() and all(torch.equal(back[k], ours[k]) for k in ours)
    common = megatron_checkpoint.load_common(str(folder))
    assert common["iteration"] == 0 and common["checkpoint_version"] == 3.0
    args = common["args"]
    assert (args.num_layers, args.num_query_groups, args.ffn_hidden_size, args.padded_vocab_size) == (
        3,
        2,
        32,
        128,
    )
    assert args.no_save_optim and args.no_save_rng and not (tmp_path / "iter_0000000.tmp").exists()


def test_a_layer_missing_from_the_weights_is_refused(tmp_path):
    ours = weights()
    del ours["decoder.layers.1.mlp.linear_fc2.weight"]
    with pytest.raises(ValueError, match=r"decoder\.layers\.\*\.mlp\.linear_fc2\.weight: layers \[0, 2\]"):
        megatron_checkpoint.save(str(tmp_path / "iter_0000000"), ours, {})


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_layers_saved_one_key_each_are_read_too(tmp_path):
    """Megatron-core saves non-homogeneous layers under their own keys (decoder.layers.{i}.<rest>)."""
    ours = weights()
    dcp.save(ours, storage_writer=FileSystemWriter(str(tmp_path)), no_dist=True)
    (tmp_path / "metadata.json").write_text(json.dumps(megatron_checkpoint.METADATA))
    back = megatron_checkpoint.load_weights(str(tmp_path))
    assert back.keys() == ours.keys() and all(torch.equal(back[k], ours[k]) for k in ours)


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_load_weights_leaves_out_extra_states_stored_as_tensors(tmp_path):
    """hf-export reads a checkpoint's weights with load_weights: an ``_extra_state`` is never one, even where
    a writer stored it as a tensor (Megatron stores a list, read as bytes)."""
    ours = weights()
    extra = {
        "decoder.final_layernorm._extra_state/shard_0_1": torch.empty(0, dtype=torch.uint8),
        "decoder.layers.mlp.linear_fc1._extra_state/shard_0_3": torch.ones(4, dtype=torch.uint8),
    }
    dcp.save(ours | extra, storage_writer=FileSystemWriter(str(tmp_path)), no_dist=True)
    (tmp_path / "metadata.json").write_text(json.dumps(megatron_checkpoint.METADATA))
    back = megatron_checkpoint.load_weights(str(tmp_path))
    assert back.keys() == ours.keys()


def test_a_folder_without_metadata_json_is_not_torch_dist(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"no metadata\.json: not a torch_dist checkpoint"):
        megatron_checkpoint.load_weights(str(tmp_path))
