"""``snakepack train-data-cache``: a Megatron-LM pack's GPTDataset index caches, built on a CPU before the
pack's first segment (the ``train_data_cache`` rule), so that the GPU job finds them and builds none.

Usage (the rule's command)::

    snakepack train-data-cache --keys KEYS --world-size N \\
        --out results/train/P/data_cache.json [--python TRAINER_PYTHON]

Megatron-LM builds each dataset's index (document, sample and shuffle index: an epoch's worth and more for a
big pack) on rank 0 at the job's start, while every GPU of the job waits, and keeps it under
``--data-cache-path`` (``train.data_cache_dir``), named by a hash of what the dataset is (its prefix, its
number of samples, the seed, the sequence length, the tokenizer). This runs Megatron-LM's own builder
(``megatron_cache_build.py``) on the pack's arguments as its first segment gets them, at the iteration that
segment loads (the pack's first: its phase sizes the training dataset), so the names are the job's.

Megatron-LM's tree is ``$MEGATRON_LM``, as the launch files find it; its Python is ``--python``
(``train.megatron_python``), or else the interpreter of the ``torchrun`` on the PATH (its ``#!`` line), the
one the launch starts. The record lists the cache files, those written now, the datasets' sizes and the time.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence

from workflow_scripts.core.cli import UserError
from workflow_scripts.core.fsio import read_json, write_json
from workflow_scripts.train.configs import megatron
from workflow_scripts.train.segment import PackKeys

BUILDER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "megatron_cache_build.py")


class DataCacheError(UserError, RuntimeError):
    """A cache that cannot be built: the message says what is missing."""


def trainer_python(given: str | None, path: str | None = None) -> str:
    """The Python that runs Megatron-LM: ``given`` (``train.megatron_python``, its ``$VARIABLES`` those of the
    job's environment), or the interpreter named by the ``#!`` line of the ``torchrun`` on ``path`` (torch's
    launcher, installed with it)."""
    if given:
        expanded = os.path.expandvars(given)
        if "$" in expanded:
            raise DataCacheError(f"train.megatron_python {given}: a variable in it is not set in the job")
        return expanded
    torchrun = shutil.which("torchrun", path=path)
    if torchrun is None:
        raise DataCacheError(
            "no torchrun on the PATH to take Megatron-LM's Python from: set train.megatron_python to the "
            "Python that runs Megatron-LM (with torch and its requirements)"
        )
    with open(torchrun, "rb") as f:
        first = f.readline().decode("utf-8", "replace").strip()
    if not first.startswith("#!"):
        raise DataCacheError(f"{torchrun} has no #! line: set train.megatron_python")
    words = shlex.split(first[2:])
    if words and os.path.basename(words[0]) == "env":  # #!/usr/bin/env python3
        words = words[1:]
    if not words:
        raise DataCacheError(f"{torchrun}'s #! line names no interpreter: set train.megatron_python")
    return words[0]


def megatron_tree(env: dict[str, str]) -> str:
    """Megatron-LM's checkout: ``$MEGATRON_LM`` (what the launch files run ``pretrain_gpt.py`` from)."""
    tree = env.get("MEGATRON_LM")
    if not tree or not os.path.isfile(os.path.join(tree, "pretrain_gpt.py")):
        shown = f"MEGATRON_LM={tree}" if tree else "MEGATRON_LM is not set"
        raise DataCacheError(
            f"{shown}: export MEGATRON_LM as for the launch (a checkout of Megatron-LM with pretrain_gpt.py)"
        )
    return tree


def build(keys: PackKeys, world_size: int, python: str | None, env: dict[str, str]) -> dict:
    """Build the pack's caches in Megatron-LM's own code; its result (``megatron_cache_build.py``)."""
    if keys.trainer != "megatron":
        raise DataCacheError(f"{keys.pack}: train-data-cache builds Megatron-LM's caches (trainer megatron)")
    tree = megatron_tree(env)
    interpreter = trainer_python(python, env.get("PATH"))
    argv = megatron.argv(keys.config)  # the first segment's (--finetune changes no dataset)
    path = os.pathsep.join(filter(None, [tree, env.get("PYTHONPATH")]))
    job = {**env, "PYTHONPATH": path, "WORLD_SIZE": str(world_size), "RANK": "0", "LOCAL_RANK": "0"}
    with tempfile.TemporaryDirectory(prefix="data-cache-") as tmp:
        out = os.path.join(tmp, "result.json")
        command = [interpreter, BUILDER, "--iteration", str(keys.offset), "--out", out, "--", *argv]
        print(f"train-data-cache: {keys.pack} at iteration {keys.offset}", flush=True)
        print(f"  $ {shlex.join(command)}", flush=True)
        proc = subprocess.run(command, env=job, check=False)  # where the launch runs: the workflow's folder
        if proc.returncode != 0 or not os.path.exists(out):
            raise DataCacheError(
                f"{keys.pack}: Megatron-LM's dataset builder failed (exit {proc.returncode}, output above)"
            )
        result = read_json(out)
    return {"pack": keys.pack, "python": interpreter, "megatron_lm": tree, "world_size": world_size, **result}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", required=True, help="the pack's keys file")
    parser.add_argument("--out", required=True, help="the record (JSON)")
    parser.add_argument("--world-size", type=int, default=1, help="the job's ranks: nodes x gpus_per_node")
    parser.add_argument("--python", default=None, help="train.megatron_python (default: torchrun's)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    record = build(PackKeys.read(args.keys), args.world_size, args.python, dict(os.environ))
    record["wall_seconds"] = round(time.perf_counter() - started, 3)
    write_json(args.out, record)
    files, written = len(record["files"]), len(record["written"])
    print(f"train-data-cache: {record['pack']}: {files} cache files, {written} written now", flush=True)
    print(f"  in {record['data_cache_path']} ({record['seconds']} s)", flush=True)
    return 0
