"""Megatron-LM's ``torch_dist`` checkpoint folders (``iter_NNNNNNN``), written and read with
``torch.distributed.checkpoint`` (DCP) alone: the workflow's environment has no Megatron.

Why ``torch_dist`` (the pinned Megatron-LM, megatron-core 0.20; read in its code, checked by
tests/train/hf/test_megatron_checkpoint_compat.py):

- it is Megatron-LM's default ``--ckpt-format`` (``CheckpointConfig.ckpt_format = "torch_dist"`` in
  megatron/training/config/training_config.py), and the format Megatron-Bridge saves through Megatron's
  own ``dist_checkpointing``;
- its keys are the model's sharded keys, the same for the transformer-engine and the local layer spec (the
  local spec's ``sharded_state_dict_keys_map`` renames ``input_layernorm.`` / ``pre_mlp_layernorm.`` to
  the fused modules' ``self_attention.linear_qkv.layer_norm_`` / ``mlp.linear_fc1.layer_norm_``), so a
  folder written on a CPU loads in a GPU run; the legacy ``torch`` format stores each module's
  ``state_dict`` names, which differ between the two specs;
- it is resharded on load (``TorchDistLoadShardedStrategy``: each rank reads its slice of the global
  tensors), so one folder loads at any tensor and pipeline parallel size; only the global shapes are
  checked (``MCoreLoadPlanner._validate_global_shapes``), and of those only the padded vocabulary
  (``make_vocab_size_divisible_by`` x TP) depends on the parallel sizes.

What a folder holds, as the pinned Megatron-LM's ``save_checkpoint`` writes it:

- ``metadata.json``, ``{"sharded_backend": "torch_dist", ...}``: without it ``_get_checkpoint_format``
  does not take the folder for ``torch_dist``; megatron-core 0.16 (Megatron-Bridge's) also reads
  ``common_backend``, which ours names (the pinned one ignores it);
- DCP's ``.metadata`` and ``__0_0.distcp``: each tensor at its global shape, the layers' tensors stacked
  (``decoder.layers.<rest>``, the layer a prepended axis: ``TransformerBlock.sharded_state_dict`` gives
  homogeneous layers the offset ``(0, layer, num_layers)``), and an ``_extra_state`` object for every
  module that has one in Transformer Engine's layer spec (``EXTRA_STATE``): each layer's linears
  (``decoder.layers.<linear>._extra_state/shard_{layer}_{num_layers}``; the local spec's linears ask for
  them too) and the final norm (``decoder.final_layernorm._extra_state/shard_0_1``: with TE importable it
  is ``TENorm`` under the local spec too, transformer_block.py's ``LayerNormImpl``). Megatron asks for
  every key its model's ``sharded_state_dict`` names, and its default strictness
  (``assume_ok_unexpected``) leaves a missing one to fail DCP's read ("Missing key in checkpoint
  state_dict: decoder.final_layernorm._extra_state/shard_0_1"), while a key the model lacks (a local
  spec's final norm: torch's or apex's, no extra state) is ignored. Each holds what Megatron's torch_dist
  stores for a ``ShardedObject`` (a list of its data) of what TE 2.x's modules save without fp8, an empty
  uint8 tensor (``TransformerEngineBaseModule.get_extra_state``), which TE's ``set_extra_state`` (the
  modules' and the fusible ops' norms') takes as no fp8 state; the local spec's linears ignore it.
  tests/train/hf/test_megatron_checkpoint_compat.py proves the key set against the pinned tree's TE spec
  (TE's modules stood in: TE does not run on a CPU);
- the common (non-tensor) state: ``common.pt`` here, which both the pinned megatron-core (first, when the
  file is there) and 0.16 read; the pinned one saves it in DCP as ``common_state/shard_0_1`` instead,
  which ``load_common`` reads too.

``load_checkpoint`` takes from the common state ``iteration`` (unless ``--finetune``), ``checkpoint_version``
(below 2.0 it permutes legacy QKV weights) and ``args``: the saved tensor/pipeline sizes (1 when missing),
``no_save_optim`` / ``no_save_rng`` (set: the sharded load asks for neither; a run with an optimizer
still needs ``--finetune`` or ``--no-load-optim``: its later
``optimizer.load_state_dict(state_dict['optimizer'])`` fails otherwise) and, without ``--finetune``, what
``check_checkpoint_args`` compares (``num_layers``, ``hidden_size``, ``num_attention_heads``, ...).
``import_common`` gives that for a model-only folder.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import re
import shutil
import warnings
from argparse import Namespace
from collections.abc import Mapping
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import FileSystemReader, FileSystemWriter
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner, DefaultSavePlanner
from torch.distributed.checkpoint.metadata import BytesStorageMetadata, TensorStorageMetadata

from workflow_scripts.train.reference.run_config import ModelConfig

Tensor = torch.Tensor

CHECKPOINT_VERSION = 3.0  # what the pinned generate_state_dict writes
METADATA = {
    "sharded_backend": "torch_dist",
    "sharded_backend_version": 1,
    "common_backend": "torch",
    "common_backend_version": 1,
}
COMMON_FILE = "common.pt"
COMMON_STATE = "common_state/shard_0_1"  # the pinned megatron-core's ShardedObject("common_state").unique_key
MODEL_PREFIXES = ("embedding.", "decoder.", "output_layer.")  # GPTModel's sharded keys
LAYER = re.compile(r"decoder\.layers\.(\d+)\.(.+)")
EXTRA_STATE = "._extra_state"  # a module's extra state (TE's fp8 metadata), a ShardedObject: never a weight
OUTER_TE_MODULES = ("decoder.final_layernorm",)  # TE's modules outside the layers (output_layer's is dropped)


def te_extra_state() -> list[Tensor]:
    """An ``_extra_state`` object's stored value: Megatron's list of the object's data, TE 2.x's "no fp8"."""
    return [torch.empty(0, dtype=torch.uint8)]


def _dcp(call: Any, state: dict[str, Any], **kwargs: Any) -> None:
    """``dcp.save`` or ``dcp.load`` in this process alone (without its warning that it is)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "torch.distributed is disabled", UserWarning)
        call(state, no_dist=True, **kwargs)


