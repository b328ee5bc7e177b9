"""Megatron-LM's own ``pretrain_gpt.py`` on CPUs: the device stand-ins, then the script as it is.

Usage (config/train/megatron-cpu.yaml; run by the trainers' Python, with only torch and the standard
library: this file imports nothing of snakepack)::

    python workflow_scripts/train/megatron_cpu.py $MEGATRON_LM/pretrain_gpt.py ARGS...

Each rank is one process (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``, as
Megatron-LM's ``parse_args`` and ``init_process_group`` read them); the arguments must give ``--distributed-
backend gloo`` and ``--transformer-impl local`` (config/train/megatron-cpu.args). A stand-in places, times or
orders work that a GPU would; none computes: every number Megatron-LM computes, it computes on the CPU with
its own code. Each names the Megatron-LM code (the pinned tree) that needs it:

- ``torch.cuda.is_available``, ``device_count``, ``set_device``, ``current_device``,
  ``get_device_capability``, ``get_device_name``: ``initialize_megatron`` asserts CUDA,
  ``_initialize_distributed`` sets the rank's device, ``validate_args`` and ``get_device_arch_version`` ask
  its compute capability (9.0: Hopper), ``ssm/ops/gdp/common.py`` its name at import;
- tensor factories' ``device="cuda"``, ``Tensor.to``/``Tensor.cuda``/``Module.cuda``: ``training.py`` puts
  flags, losses and the batch "on the GPU" (``get_batch_on_this_tp_rank``, ``evaluate``,
  ``build_train_valid_test_data_loaders``, ``get_model``'s ``model_module.cuda``): the CPU is the device;
- ``Tensor.type()`` of a float32 tensor names ``torch.cuda.FloatTensor``: ``clip_grads.py``'s
  ``get_grad_norm_fp32`` asserts that name before clipping;
- the CUDA RNG state (``get_rng_state``, ``set_rng_state``, ``manual_seed``, ``default_generators``): the
  ``CudaRNGStatesTracker`` of ``tensor_parallel/random.py`` forks and saves it; a CPU ``torch.Generator``
  holds it (its states are saved in checkpoints as a GPU's would be);
- ``synchronize``, ``empty_cache``, memory statistics, ``Event``, ``Stream``, ``current_stream``, ``stream``,
  ``nvtx``: the timers (``timers.py``), the memory report and the DDP streams order or measure work only.

``TORCHDYNAMO_DISABLE=1`` is set (a ``torch.compile``d helper would ask Triton for a CUDA device).
"""

from __future__ import annotations

import contextlib
import functools
import os
import runpy
import sys
from collections.abc import Callable
from typing import Any

CAPABILITY = (9, 0)  # the GPU validate_args is told of (Hopper): it gates options, never the math
FACTORIES = (
    "tensor", "as_tensor", "empty", "zeros", "ones", "full", "arange", "rand", "randn", "randint",
    "randperm", "empty_like", "zeros_like", "ones_like", "full_like", "linspace", "empty_strided",
)  # fmt: skip


def _is_gpu(device: Any) -> bool:
    """A device argument that names a GPU: ``"cuda"``, ``"cuda:N"``, a CUDA ``torch.device`` or an index."""
    import torch

    if isinstance(device, bool):
        return False
    if isinstance(device, int):
        return True
    if isinstance(device, str):
        return device.startswith("cuda")
    return isinstance(device, torch.device) and device.type == "cuda"


def _on_cpu(function: Callable[..., Any]) -> Callable[..., Any]:
    """``function`` with a GPU ``device`` keyword made the CPU."""

    @functools.wraps(function)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        if _is_gpu(kwargs.get("device")):
            kwargs["device"] = "cpu"
        return function(*args, **kwargs)

    return wrapped


