"""Megatron-Bridge's own conversions, run on the CPU in its venv (tests/trainers.Bridge), one process per
rank with gloo: the anchor the compatibility tests compare our Megatron import and export with.

``python bridge.py to-megatron HF OUT --tp T --pp P``: ``AutoBridge.from_hf_pretrained(HF)``, its model
provider at T x P with its pre-wrap hook that loads the HF weights (``load_weights_hf_to_megatron``); each
rank's tensors to ``OUT/tp{t}_pp{p}.pt``: ``state``, the model's ``state_dict`` (its own names, the stage's
layers from 0, ``_extra_state`` left out), and ``sharded``, the ``ShardedTensor``s of Megatron-core's
``sharded_state_dict`` (factories applied; what a torch_dist checkpoint of the model holds), as
tests/train/hf/megatron_model dumps the pinned Megatron-LM's ranks (its ``assembled`` puts them together).
``--save CKPT``: the model also saved as a torch_dist folder by Megatron-core's ``dist_checkpointing.save``.

``python bridge.py to-hf HF CKPT OUT --tp T --pp P``: the provider's model at T x P, without weights, loads
the torch_dist folder CKPT with Megatron-core's ``dist_checkpointing.load`` (its ``sharded_state_dict``);
``AutoBridge.save_hf_weights`` writes its HF safetensors to OUT, and the provider's
``megatron_to_hf_config`` (the HF config Bridge makes of the Megatron model) goes to
``OUT/bridge_config.json``. HF gives the architecture (the bridge is made from its config and weights);
``--divisible-by N``: the vocabulary padded as Megatron-LM's ``--make-vocab-size-divisible-by N`` pads it
(the provider's ``should_pad_vocab``), for a checkpoint so padded.

Megatron-core is built as Bridge's provider builds it, with these changes for a CPU (none is in the
weights): the local transformer spec (``local_layer_spec``: no transformer-engine), fp32,
``use_cpu_initialization``, the fusions that need CUDA kernels off. Stand-ins, named:

- ``transformer_engine``: Bridge's LoRA modules (``megatron.bridge.peft.lora_layers`` and ``.lora``, which
  ``model_bridge`` imports) import it and subclass ``te.Linear`` at import. While those two modules are
  imported, and only then, a module of stand-in classes stands in for it; no Megatron-core module is
  imported meanwhile (checked), so Megatron-core sees no transformer-engine.
- ``torch.cuda.current_device``: Bridge's replicated mapping moves a weight to it before broadcasting it
  to the tensor-parallel ranks (``ReplicatedMapping.hf_to_megatron``); here it gives the CPU.
- ``torch.distributed.scatter``: Bridge's row-parallel mapping scatters ``torch.chunk(w, tp, dim=1)``, views
  that are not contiguous, and gloo sends each as its storage from its first element (seen here: every rank
  got the wrong columns of ``linear_proj`` and ``linear_fc2``); the stand-in scatters contiguous copies.
- Not a stand-in, a translation of the HF folder: Bridge 0.3.1 takes ``transformers`` < 5, which reads a
  config written by ``transformers`` 5 (``rope_parameters: {rope_theta: ...}``, no ``rope_theta``) with
  the default ``rope_theta`` 10000 (seen here: 500000 read as 10000). Such a folder is given to Bridge as a
  copy whose config also has the top-level ``rope_theta`` (``as_transformers_4``); its files are links.
- ``torch.Tensor.cuda`` returns the tensor: with tied embeddings and pipeline stages, Megatron-core moves
  the last stage's copy of the embedding to the GPU before it all-reduces it over the embedding group
  (``LanguageModule.setup_embeddings_and_output_layer``: ``weight.data.cuda()``).
- ``torch.cuda.synchronize``: Megatron-core's torch_dist writer waits for the device before it copies the
  tensors (``filesystem_async.preload_tensors``); here nothing runs on a device, so it does nothing.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.abc
import importlib.machinery
import json
import sys
import tempfile
import types
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

TE_IMPORTERS = {"megatron.bridge.peft.lora_layers", "megatron.bridge.peft.lora"}


def _stand_in_module(name: str) -> types.ModuleType:
    """A module whose every public name is a stand-in class (subclassable, never built here)."""
    module = types.ModuleType(name)
    module.__path__ = []
    made: dict[str, type] = {}

    def attribute(attr: str) -> type:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return made.setdefault(attr, type(attr, (torch.nn.Module,), {}))

    module.__getattr__ = attribute  # type: ignore[method-assign]
    return module


class _WithTransformerEngineStandIn(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds TE_IMPORTERS and executes each with the ``transformer_engine`` stand-in in sys.modules."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname not in TE_IMPORTERS:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        assert spec is not None and spec.loader is not None, fullname
        self.real = spec.loader
        spec.loader = self
        return spec

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None

    def exec_module(self, module: types.ModuleType) -> None:
        te = _stand_in_module("transformer_engine")
        te.pytorch = _stand_in_module("transformer_engine.pytorch")
        te.pytorch.ops = _stand_in_module("transformer_engine.pytorch.ops")
        stand_ins = {m.__name__: m for m in (te, te.pytorch, te.pytorch.ops)}
        before = set(sys.modules)
        sys.modules.update(stand_ins)
        try:
            self.real.exec_module(module)  # type: ignore[attr-defined]
        finally:
            for name in stand_ins:
                del sys.modules[name]
        core = sorted(m for m in set(sys.modules) - before if m.startswith("megatron.core"))
        assert not core, f"Megatron-core imported beside the transformer_engine stand-in: {core}"


def import_bridge() -> Any:
    """``megatron.bridge`` imported with the transformer-engine stand-in for its LoRA modules."""
    finder = _WithTransformerEngineStandIn()
    sys.meta_path.insert(0, finder)
    try:
        return importlib.import_module("megatron.bridge")
    finally:
        sys.meta_path.remove(finder)


def _cpu_device() -> torch.device:
    return torch.device("cpu")


def _stays(self: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
    return self


def _no_device_work(device: Any = None) -> None:
    return None


_scatter = dist.scatter


def _contiguous_scatter(tensor: torch.Tensor, scatter_list: list[torch.Tensor] | None = None, *args: Any,
                        **kwargs: Any) -> Any:  # fmt: skip
    parts = None if scatter_list is None else [t.contiguous() for t in scatter_list]
    return _scatter(tensor, parts, *args, **kwargs)


def build(
    bridge: Any, tp: int, pp: int, load_weights: bool, divisible_by: int | None = None
) -> tuple[Any, list[torch.nn.Module]]:
    """Bridge's provider for ``bridge`` at tp x pp on the CPU (see the module docstring) and its model."""
    from megatron.bridge.models.gpt_provider import local_layer_spec

    provider = bridge.to_megatron_provider(load_weights=load_weights)
    provider.tensor_model_parallel_size = tp
    provider.pipeline_model_parallel_size = pp
    provider.transformer_layer_spec = local_layer_spec
    provider.params_dtype = torch.float32
    provider.bf16 = provider.fp16 = False
    provider.gradient_accumulation_fusion = False
    provider.bias_activation_fusion = provider.masked_softmax_fusion = False
    provider.bias_dropout_fusion = provider.apply_rope_fusion = provider.persist_layer_norm = False
    if divisible_by:
        provider.should_pad_vocab, provider.make_vocab_size_divisible_by = True, divisible_by
    provider.finalize()
    model = provider.provide_distributed_model(
        wrap_with_ddp=False, use_cpu_initialization=True, mixed_precision_wrapper=None
    )
    return provider, model


