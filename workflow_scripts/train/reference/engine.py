"""DeepSpeed and torch.distributed: the import, the process group, the engine's config, the ops cache.

One process runs as a world of one, its store on a port the system picks as it listens (a port picked
before could be taken by another process in between: EADDRINUSE); under ``torchrun`` or the ``deepspeed``
launcher the ranks come from the environment. The backend is NCCL on GPUs and gloo on CPUs (the config's
``distributed_backend`` where it can work). DeepSpeed JIT-builds a shared-memory communication op for CPU
runs on first use (about a minute); it is built into ``TORCH_EXTENSIONS_DIR``, which defaults to
``torch_extensions`` inside the Python environment (``sys.prefix``), so it is built once per environment
(``snakepack train-reference --build-ops`` builds it ahead, as ``.ci/setup`` does). The build always runs
the environment's own ``ninja`` (the pip package beside this interpreter), whatever ``PATH`` says: two ninja
versions hash their build log differently, so a process that found the system's ninja first and one that
found the environment's would each rebuild the op the other built (a minute, inside a job's time limit).
Both settings hold only while DeepSpeed is imported and its process group started (``ops_environment``):
a process started afterwards from this one (another environment's DeepSpeed, as the compatibility tests
run GPT-NeoX) would otherwise inherit the folder, build its own op there, and this environment's next run
would rebuild it again.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from workflow_scripts.core.cli import UserError

INSTALL = (
    "pip install torch==2.13.0 && DS_BUILD_OPS=0 pip install --no-build-isolation deepspeed==0.19.8 "
    "(bash .ci/setup installs both into .venv, with the package's `train` extra)"
)


class MissingDependency(UserError, ImportError):
    """torch or DeepSpeed is not installed."""


def extensions_dir() -> str:
    """Where DeepSpeed's JIT-built ops are cached: ``$TORCH_EXTENSIONS_DIR``, by default inside the
    environment."""
    return os.environ.get("TORCH_EXTENSIONS_DIR") or os.path.join(sys.prefix, "torch_extensions")


@contextlib.contextmanager
def ops_environment() -> Iterator[str]:
    """While inside: ``TORCH_EXTENSIONS_DIR`` is ``extensions_dir()`` and this environment's bin folder
    (its ninja) is first on ``PATH``; both are restored after. Yields the folder."""
    saved = {name: os.environ.get(name) for name in ("PATH", "TORCH_EXTENSIONS_DIR")}
    folder = extensions_dir()
    os.environ["TORCH_EXTENSIONS_DIR"] = folder
    bin_dir = os.path.dirname(sys.executable)
    if os.path.exists(os.path.join(bin_dir, "ninja")):
        os.environ["PATH"] = os.pathsep.join([bin_dir, saved["PATH"] or ""])
    try:
        yield folder
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def import_torch() -> ModuleType:
    try:
        import torch
    except ImportError as err:
        raise MissingDependency(f"torch cannot be imported ({err}); install it: {INSTALL}") from None
    return torch


def import_deepspeed() -> ModuleType:
    """DeepSpeed, quiet (warnings only), or a clear message saying how to install it."""
    torch = import_torch()
    if not torch.cuda.is_available():
        os.environ.setdefault("DS_ACCELERATOR", "cpu")  # say so, rather than have DeepSpeed warn it guessed
    try:
        with ops_environment():
            import deepspeed
    except ImportError as err:
        raise MissingDependency(f"deepspeed cannot be imported ({err}); install it: {INSTALL}") from None
    deepspeed.utils.logger.setLevel(logging.WARNING)
    return deepspeed


def world_size() -> int:
    """The number of processes of this launch (1 when started directly)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def single_process_env() -> None:
    """A directly started process is rank 0 of a world of 1."""
    if "RANK" not in os.environ:
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1")


@dataclass(frozen=True)
class Dist:
    """This process in the data-parallel world."""

    rank: int
    world_size: int
    local_rank: int
    device: Any  # torch.device
    backend: str

    @property
    def main(self) -> bool:
        return self.rank == 0


def init_distributed(backend: str | None) -> Dist:
    """Start the process group (NCCL on GPUs, gloo on CPUs) and pick this rank's device."""
    torch = import_torch()
    deepspeed = import_deepspeed()
    single_process_env()
    cuda = torch.cuda.is_available()
    if not cuda or backend not in ("nccl", "gloo"):
        backend = "nccl" if cuda else "gloo"
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if cuda:
        torch.cuda.set_device(local_rank)
    # a world of one: the store listens on a port the system picks (rank and size given, not from env://)
    alone = {"init_method": "tcp://127.0.0.1:0", "rank": 0, "world_size": 1} if world_size() == 1 else {}
    with ops_environment(), contextlib.redirect_stdout(io.StringIO()):  # it says its CPU op was built
        deepspeed.init_distributed(dist_backend=backend, auto_mpi_discovery=False, verbose=False, **alone)
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    dist = torch.distributed
    return Dist(dist.get_rank(), dist.get_world_size(), local_rank, device, backend)


def deepspeed_config(
    batch: int, micro: int, accumulation: int, clipping: float, zero_stage: int, precision: str, params: int
) -> dict[str, Any]:
    """The engine's config: GPT-NeoX's batch keys, clipping, ZeRO stage, bf16 when asked and supported.

    ZeRO's buckets are sized to the model (DeepSpeed's default, 5e8 elements, would allocate 2 GB per
    bucket for a model of a few thousand parameters and make a tiny CPU run a hundred times slower)."""
    bucket = int(min(5e8, max(params, 2**20)))
    zero = {"stage": zero_stage}
    if zero_stage:
        zero.update(reduce_bucket_size=bucket, allgather_bucket_size=bucket)
    return {
        "train_batch_size": batch,
        "train_micro_batch_size_per_gpu": micro,
        "gradient_accumulation_steps": accumulation,
        "gradient_clipping": clipping,
        "zero_optimization": zero,
        "bf16": {"enabled": precision == "bf16"},
        "zero_allow_untested_optimizer": True,
        "steps_per_print": 2**30,
        "wall_clock_breakdown": False,
    }


def barrier() -> None:
    import torch.distributed as dist

    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()


def mean_over_ranks(value: float, device: Any) -> float:
    """The mean of ``value`` over the data-parallel ranks."""
    import torch
    import torch.distributed as dist

    if not dist.is_initialized() or dist.get_world_size() == 1:
        return value
    t = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(t)
    return float(t.item()) / dist.get_world_size()


def any_rank(flag: bool, device: Any) -> bool:
    """True when ``flag`` is true on any rank (so that every rank stops at the same iteration)."""
    import torch
    import torch.distributed as dist

    if not dist.is_initialized() or dist.get_world_size() == 1:
        return flag
    t = torch.tensor([int(flag)], dtype=torch.int32, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())


def peak_memory(device: Any) -> dict[str, int]:
    """Peak memory of this process: resident set (VmHWM) and, on a GPU, the allocator's peak."""
    out: dict[str, int] = {}
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    out["rss_peak_bytes"] = int(line.split()[1]) * 1024
    except OSError:
        import resource

        out["rss_peak_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    if getattr(device, "type", "cpu") == "cuda":
        import torch

        out["gpu_peak_bytes"] = int(torch.cuda.max_memory_allocated(device))
    return out


def build_ops() -> str:
    """Build DeepSpeed's CPU communication op into the extensions cache (a world of one); return the cache."""
    init_distributed("gloo")
    import torch.distributed as dist

    dist.destroy_process_group()
    return extensions_dir()
