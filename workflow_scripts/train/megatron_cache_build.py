"""A pack's Megatron-LM index caches, built by Megatron-LM's own code as the pack's first segment would build
them: run by ``snakepack train-data-cache`` in the trainer's Python with Megatron-LM's tree on the path
(standard library, torch and Megatron-LM only; snakepack's package is not imported here).

Usage (``train-data-cache`` builds the command)::

    TRAINER_PYTHON megatron_cache_build.py --iteration N --out RESULT.json -- PRETRAIN_GPT_ARGV...

The argv is ``pretrain_gpt.py``'s, as the segment's launch gives it; the environment names the job's world
size (``WORLD_SIZE``: ``validate_args`` derives the data-parallel size from it) and rank 0. What it runs, all
of it Megatron-LM's: ``parse_args`` + ``validate_args``, ``update_train_iters``,
``get_train_valid_test_num_samples`` at iteration ``N`` (the iteration the segment loads: its phase, hence
its training dataset's size), ``compile_helpers``, ``pretrain_gpt.core_gpt_dataset_config_from_args`` (the
job's own dataset config) and ``BlendedMegatronDatasetBuilder(GPTDataset, ...).build()``, which loads each
index it finds under ``--data-cache-path`` and builds and saves the others. ``RESULT.json`` lists the cache
files of the built datasets (train, validation, test, and their blends), those it wrote now, the sizes and
the time.

One stand-in where there is no GPU: ``validate_args`` asks the GPU's compute capability
(``get_device_arch_version``) with tensor or context parallelism, to check ``CUDA_DEVICE_MAX_CONNECTIONS``;
it decides nothing about the data. On a CPU it is answered 9 (Hopper) and ``CUDA_DEVICE_MAX_CONNECTIONS=1``
is set, as the launch sets it.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time


def cache_state(folder: str) -> dict[str, tuple[int, int]]:
    """Every file of ``folder``: (size, mtime in ns)."""
    if not os.path.isdir(folder):
        return {}
    found = {}
    for entry in os.scandir(folder):
        if entry.is_file():
            stat = entry.stat()
            found[entry.name] = (stat.st_size, stat.st_mtime_ns)
    return found


def datasets_of(dataset: object) -> list[object]:
    """A built split and the datasets it blends (a list of validation sets, a BlendedDataset's parts)."""
    if dataset is None:
        return []
    if isinstance(dataset, list):
        return [d for part in dataset for d in datasets_of(part)]
    return [dataset, *(d for part in getattr(dataset, "datasets", []) for d in datasets_of(part))]


def main(argv: list[str]) -> int:
    at = argv.index("--")
    ours, pretrain_argv = argv[:at], argv[at + 1 :]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iteration", type=int, required=True, help="the iteration the segment loads")
    parser.add_argument("--out", required=True, help="the result (JSON)")
    args_here = parser.parse_args(ours)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stdout, force=True)

    import torch
    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
    from megatron.core.datasets.gpt_dataset import GPTDataset
    from megatron.core.datasets.utils import Split, compile_helpers
    from megatron.training import arguments, global_vars, training

    if not torch.cuda.is_available():  # the stand-in (see above): no GPU on a CPU node
        arguments.get_device_arch_version = lambda: 9
        os.environ.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "1")
    sys.argv = ["pretrain_gpt.py", *pretrain_argv]
    args = arguments.parse_args()
    arguments.validate_args(args)
    refused = [flag for flag in ("mock_data", "sft", "fim_data") if getattr(args, flag, False)]
    if refused:
        raise SystemExit(f"--{refused[0].replace('_', '-')}: train-data-cache builds GPTDataset caches only")
    if args.data_cache_path is None:
        raise SystemExit("no --data-cache-path in the arguments: set train.data_cache_dir")
    global_vars.unset_global_variables()
    global_vars.set_args(args)
    training.update_train_iters(args)
    args.iteration = args_here.iteration  # what load_checkpoint sets: the phase the segment trains
    sizes = training.get_train_valid_test_num_samples()
    compile_helpers()
    import pretrain_gpt  # the job's own dataset config (its __main__ does not run)

    before = cache_state(args.data_cache_path)
    started = time.perf_counter()
    config = pretrain_gpt.core_gpt_dataset_config_from_args(args)
    built = BlendedMegatronDatasetBuilder(GPTDataset, sizes, lambda: True, config).build()
    seconds = time.perf_counter() - started
    after = cache_state(args.data_cache_path)
    hashes = {d.unique_description_hash for split in built for d in datasets_of(split)}
    files = sorted(name for name in after if name.split("-", 1)[0] in hashes)
    result = {
        "iteration": args.iteration,
        "sizes": dict(zip([s.name for s in Split], sizes, strict=True)),
        "lengths": {s.name: (None if d is None else len(d)) for s, d in zip(Split, built, strict=True)},
        "data_cache_path": os.path.abspath(args.data_cache_path),
        "files": files,
        "written": sorted(name for name in files if before.get(name) != after[name]),
        "seconds": round(seconds, 3),
    }
    with open(args_here.out, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