def rank_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The rank's ``state_dict`` without ``_extra_state``."""
    return {k: v.detach().clone() for k, v in model.state_dict().items() if not k.endswith("_extra_state")}


def rank_shards(model: torch.nn.Module) -> list[dict[str, Any]]:
    """The rank's ``ShardedTensor``s (``_extra_state`` left out), as tests/train/hf/megatron_model's."""
    from megatron.core.dist_checkpointing.dict_utils import nested_values
    from megatron.core.dist_checkpointing.mapping import ShardedTensor, apply_factories

    sharded = model.sharded_state_dict()
    apply_factories(sharded)
    return [
        {"key": t.key, "global_shape": t.global_shape, "global_offset": t.global_offset,
         "prepend_axis_num": t.prepend_axis_num, "data": t.data.detach().clone()}
        for t in nested_values(sharded)
        if isinstance(t, ShardedTensor) and not t.key.endswith("_extra_state")
    ]  # fmt: skip


def to_megatron(hf: str, out: str, tp: int, pp: int, save: str | None) -> None:
    from megatron.core import dist_checkpointing, parallel_state

    bridge = import_bridge().AutoBridge.from_hf_pretrained(hf, torch_dtype=torch.float32)
    _, model = build(bridge, tp, pp, load_weights=True)
    t, p = parallel_state.get_tensor_model_parallel_rank(), parallel_state.get_pipeline_model_parallel_rank()
    dump = {"tp_rank": t, "pp_rank": p, "state": rank_state(model[0]), "sharded": rank_shards(model[0])}
    torch.save(dump, Path(out) / f"tp{t}_pp{p}.pt")
    if save:
        dist_checkpointing.save(model[0].sharded_state_dict(), save)


