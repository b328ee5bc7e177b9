"""Stand-ins for Transformer Engine, imported first by tests/train/hf/megatron_model's ranks when a test
asks for the TE layer spec (``--transformer-impl transformer_engine``): TE runs on CUDA only and cannot be
installed here, and without it Megatron-LM's TE wrappers (megatron/core/extensions/transformer_engine.py)
are mocks. Never imported by the test process itself (it puts a finder on ``sys.meta_path``).

With these, the pinned Megatron-LM's own code runs as with TE installed: ``HAVE_TE`` is true, the final norm
is ``TENorm`` (transformer_block.py's ``LayerNormImpl``), and its ``TELayerNormColumnParallelLinear``,
``TERowParallelLinear``, ``TEDotProductAttention`` and ``TENorm`` are built on the classes below, so their
``sharded_state_dict`` (Megatron's code: the TP axis maps, ``make_sharded_tensors_for_checkpoint``, the
``_extra_state`` ``ShardedObject``s) and ``load_checkpoint`` are Megatron's. What the stand-ins give, and
nothing more (no forward: they compute nothing):

- the parameter names of TE's modules: ``weight`` (and ``bias`` when asked) of ``te.pytorch.Linear``, sharded
  as TE shards it by ``parallel_mode`` and ``tp_size``; ``LayerNormLinear``'s ``layer_norm_weight`` (and
  ``layer_norm_bias`` unless RMSNorm); ``RMSNorm``'s ``weight``, ``LayerNorm``'s ``weight`` and ``bias``;
- their ``_extra_state``: ``get_extra_state`` is what TE 2.x's modules return without fp8, an empty uint8
  tensor (``TransformerEngineBaseModule.get_extra_state``); ``set_extra_state`` takes what TE 2.x takes as
  "no fp8 state" (None, or an empty tensor) and refuses anything else, as TE would try to unpickle it, and
  records each value it was given in ``GIVEN`` (its module's id -> the value);
- every other name under ``transformer_engine`` is a ``MagicMock`` (fp8 managers, recipes, kernels), except
  a name ending in ``Tensor`` (``QuantizedTensor``, ``Float8Tensor``, ...: ``dist_checkpointing.load`` asks
  whether each tensor is one), an empty class no tensor is an instance of, and
  ``cpu_offload.get_cpu_offload_context``, which ``TransformerBlock`` unpacks: a null context and no sync.

Not reproduced: TE's own ``_extra_state`` bytes with fp8 on, its fusible-ops norms' (TE 2.x's ``RMSNorm``
saves a pickled empty dict; it loads an empty tensor as no state too), and any TE module the LLaMA spec does
not build (``qk_layernorm``'s norms, grouped linears).
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import sys
import types
from typing import Any
from unittest import mock

import torch

VERSION = "2.8.0"  # a TE 2.x for Megatron-LM's is_te_min_version checks
GIVEN: dict[int, Any] = {}


class StandInModule(torch.nn.Module):
    """TE's ``TransformerEngineBaseModule``: its ``_extra_state`` only."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__()

    def get_extra_state(self) -> torch.Tensor:
        return torch.empty(0, dtype=torch.uint8)  # TE 2.x without fp8

    def set_extra_state(self, state: Any) -> None:
        GIVEN[id(self)] = state
        if state is not None and not (isinstance(state, torch.Tensor) and state.numel() == 0):
            raise RuntimeError(f"stand-in TE module: extra state {state!r} is not TE 2.x's 'no fp8 state'")


def _param(*shape: int) -> torch.nn.Parameter:
    return torch.nn.Parameter(torch.zeros(*shape))


class StandInLinear(StandInModule):
    """``te.pytorch.Linear``: ``weight`` [out, in] of this TP rank (and ``bias``)."""

    def __init__(
        self,
        in_features: int,
        out_features: int,
        *,
        bias: bool = True,
        parallel_mode: str | None = None,
        tp_size: int = 1,
        **kwargs: Any,
    ) -> None:
        super().__init__()
        if parallel_mode == "column":
            out_features //= tp_size
        elif parallel_mode == "row":
            in_features //= tp_size
        self.in_features, self.out_features = in_features, out_features
        self.weight = _param(out_features, in_features)
        if bias:
            self.bias = _param(out_features)


class StandInLayerNormLinear(StandInLinear):
    """``te.pytorch.LayerNormLinear``: the linear and its norm's ``layer_norm_weight`` (``_bias``)."""

    def __init__(
        self, in_features: int, out_features: int, *, normalization: str = "LayerNorm", **kwargs: Any
    ):
        super().__init__(in_features, out_features, **kwargs)
        self.layer_norm_weight = _param(in_features)
        if normalization != "RMSNorm":
            self.layer_norm_bias = _param(in_features)


class StandInRMSNorm(StandInModule):
    """``te.pytorch.RMSNorm``: ``weight``."""

    def __init__(self, normalized_shape: int, **kwargs: Any) -> None:
        super().__init__()
        self.weight = _param(normalized_shape)


class StandInLayerNorm(StandInRMSNorm):
    """``te.pytorch.LayerNorm``: ``weight`` and ``bias``."""

    def __init__(self, normalized_shape: int, **kwargs: Any) -> None:
        super().__init__(normalized_shape)
        self.bias = _param(normalized_shape)


class StandInDotProductAttention(StandInModule):
    """``te.pytorch.DotProductAttention``: no parameters (Megatron's wrapper saves none of its state)."""


DEFINED = {
    "transformer_engine": {"__version__": VERSION},
    "transformer_engine.pytorch": {
        "Linear": StandInLinear,
        "LayerNormLinear": StandInLayerNormLinear,
        "RMSNorm": StandInRMSNorm,
        "LayerNorm": StandInLayerNorm,
        "DotProductAttention": StandInDotProductAttention,
    },
    "transformer_engine.pytorch.cpu_offload": {
        "get_cpu_offload_context": lambda *a, **k: (contextlib.nullcontext(), None)
    },
}


class _Mocked(types.ModuleType):
    """A ``transformer_engine`` module: a name not defined above is a ``MagicMock``."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        if name.endswith("Tensor"):  # TE's tensor classes (fp8, quantized): Megatron asks isinstance of them
            value: Any = type(name, (), {"__module__": self.__name__})
        else:
            value = mock.MagicMock(name=f"{self.__name__}.{name}")
        setattr(self, name, value)
        return value


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(
        self, fullname: str, path: Any, target: Any = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname.split(".", 1)[0] != "transformer_engine":
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = _Mocked(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        for name, value in DEFINED.get(module.__name__, {}).items():
            setattr(module, name, value)


sys.meta_path.insert(0, _Finder())