def _stacked(weights: Mapping[str, Tensor]) -> dict[str, Any]:
    """DCP's state dict: the layers' tensors stacked on a first axis, the TE modules' ``_extra_state``."""
    layers: dict[str, dict[int, Tensor]] = {}
    state: dict[str, Any] = {}
    for name, t in weights.items():
        m = LAYER.fullmatch(name)
        if m:
            layers.setdefault(m[2], {})[int(m[1])] = t
        else:
            state[name] = t.detach().contiguous()
    n = 1 + max((i for per in layers.values() for i in per), default=-1)
    for rest, per in layers.items():
        if sorted(per) != list(range(n)):
            raise ValueError(f"decoder.layers.*.{rest}: layers {sorted(per)}, not 0..{n - 1}")
        state[f"decoder.layers.{rest}"] = torch.stack([per[i].detach() for i in range(n)])
    linears = {r.rsplit(".", 1)[0] for r in layers if r.endswith(".weight") and "layer_norm" not in r}
    for linear in sorted(linears):
        for i in range(n):
            state[f"decoder.layers.{linear}{EXTRA_STATE}/shard_{i}_{n}"] = te_extra_state()
    for module in OUTER_TE_MODULES:
        if f"{module}.weight" in weights:
            state[f"{module}{EXTRA_STATE}/shard_0_1"] = te_extra_state()
    return state


def save(folder: str, weights: Mapping[str, Tensor], common: dict[str, Any]) -> None:
    """Write ``weights`` (Megatron names, one entry a layer) and ``common`` as a ``torch_dist`` folder,
    under a temporary name renamed into place (an existing ``folder`` is replaced)."""
    tmp = f"{folder}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    state = _stacked(weights)
    _dcp(
        dcp.save,
        state,
        storage_writer=FileSystemWriter(tmp),
        planner=DefaultSavePlanner(flatten_state_dict=False),
    )
    torch.save(common, os.path.join(tmp, COMMON_FILE))
    with open(os.path.join(tmp, "metadata.json"), "w", encoding="utf-8") as f:
        json.dump(METADATA, f)
    shutil.rmtree(folder, ignore_errors=True)
    os.replace(tmp, folder)


class _RawBytes(DefaultLoadPlanner):
    """Keeps a stored object's bytes as they are (a Megatron object may need Megatron to unpickle)."""

    def __init__(self) -> None:
        super().__init__(flatten_state_dict=False)
        self.raw: dict[str, bytes] = {}

    def load_bytes(self, read_item: Any, value: io.BytesIO) -> None:
        self.raw[read_item.dest_index.fqn] = value.getvalue()