def to_hf(hf: str, ckpt: str, out: str, tp: int, pp: int, divisible_by: int | None) -> None:
    from megatron.core import dist_checkpointing

    bridge = import_bridge().AutoBridge.from_hf_pretrained(hf, torch_dtype=torch.float32)
    provider, model = build(bridge, tp, pp, load_weights=False, divisible_by=divisible_by)
    loaded = dist_checkpointing.load(model[0].sharded_state_dict(), ckpt)
    model[0].load_state_dict(loaded, strict=False)
    bridge.save_hf_weights(model, out, show_progress=False)
    if dist.get_rank() == 0:
        config = type(bridge._model_bridge).megatron_to_hf_config(provider)
        Path(out, "bridge_config.json").write_text(json.dumps(config, indent=1, sort_keys=True, default=str))


def as_transformers_4(hf: str, tmp: str) -> str:
    """``hf``, or a copy of it whose config also names ``rope_theta`` where only ``rope_parameters`` does."""
    config = json.loads(Path(hf, "config.json").read_text())
    theta = (config.get("rope_parameters") or {}).get("rope_theta")
    if theta is None or "rope_theta" in config:
        return hf
    copy = Path(tmp, "hf")
    copy.mkdir()
    for path in Path(hf).iterdir():
        (copy / path.name).symlink_to(path.resolve())
    (copy / "config.json").unlink()
    (copy / "config.json").write_text(json.dumps(config | {"rope_theta": theta}, indent=1))
    return str(copy)


def _rank(rank: int, world: int, store: str, args: argparse.Namespace) -> None:
    from megatron.core import parallel_state

    torch.cuda.current_device = _cpu_device  # stand-ins (module docstring)
    torch.cuda.synchronize = _no_device_work
    dist.scatter = _contiguous_scatter
    torch.Tensor.cuda = _stays  # type: ignore[method-assign]
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    parallel_state.initialize_model_parallel(args.tp, args.pp)
    try:
        if args.command == "to-megatron":
            to_megatron(args.hf, args.out, args.tp, args.pp, args.save)
        else:
            to_hf(args.hf, args.ckpt, args.out, args.tp, args.pp, args.divisible_by)
        dist.barrier()
    finally:
        dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["to-megatron", "to-hf"])
    parser.add_argument("hf")
    parser.add_argument("paths", nargs="+", help="to-megatron: OUT; to-hf: CKPT OUT")
    parser.add_argument("--tp", type=int, default=1)
    parser.add_argument("--pp", type=int, default=1)
    parser.add_argument("--save", help="to-megatron: also save the model as a torch_dist folder")
    parser.add_argument("--divisible-by", type=int, help="to-hf: the checkpoint's vocabulary padding")
    args = parser.parse_args()
    if args.command == "to-megatron":
        (args.out,) = args.paths
    else:
        args.ckpt, args.out = args.paths
    Path(args.out).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        args.hf = as_transformers_4(args.hf, tmp)
        world = args.tp * args.pp
        mp.spawn(_rank, args=(world, str(Path(tmp) / "store"), args), nprocs=world, join=True)


if __name__ == "__main__":
    main()
