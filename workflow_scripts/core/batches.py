"""Shard batches: the per-shard stages run as one job per batch of a group's shards, and a batch job redoes
only the members whose inputs, outputs or recipe changed (docs/scale.md).

A batch is the shards ``k * n`` to ``(k + 1) * n - 1`` of a group (n = ``shards_per_job``). Its job keeps a
record per member (the recipe, and the size and time of each input and output) in a state file that is not
a declared output: Snakemake removes a job's declared outputs before it runs, so the record outlives a rerun,
a failure or a kill, and a member with a matching record and untouched files is not redone.
"""

from __future__ import annotations

import math
import os
import shlex
from collections.abc import Iterable, Sequence
from pathlib import Path

import orjson

from workflow_scripts.core import naming
from workflow_scripts.core.fsio import atomic_path

Identity = list[list[int]]  # [size, mtime_ns] of each file


def batch_of(shard: str, per_batch: int) -> int:
    """The batch of a shard (name or file) of an ingested group."""
    return int(naming.parse_shard(shard)["split"]) // per_batch


def shard_files(folder: str) -> list[str]:
    """The names of the shard files in a group's ingest folder (named by the group), in order."""
    pattern = naming.shard_file_pattern(os.path.basename(os.path.normpath(folder)))
    return sorted(name for name in os.listdir(folder) if pattern.fullmatch(name))


def manifest(stage_dir: str, group: str, batch: int | str, suffix: str = ".json") -> str:
    """A batch job's manifest (``.json``, its declared output) or record (``.state``) in ``stage_dir``."""
    return f"{stage_dir}/_batches/{group}.{batch}{suffix}"


def manifest_of(stage_dir: str, shard: str, per_batch: int) -> str:
    """The manifest of the batch job of ``stage_dir`` that covers ``shard`` (a name or file)."""
    return manifest(stage_dir, naming.shard_group(shard), batch_of(shard, per_batch))


def group_shards(folder: str) -> tuple[str, ...]:
    """The shard files (paths) in a group's ingest folder, in order."""
    return tuple(f"{folder}/{name}" for name in shard_files(folder))


def group_batches(folder: str, per_batch: int) -> dict[int, list[str]]:
    """The shard files (paths) of each batch of a group's ingest folder."""
    return by_batch(group_shards(folder), per_batch)


def members(shards: Iterable[str], batch: int | str, per_batch: int) -> list[str]:
    """The shards (names or files, as given) of batch ``batch``, in order."""
    return by_batch(shards, per_batch).get(int(batch), [])


def by_batch(shards: Iterable[str], per_batch: int) -> dict[int, list[str]]:
    """The shards (names or files, as given) of each batch, in order: one pass for every batch of a group."""
    found: dict[int, list[str]] = {}
    for s in sorted(shards):
        found.setdefault(batch_of(s, per_batch), []).append(s)
    return found


def total_size(paths: Iterable[str]) -> int:
    """The files' total size in bytes."""
    return sum(os.stat(path).st_size for path in paths)


def runtime_minutes(shards: Iterable[str], mb_per_minute: float, threads: int) -> int:
    """A batch job's time limit in minutes: its shard files' size at a conservative one-core rate, shared by
    its threads (its members run side by side)."""
    return 1 + math.ceil(total_size(shards) / 2**20 / mb_per_minute / threads)


def threads_for(shards: Iterable[str], threads: int, mb_per_thread: float) -> int:
    """A batch job's threads: one per ``mb_per_thread`` MB of its shard files, ``threads`` at most (a small
    batch leaves the other cores to its neighbours; no output depends on it)."""
    return max(1, min(threads, math.ceil(total_size(shards) / 1e6 / mb_per_thread)))


def job_args(
    stage_dir: str,
    shards: str,
    group: str,
    batch: int | str,
    per_batch: int,
    *,
    inputs: Sequence[str],
    outputs: Sequence[str],
    member_log: str,
    command: Sequence[str],
) -> str:
    """The options of ``snakepack batch`` (``workflow_scripts/batch.py``) for batch ``batch`` of ``group``
    in ``stage_dir`` (``shards``: the ingest folder of every group): its shards, state and manifest, and each
    member's inputs, outputs, log and command as templates, ``{group}`` filled in here and ``{shard}`` left
    for the member."""

    def fill(items: Sequence[str]) -> list[str]:
        return [item.replace("{group}", group) for item in items]

    state = manifest(stage_dir, group, batch, ".state")
    options = ["--shards-dir", f"{shards}/{group}", "--batch", str(batch), "--per-batch", str(per_batch)]
    options += ["--manifest", manifest(stage_dir, group, batch), "--state", state]
    options += ["--member-log", *fill([member_log])]
    options += [x for path in fill(inputs) for x in ("--input", path)]
    options += [x for path in fill(outputs) for x in ("--output", path)]
    return shlex.join([*options, "--", *fill(command)])


def identity(paths: Sequence[str]) -> Identity | None:
    """Each file's size and modification time; None when one is missing."""
    found = []
    for path in paths:
        try:
            info = os.stat(path)
        except FileNotFoundError:
            return None
        found.append([info.st_size, info.st_mtime_ns])
    return found


class State:
    """The record of a batch's finished members, kept in ``path`` (rewritten atomically after each)."""

    def __init__(self, path: str | os.PathLike[str], recipe: str) -> None:
        self.path = Path(path)
        self.recipe = recipe
        saved = orjson.loads(self.path.read_bytes()) if self.path.exists() else {}
        self.done: dict[str, dict[str, Identity]] = (
            saved.get("members", {}) if saved.get("recipe") == recipe else {}
        )

    def is_current(self, name: str, inputs: Sequence[str], outputs: Sequence[str]) -> bool:
        """Whether ``name`` was made by this recipe from these inputs and its outputs are untouched."""
        record = self.done.get(name)
        return (
            record is not None
            and record["inputs"] == identity(inputs)
            and record["outputs"] == identity(outputs)
        )

    def record(self, name: str, inputs: Sequence[str], outputs: Sequence[str]) -> None:
        """Record a finished member; its outputs must all exist."""
        made = identity(outputs)
        if made is None:
            missing = [p for p in outputs if not os.path.exists(p)]
            raise RuntimeError(f"{name}: the command ended without writing {', '.join(missing)}")
        self.done[name] = {"inputs": identity(inputs) or [], "outputs": made}
        with atomic_path(self.path) as tmp:
            tmp.write_bytes(
                orjson.dumps({"recipe": self.recipe, "members": self.done}, option=orjson.OPT_SORT_KEYS)
            )