def _check(folder: str) -> None:
    if not os.path.isfile(os.path.join(folder, "metadata.json")):
        raise FileNotFoundError(f"{folder}: no metadata.json: not a torch_dist checkpoint")


def load_weights(folder: str) -> dict[str, Tensor]:
    """The model's tensors of a ``torch_dist`` folder under Megatron names, one entry a layer, whoever
    wrote it (optimizer, ``_extra_state`` and other state left out)."""
    _check(folder)
    reader = FileSystemReader(folder)
    metadata = reader.read_metadata().state_dict_metadata
    state = {
        k: torch.empty(m.size, dtype=m.properties.dtype)
        for k, m in metadata.items()
        if isinstance(m, TensorStorageMetadata) and k.startswith(MODEL_PREFIXES) and EXTRA_STATE not in k
    }
    _dcp(dcp.load, state, storage_reader=reader, planner=DefaultLoadPlanner(flatten_state_dict=False))
    out: dict[str, Tensor] = {}
    for name, t in state.items():
        rest = name.removeprefix("decoder.layers.")
        if rest == name or rest.split(".", 1)[0].isdigit():  # outside the layers, or saved a layer a key
            out[name] = t
        else:
            out |= {f"decoder.layers.{i}.{rest}": layer.clone() for i, layer in enumerate(t.unbind(0))}
    return out


class _Stand(Namespace):
    """An object of a class this environment cannot import (Megatron's enums in ``args``): its arguments."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(args=args, **kwargs)

    def __setstate__(self, state: Any) -> None:
        self.state = state


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        try:
            return super().find_class(module, name)
        except (ImportError, AttributeError):
            return _Stand


class _PickleModule:
    Unpickler = _Unpickler
    load = staticmethod(pickle.load)


def _unpickle(data: bytes | str) -> Any:
    return torch.load(data, map_location="cpu", weights_only=False, pickle_module=_PickleModule)


def load_common(folder: str) -> dict[str, Any]:
    """The folder's common state (``args``, ``iteration``, ``checkpoint_version``...): ``common.pt``, or
    the pinned megatron-core's ``common_state`` object; classes this environment lacks come back as plain
    namespaces of their arguments."""
    _check(folder)
    path = os.path.join(folder, COMMON_FILE)
    if os.path.isfile(path):
        return _unpickle(path)
    state: dict[str, Any] = {COMMON_STATE: None}
    reader = FileSystemReader(folder)
    if not isinstance(reader.read_metadata().state_dict_metadata.get(COMMON_STATE), BytesStorageMetadata):
        raise FileNotFoundError(f"{folder}: neither {COMMON_FILE} nor a {COMMON_STATE} object")
    planner = _RawBytes()
    _dcp(dcp.load, state, storage_reader=reader, planner=planner)
    return _unpickle(io.BytesIO(planner.raw[COMMON_STATE]))[0]


def import_common(cfg: ModelConfig, **args: Any) -> dict[str, Any]:
    """The common state of a model-only folder (an import, a fine-tune's start): iteration 0, Megatron's
    checkpoint version, and ``args`` with the model's shape as ``check_checkpoint_args`` compares it,
    saved at TP 1 / PP 1 without optimizer or RNG state; ``args``: more (or other) Megatron arguments
    (without ``--finetune`` a run with ``--vocab-file`` also compares ``make_vocab_size_divisible_by`` and
    ``tokenizer_type``, and fails on a folder without them)."""
    shape = {
        "num_layers": cfg.num_layers,
        "hidden_size": cfg.hidden_size,
        "num_attention_heads": cfg.num_attention_heads,
        "num_query_groups": cfg.kv_heads,
        "group_query_attention": cfg.kv_heads != cfg.num_attention_heads,
        "ffn_hidden_size": cfg.ffn_in_size,
        "max_position_embeddings": cfg.max_position_embeddings,
        "padded_vocab_size": cfg.vocab_size,
        "untie_embeddings_and_output_weights": not cfg.tied,
    }
    saved = {"tensor_model_parallel_size": 1, "pipeline_model_parallel_size": 1, "ckpt_format": "torch_dist"}
    saved |= {"no_save_optim": True, "no_save_rng": True, "iteration": 0, "consumed_train_samples": 0}
    return {
        "args": Namespace(**(shape | saved | args)),
        "checkpoint_version": CHECKPOINT_VERSION,
        "iteration": 0,
    }
