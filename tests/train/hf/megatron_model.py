"""Megatron-core's ``GPTModel`` built by the pinned Megatron-LM on CPU ranks, for the compatibility tests.

``run(trainers, spec, out)`` starts ``tp x pp`` ranks with torchrun (gloo) in Megatron-LM's tree, each
running ``SCRIPT``: Megatron-LM's own ``parse_args`` / ``validate_args`` on ``spec["argv"]`` (tests/trainers
MEGATRON_ARGS), ``mpu.initialize_model_parallel``, ``training.get_model`` with pretrain_gpt.py's model
provider (``gpt_builders.gpt_builder``; the local transformer spec with ``--transformer-impl local``), then,
as ``spec`` asks:

- ``load``: ``checkpointing.load_checkpoint`` of ``spec["load"]`` (``args.load``; ``--finetune`` and the
  other flags as argv gives them);
- ``save``: ``checkpointing.save_checkpoint`` at ``spec["iteration"]`` into ``spec["save"]``;
- ``tokens``: the model's logits on them, under a causal mask as pretrain_gpt.py's batches give it (pipeline
  size 1; the tensor-parallel vocabulary shards gathered; not with TE's stand-ins, which compute nothing).

Each rank writes ``out/rank{R}.pt``: its tensor/pipeline rank, the iteration ``load_checkpoint`` returned,
``args.padded_vocab_size``, its module ``state_dict`` (``state``: the module's own names), every
``ShardedTensor`` of its ``sharded_state_dict`` (``sharded``: key, global shape and offset, the local data:
what it would save, or has loaded), the unique keys of its ``ShardedObject``s (``objects``: the
``_extra_state`` entries), with TE's stand-ins the extra state each TE module was given by the load
(``extra_state_given``: module name -> value) and the logits. ``expected_shards`` checks those against
whole tensors under Megatron names.

Stand-ins for CUDA calls (torch here has no CUDA), in these ranks only, each where Megatron-LM calls it:

- ``torch.nn.Module.cuda`` returns the module: ``get_model`` moves each model chunk to the GPU
  (``model_module.cuda(torch.cuda.current_device())``); it stays on the CPU.
- ``torch.Tensor.cuda`` returns the tensor: with tied embeddings at PP > 1,
  ``LanguageModule.setup_embeddings_and_output_layer`` moves the shared weight to the GPU to all-reduce it.
- ``torch.cuda.current_device`` is ``"cpu"``: ``get_model``'s call above, and ``dist_checkpointing``'s save
  finalisation, which broadcasts a failure flag from a tensor on that device.
- ``torch.cuda.get_rng_state`` is the CPU generator's state: ``save_checkpoint`` collects the RNG states
  (``get_rng_state``) even with ``--no-save-rng``.
- ``torch.tensor(..., device="cuda")`` is made on the CPU: ``load_checkpoint``'s ``read_metadata`` puts the
  tracker's iteration on the GPU to all-reduce it across ranks.
- ``torch.cuda.synchronize`` does nothing: ``dist_checkpointing``'s file writer synchronises before
  copying tensors to the host.
- The CUDA RNG tracker's ``fork`` (``tensor_parallel.get_cuda_rng_tracker()``) is a null context, for the
  logits only: ``DotProductAttention`` forks the CUDA RNG state around its dropout (0 here, in eval mode).
"""

from __future__ import annotations

import json
import shutil
import socket
from pathlib import Path
from typing import Any

import torch

from tests.trainers import MEGATRON_ARGS, Trainers

# Megatron-LM flags every CPU build needs: no fused kernels (CUDA or apex), CPU initialisation, the local spec
CPU_ARGV = [
    "--transformer-impl", "local", "--use-cpu-initialization", "--no-persist-layer-norm",
    "--no-masked-softmax-fusion", "--no-bias-gelu-fusion", "--no-bias-dropout-fusion",
    "--no-bias-swiglu-fusion", "--no-gradient-accumulation-fusion", "--no-rope-fusion",
    "--micro-batch-size", "1", "--global-batch-size", "1", "--train-iters", "1", "--lr", "1e-4",
    "--tokenizer-type", "NullTokenizer", "--ckpt-format", "torch_dist", "--attention-dropout", "0",
    "--hidden-dropout", "0",
]  # fmt: skip

# With SNAKEPACK_TE_STAND_INS set, tests/train/hf/te_stand_ins (copied beside the script) is imported before
# any of Megatron-LM: Transformer Engine's stand-ins, for the TE layer spec's model
PRELUDE = r"""
import os
if os.environ.get("SNAKEPACK_TE_STAND_INS"):
    import te_stand_ins
"""

