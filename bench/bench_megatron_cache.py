"""Benchmark: a pack's Megatron-LM index caches built before the job (``train_data_cache``) against
Megatron-LM building them at the job's start, for a 1 GB pack.

Writes a synthetic pack (random uint16 tokens, documents of 300-3000 tokens; ``--size-mb``, default 1,000 MB
of ``.bin``) and a 10 MB held-out pack with our own writer (workflow_scripts/core/indexed_dataset.py), and
``pretrain_gpt.py`` arguments reading one epoch of it (``--train-samples``: the pack's tokens over
``--seq-length``). Then, each in a fresh process of the pinned Megatron-LM's Python (tests/trainers.py),
``--repeats`` times in turn:

- ``prebuild``: what the ``train_data_cache`` rule runs (workflow_scripts/train/megatron_cache_build.py:
  Megatron-LM's own builder) into an empty cache folder, on a CPU before the job;
- ``job_build``: the job's rank 0 at its start without caches: ``build_train_valid_test_data_loaders`` of
  ``pretrain_gpt``'s provider, into an empty cache folder (every GPU of the job waits for it);
- ``job_load``: the same with the caches ``prebuild`` made: it loads them and builds none (checked: no file
  written).

Each figure is the data step alone (the process's imports left out); MB/s is of the pack's ``.bin``. The
GPU job's start gets shorter by ``job_build - job_load`` seconds, for every GPU of the job and, without a
shared cache folder, every job that builds them (evaluations too, before theirs built no training index).
Figures also go to bench/results/megatron_cache.json.

    .venv/bin/python bench/bench_megatron_cache.py                  # 1 GB pack, ~3 minutes on 2 cores
    .venv/bin/python bench/bench_megatron_cache.py --size-mb 200    # quicker
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import socket
import sys
import tempfile
import time
from pathlib import Path

import harness
import numpy as np

from workflow_scripts.core.indexed_dataset import bin_path
from workflow_scripts.train import megatron_cache_build

sys.path.insert(0, str(harness.ROOT))  # tests.trainers: the pinned Megatron-LM and its Python
from tests.trainers import MEGATRON_ARGS, trainers

SEQ = 2048
BATCH = 64
# The job's rank 0 at its start (pretrain's data step), as tests/train/test_megatron_data_cache.py runs it:
# one gloo process group; the data loaders' flags made on the CPU (they go to the GPU to be broadcast).
JOB_START = (
    MEGATRON_ARGS
    + r"""
import json, os, time
import torch
from megatron.core import mpu
from megatron.core.datasets.utils import compile_helpers
from megatron.training import training

_tensor = torch.tensor
torch.tensor = lambda *a, **k: _tensor(*a, **({**k, "device": "cpu"} if k.get("device") == "cuda" else k))
address = f"tcp://127.0.0.1:{sys.argv[2]}"
torch.distributed.init_process_group("gloo", init_method=address, rank=0, world_size=1)
mpu.initialize_model_parallel()
compile_helpers()
import pretrain_gpt
pretrain_gpt.train_valid_test_datasets_provider.is_distributed = True
args = parsed(json.loads(sys.argv[1]), build_tokenizer=False)
training.update_train_iters(args)
args.iteration = 0
provider, spent = pretrain_gpt.train_valid_test_datasets_provider, []
def timed(sizes):  # the datasets alone (what the prebuild makes), inside the data step
    started = time.perf_counter()
    made = provider(sizes)
    spent.append(time.perf_counter() - started)
    return made