class _Event:
    """``torch.cuda.Event``: work is done when it is asked for on a CPU."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        import time

        self._time = time.perf_counter
        self.at = 0.0

    def record(self, *args: Any) -> None:
        self.at = self._time()

    def synchronize(self) -> None:
        pass

    def wait(self, *args: Any) -> None:
        pass

    def query(self) -> bool:
        return True

    def elapsed_time(self, end: _Event) -> float:
        return (end.at - self.at) * 1000.0


class _Stream:
    """``torch.cuda.Stream``: one stream, the CPU's program order."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def wait_stream(self, *args: Any) -> None:
        pass

    def wait_event(self, *args: Any) -> None:
        pass

    def record_event(self, event: _Event | None = None) -> _Event:
        event = event or _Event()
        event.record()
        return event

    def synchronize(self) -> None:
        pass


def install() -> None:
    """Put the stand-ins in place (before Megatron-LM is imported)."""
    import torch

    os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")
    cuda = torch.cuda
    generator = torch.Generator()  # the CUDA RNG state the tracker forks
    generator.manual_seed(0)

    for name in FACTORIES:
        setattr(torch, name, _on_cpu(getattr(torch, name)))

    tensor_to = torch.Tensor.to

    def to(self: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        args = tuple("cpu" if _is_gpu(a) else a for a in args)
        if _is_gpu(kwargs.get("device")):
            kwargs["device"] = "cpu"
        return tensor_to(self, *args, **kwargs)

    tensor_type = torch.Tensor.type

    def type_(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        if args or kwargs:
            return tensor_type(self, *args, **kwargs)
        name = tensor_type(self)
        return name.replace("torch.", "torch.cuda.", 1) if name == "torch.FloatTensor" else name

    torch.Tensor.to = to
    torch.Tensor.type = type_
    torch.Tensor.cuda = lambda self, *args, **kwargs: self
    torch.nn.Module.cuda = lambda self, *args, **kwargs: self

    def get_rng_state(device: Any = "cuda") -> torch.Tensor:
        return generator.get_state()

    def set_rng_state(state: torch.Tensor, device: Any = "cuda") -> None:
        generator.set_state(state)

    def manual_seed(seed: int) -> None:
        generator.manual_seed(int(seed))

    stand_ins: dict[str, Any] = {
        "is_available": lambda: True,
        "device_count": lambda: 1,
        "set_device": lambda device: None,
        "current_device": lambda: 0,
        "get_device_capability": lambda device=None: CAPABILITY,
        "get_device_name": lambda device=None: "CPU",
        "synchronize": lambda device=None: None,
        "empty_cache": lambda: None,
        "memory_allocated": lambda device=None: 0,
        "max_memory_allocated": lambda device=None: 0,
        "memory_reserved": lambda device=None: 0,
        "max_memory_reserved": lambda device=None: 0,
        "reset_peak_memory_stats": lambda device=None: None,
        "memory_stats": lambda device=None: {},
        "Event": _Event,
        "Stream": _Stream,
        "current_stream": lambda device=None: _Stream(),
        "default_stream": lambda device=None: _Stream(),
        "stream": lambda stream=None: contextlib.nullcontext(),
        "_lazy_init": lambda: None,
        "_lazy_call": lambda callable_, **kwargs: callable_(),
        "get_rng_state": get_rng_state,
        "set_rng_state": set_rng_state,
        "manual_seed": manual_seed,
        "manual_seed_all": manual_seed,
        "default_generators": (generator,),
    }
    for name, value in stand_ins.items():
        setattr(cuda, name, value)
    for name in ("get_rng_state", "set_rng_state", "manual_seed", "manual_seed_all"):
        setattr(cuda.random, name, stand_ins[name])
    cuda.nvtx.range_push = lambda *args, **kwargs: None
    cuda.nvtx.range_pop = lambda *args, **kwargs: None


def main(argv: list[str]) -> None:
    """Run the script ``argv[0]`` as ``__main__`` with the rest as its arguments, as ``python`` would."""
    if not argv:
        raise SystemExit("usage: megatron_cpu.py PRETRAIN_SCRIPT [ARGS...]")
    install()
    script = os.path.abspath(argv[0])
    sys.argv = [script, *argv[1:]]
    sys.path[0] = os.path.dirname(script)  # not this file's folder: the script's, as `python script` has
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