SCRIPT = (
    PRELUDE
    + MEGATRON_ARGS
    + r"""
import contextlib, json, os
from functools import partial
import torch


def main():
    torch.nn.Module.cuda = lambda self, *a, **k: self  # stand-in: get_model's move to the GPU
    torch.Tensor.cuda = lambda self, *a, **k: self  # stand-in: tied embeddings copied between PP stages
    torch.cuda.current_device = lambda: "cpu"  # stand-in: get_model's and the save's device
    torch.cuda.get_rng_state = lambda *a, **k: torch.get_rng_state()  # stand-in: save_checkpoint's RNG states
    torch.cuda.synchronize = lambda *a, **k: None  # stand-in: the checkpoint writer's synchronisation
    tensor = torch.tensor

    def cpu_tensor(*args, **kwargs):  # stand-in: read_metadata's tensor on the GPU
        return tensor(*args, **{**kwargs, "device": "cpu"} if kwargs.get("device") == "cuda" else kwargs)

    torch.tensor = cpu_tensor
    from megatron.core import mpu, tensor_parallel
    from megatron.core.dist_checkpointing.dict_utils import nested_values
    from megatron.core.dist_checkpointing.mapping import ShardedObject, ShardedTensor, apply_factories
    from megatron.training import checkpointing, training
    import gpt_builders, model_provider

    spec = json.loads(sys.argv[1])
    out = sys.argv[2]
    torch.distributed.init_process_group("gloo")
    args = parsed(spec["argv"], build_tokenizer=True)
    mpu.initialize_model_parallel(args.tensor_model_parallel_size, args.pipeline_model_parallel_size)
    torch.manual_seed(spec.get("seed", 0) + torch.distributed.get_rank())
    provider = partial(model_provider.model_provider, gpt_builders.gpt_builder)
    model = training.get_model(provider, wrap_with_ddp=False)
    iteration = None
    if spec.get("load"):
        args.load = spec["load"]
        iteration, _ = checkpointing.load_checkpoint(model, None, None, strict=True)
    if spec.get("save"):
        args.save = spec["save"]
        checkpointing.save_checkpoint(spec["iteration"], model, None, None, 0)
    logits = None
    if spec.get("tokens"):
        tokens = torch.tensor(spec["tokens"])
        positions = torch.arange(tokens.shape[1]).expand_as(tokens)
        tracker = tensor_parallel.get_cuda_rng_tracker()  # stand-in: its fork of the CUDA RNG state
        tracker.fork = lambda *a, **k: contextlib.nullcontext()
        causal = torch.ones(tokens.shape[1], tokens.shape[1]).triu(1).bool()[None, None]  # True: masked
        with torch.no_grad():
            local = model[0].eval()(tokens, positions, causal)
        logits = tensor_parallel.gather_from_tensor_model_parallel_region(local)
    sharded = model[0].sharded_state_dict(metadata={"dp_cp_group": mpu.get_data_parallel_group()})
    apply_factories(sharded)
    shards = [
        {"key": t.key, "global_shape": t.global_shape, "global_offset": t.global_offset,
         "prepend_axis_num": t.prepend_axis_num, "data": t.data.detach().clone()}
        for t in nested_values(sharded) if isinstance(t, ShardedTensor)
    ]
    objects = sorted(t.unique_key for t in nested_values(sharded) if isinstance(t, ShardedObject))
    given = {}  # with TE's stand-ins: each TE module's name -> the extra state the load gave it
    if os.environ.get("SNAKEPACK_TE_STAND_INS"):
        names = {id(m): n for n, m in model[0].named_modules()}
        given = {names[i]: v for i, v in te_stand_ins.GIVEN.items()}
    torch.save({
        "tp_rank": mpu.get_tensor_model_parallel_rank(), "pp_rank": mpu.get_pipeline_model_parallel_rank(),
        "iteration": iteration, "padded_vocab_size": args.padded_vocab_size,
        "state": {k: v for k, v in model[0].state_dict().items() if isinstance(v, torch.Tensor)},
        "sharded": shards, "objects": objects, "extra_state_given": given, "logits": logits,
    }, os.path.join(out, f"rank{torch.distributed.get_rank()}.pt"))
    torch.distributed.destroy_process_group()


if __name__ == "__main__":  # the checkpoint writer starts worker processes that import this file
    main()
"""
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(
    trainers: Trainers, spec: dict[str, Any], out: Path, tp: int = 1, pp: int = 1, te: str | None = None
) -> list[dict[str, Any]]:
    """Every rank's dump (rank order) of ``SCRIPT`` run on ``spec`` with ``tp x pp`` ranks; ``spec["argv"]``
    gets ``CPU_ARGV`` and the parallel sizes added. ``te``: with Transformer Engine's stand-ins importable
    (tests/train/hf/te_stand_ins), this ``--transformer-impl`` (``transformer_engine``: the TE layer spec;
    ``local``: the local spec, whose final norm is then ``TENorm``)."""
    out.mkdir(parents=True, exist_ok=True)
    script = out / "megatron_model.py"
    script.write_text(SCRIPT, encoding="utf-8")
    argv = [*spec["argv"], *CPU_ARGV]
    env = {"CUDA_DEVICE_MAX_CONNECTIONS": "1", "OMP_NUM_THREADS": "1"}  # validate_args asks it with TP > 1
    if te:
        shutil.copyfile(Path(__file__).with_name("te_stand_ins.py"), out / "te_stand_ins.py")
        argv += ["--transformer-impl", te]  # after CPU_ARGV's local: the last one counts
        env["SNAKEPACK_TE_STAND_INS"] = "1"
    argv += ["--tensor-model-parallel-size", str(tp), "--pipeline-model-parallel-size", str(pp)]
    torchrun = [
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        str(tp * pp),
        "--master-port",
        str(free_port()),
    ]
    proc = trainers.run(
        "megatron", [*torchrun, str(script), json.dumps(spec | {"argv": argv}), str(out)], env=env
    )
    if proc.returncode:
        first = [line for line in proc.stderr.splitlines() if line.startswith("[rank0]")] or [
            proc.stderr[-3000:]
        ]
        raise AssertionError(f"Megatron-LM's ranks failed ({proc.returncode}):\n" + "\n".join(first[-60:]))
    return [torch.load(out / f"rank{r}.pt", weights_only=False) for r in range(tp * pp)]


def stacked(weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Megatron names' tensors under the checkpoint's keys: a layer's stacked along a first axis."""
    out: dict[str, torch.Tensor] = {}
    layers: dict[str, list[tuple[int, torch.Tensor]]] = {}
    for name, t in weights.items():
        if name.startswith("decoder.layers."):
            index, rest = name.removeprefix("decoder.layers.").split(".", 1)
            layers.setdefault(rest, []).append((int(index), t))
        else:
            out[name] = t
    for rest, per in layers.items():
        out[f"decoder.layers.{rest}"] = torch.stack([t for _, t in sorted(per, key=lambda x: x[0])])
    return out


def expected_shards(rank: dict[str, Any], weights: dict[str, torch.Tensor]) -> list[str]:
    """The keys of a rank's shards whose data is not the slice of ``weights`` (Megatron names, whole
    tensors) that the shard's global offset names; a key ``weights`` lacks is listed too."""
    whole = stacked(weights)
    wrong = []
    for shard in rank["sharded"]:
        data = shard["data"]
        shape = (1,) * shard["prepend_axis_num"] + tuple(data.shape)
        full = whole.get(shard["key"])
        if full is None or tuple(full.shape) != tuple(shard["global_shape"]):
            wrong.append(shard["key"])
            continue
        part = full[tuple(slice(o, o + s) for o, s in zip(shard["global_offset"], shape, strict=True))]
        if not torch.equal(part.reshape(data.shape), data):
            wrong.append(shard["key"])
    return wrong


def assembled(ranks: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
    """Whole tensors under Megatron names from every rank's shards (the inverse of ``expected_shards``)."""
    whole: dict[str, torch.Tensor] = {}
    for rank in ranks:
        for shard in rank["sharded"]:
            full = whole.setdefault(
                shard["key"], torch.zeros(shard["global_shape"], dtype=shard["data"].dtype)
            )
            shape = (1,) * shard["prepend_axis_num"] + tuple(shard["data"].shape)
            index = tuple(slice(o, o + s) for o, s in zip(shard["global_offset"], shape, strict=True))
            full[index] = shard["data"].reshape(shape)
    out: dict[str, torch.Tensor] = {}
    for key, t in whole.items():
        if key.startswith("decoder.layers."):
            out |= {f"decoder.layers.{i}.{key.removeprefix('decoder.layers.')}": x for i, x in enumerate(t)}
        else:
            out[key] = t
    return out