timed.is_distributed = True
before = {e.name: e.stat().st_mtime_ns for e in os.scandir(args.data_cache_path)}
started = time.perf_counter()
training.build_train_valid_test_data_loaders(timed)
step = time.perf_counter() - started
after = {e.name: e.stat().st_mtime_ns for e in os.scandir(args.data_cache_path)}
written = sorted(n for n in after if before.get(n) != after[n])
print(json.dumps({"seconds": spent[0], "data_step": step, "written": written}))
"""
)


def pretrain_argv(pack: Path, valid: Path, cache: Path, samples: int) -> list[str]:
    """A small model's ``pretrain_gpt.py`` arguments reading ``samples`` samples of the pack."""
    return [
        "--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4",
        "--seq-length", str(SEQ), "--max-position-embeddings", str(SEQ),
        "--micro-batch-size", "1", "--global-batch-size", str(BATCH), "--lr", "1e-4",
        "--train-samples", str(samples), "--eval-interval", "1000", "--eval-iters", "10",
        "--train-data-path", str(pack), "--valid-data-path", str(valid), "--test-data-path", str(valid),
        "--tokenizer-type", "NullTokenizer", "--vocab-size", "65000", "--seed", "1234",
        "--data-cache-path", str(cache), "--distributed-backend", "gloo",
    ]  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", type=Path, default=harness.WORK, help="files go to a fresh folder here")
    parser.add_argument("--size-mb", type=int, default=1000, help="the pack's .bin size (MB)")
    parser.add_argument("--repeats", type=int, default=2, help="timed runs of each, in turn")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    built = trainers()
    env = {**built.helpers_env(), "WORLD_SIZE": "1", "RANK": "0", "LOCAL_RANK": "0"}
    args.workdir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="bench_megatron_cache_", dir=args.workdir))
    rng = np.random.default_rng(args.seed)
    try:
        t0 = time.perf_counter()
        pack, valid = work / "pack", work / "valid"
        docs = harness.make_input(pack, args.size_mb * harness.MB, np.dtype(np.uint16), rng)
        harness.make_input(valid, 10 * harness.MB, np.dtype(np.uint16), rng)
        size = os.path.getsize(bin_path(pack))
        samples = size // 2 // SEQ  # one epoch
        print(
            f"pack: {size / 1e6:.0f} MB uint16, {docs} documents, {samples} samples of {SEQ} tokens "
            f"(generated in {time.perf_counter() - t0:.1f} s)"
        )

        def run(name: str, cache: Path) -> dict:
            argv = pretrain_argv(pack, valid, cache, samples)
            if name == "prebuild":
                out = work / "prebuild.json"
                command = [megatron_cache_build.__file__, "--iteration", "0", "--out", str(out), "--", *argv]
                proc = built.run("megatron", command, env=env)
                assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
                result = json.loads(out.read_text())
            else:
                port = str(free_port())
                proc = built.run("megatron", ["-c", JOB_START, json.dumps(argv), port], env=env)
                assert proc.returncode == 0, proc.stderr[-3000:]
                result = json.loads(proc.stdout.strip().splitlines()[-1])
            return result

        times: dict[str, list[float]] = {"prebuild": [], "job_build": [], "job_load": []}
        written: dict[str, int] = {}
        for r, name in harness.rounds(["prebuild", "job_build", "job_load"], args.repeats):
            cache = work / ("cache_job" if name == "job_build" else "cache")
            if name != "job_load":
                shutil.rmtree(cache, ignore_errors=True)
            cache.mkdir(exist_ok=True)
            result = run(name, cache)
            times[name].append(result["seconds"])
            written[name] = len(result["written"])
            harness.run_line(r, name, result["seconds"], size)
        assert written["job_load"] == 0, "the job found the prebuilt caches and still built some"
        best = harness.best(times)
        rates = {name: size / seconds / harness.MB for name, seconds in best.items()}
        ratio = harness.compare(
            "prebuild (CPU, before)", rates["prebuild"], "job start build", rates["job_build"]
        )
        saved = best["job_build"] - best["job_load"]
        print(
            f"job start: {best['job_build']:.2f} s building -> {best['job_load']:.2f} s loading "
            f"({saved:.2f} s less per job, x the job's GPUs in GPU time)"
        )
        harness.write_results(
            "megatron_cache",
            {
                "args": vars(args),
                "pack_mb": round(size / harness.MB, 1),
                "documents": docs,
                "train_samples": samples,
                "seq_length": SEQ,
                "cache_files": written["prebuild"],
                "runs_s": {name: [round(t, 3) for t in ts] for name, ts in times.items()},
                "best_s": {name: round(t, 3) for name, t in best.items()},
                "best_mb_s": {name: round(rate, 1) for name, rate in rates.items()},
                "ratio_prebuild_vs_job_build": round(ratio, 3),
                "job_start_saved_s": round(saved, 3),
                "job_load_written": written["job_load"],
            },
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
        with contextlib.suppress(OSError):
            args.workdir.rmdir()  # only if now empty
    return 0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    sys.exit(main())
