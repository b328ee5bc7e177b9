"""Dedup step 4, one job per shard: write the kept documents (lines byte-identical) and the removed ones.

A removed document is written as its record plus ``duplicate_of`` (id of the document its cluster keeps),
``cluster`` (clusters are named by the id of the document they keep: the same id, stable when unrelated
data is added) and ``dedup_reason`` (``exact`` or ``near``). Per-shard statistics go to a JSON file.
"""

from __future__ import annotations

import argparse
import contextlib
import os
from collections import Counter
from pathlib import Path
from typing import IO, Any

import orjson

from workflow_scripts.core.fsio import atomic_path, open_binary_writer, write_json
from workflow_scripts.core.progress import Progress
from workflow_scripts.dedup.shards import group, iter_lines


def _writer(stack: contextlib.ExitStack, path: str | os.PathLike[str]) -> IO[bytes]:
    """Atomic binary writer, compressed as the name says."""
    return stack.enter_context(open_binary_writer(stack.enter_context(atomic_path(path))))


def filter_shard(
    shard: str | os.PathLike[str],
    assign: str | os.PathLike[str],
    output: str | os.PathLike[str],
    removed: str | os.PathLike[str],
    stats: str | os.PathLike[str],
) -> dict[str, Any]:
    """Split ``shard`` into kept and removed documents as its assignment file says; return the statistics."""
    name = Path(shard).name
    plan = orjson.loads(Path(assign).read_bytes())
    if plan["shard"] != name:
        raise ValueError(f"{assign} is the assignment of {plan['shard']}, not of {name}")
    todo = {
        row: (d, r, d)
        for row, r, d in zip(plan["rows"], plan["reason"], plan["duplicate_of"], strict=True)
        if r != "keep"
    }
    count: Counter[str] = Counter()
    by: dict[str, dict[str, Counter[str]]] = {"by_lang": {}, "by_source": {}}
    plain = not str(shard).endswith((".gz", ".zst"))
    with contextlib.ExitStack() as stack:
        progress = stack.enter_context(
            Progress(f"dedup filter {name}", os.path.getsize(shard) if plain else None)
        )
        kept_out = _writer(stack, output)
        removed_out = _writer(stack, removed)
        row = -1
        for line in iter_lines(shard):
            row += 1
            progress.advance(len(line), 1)
            record = orjson.loads(line)
            fate = todo.pop(row, None)
            outcome = "kept" if fate is None else fate[1]
            for key, field in (("by_lang", "lang"), ("by_source", "source")):
                by[key].setdefault(str(record.get(field)), Counter()).update(("in", outcome))
            count.update(("docs_in", outcome))
            count["bytes_in"] += len(line)
            if fate is None:
                count["bytes_out"] += len(line)
                kept_out.write(line)
            else:
                count["bytes_removed"] += len(line)
                record.update(duplicate_of=fate[2], cluster=fate[0], dedup_reason=fate[1])
                removed_out.write(orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE))
            del line, record  # not held while the next line is read
        if todo:
            raise ValueError(f"{assign}: rows {sorted(todo)[:5]} beyond the {row + 1} documents of {name}")
        run = progress.summary(count["docs_in"], count["kept"], count["exact"] + count["near"])
    result = {
        "shard": name,
        "group": group(name),
        "docs_in": count["docs_in"],
        "docs_out": count["kept"],
        "removed": {"exact": count["exact"], "near": count["near"]},
        "bytes_in": count["bytes_in"],
        "bytes_out": count["bytes_out"],
        "bytes_removed": count["bytes_removed"],
        **{
            key: {
                k: {"in": c["in"], "out": c["kept"], "exact": c["exact"], "near": c["near"]}
                for k, c in sorted(groups.items())
            }
            for key, groups in by.items()
        },
        "run": run,
    }
    write_json(stats, result)
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input", required=True, help="input shard")
    parser.add_argument("--assign", required=True, help="its {stem}.assign.json from the cluster step")
    parser.add_argument("--output", required=True, help="deduplicated shard to write (same name, other dir)")
    parser.add_argument("--removed", required=True, help="removed documents (jsonl, compressed by name)")
    parser.add_argument("--stats", required=True, help="per-shard statistics JSON to write")
    args = parser.parse_args(argv)
    if Path(args.output).resolve() == Path(args.input).resolve():
        parser.error("--output must not overwrite --input")
    s = filter_shard(args.input, args.assign, args.output, args.removed, args.stats)
    print(f"dedup filter: {args.input}: removed {s['removed']} -> {args.output}")
