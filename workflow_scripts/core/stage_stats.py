"""A stage's ``stats.json``: the per-job stats summed, with the balance in = out + dropped checked."""

from __future__ import annotations

import argparse
import os
from collections import Counter
from typing import Any

from workflow_scripts.core.fsio import read_json, write_json


class UnbalancedStats(ValueError):
    """Documents in do not equal documents out plus documents dropped."""


def check_balance(stats: dict[str, Any], where: str, dropped_key: str = "rejected") -> None:
    """Raise ``UnbalancedStats`` unless ``docs_in == docs_out + sum(stats[dropped_key])``.

    The one balance check of every stage: a failure is a bug, never a user error, so it keeps its traceback.
    """
    dropped = sum(stats[dropped_key].values())
    if stats["docs_in"] != stats["docs_out"] + dropped:
        raise UnbalancedStats(
            f"{where}: docs_in {stats['docs_in']} != docs_out {stats['docs_out']} + {dropped_key} {dropped}"
        )


def combine(stage: str, parts: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Sum ``docs_in``, ``docs_out`` and ``rejected`` (by reason) over the parts; keep each part's totals."""
    rejected: Counter[str] = Counter()
    for name, part in parts.items():
        check_balance(part, name)
        rejected.update(part["rejected"])
    total = {
        "stage": stage,
        "docs_in": sum(p["docs_in"] for p in parts.values()),
        "docs_out": sum(p["docs_out"] for p in parts.values()),
        "rejected": dict(sorted(rejected.items())),
        "parts": {
            name: {k: p[k] for k in ("docs_in", "docs_out", "rejected")} for name, p in sorted(parts.items())
        },
    }
    check_balance(total, stage)
    return total


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], fromfile_prefix_chars="@")
    parser.add_argument("--stage", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("inputs", nargs="+", help="stats.json files or directories holding one, or @LIST")
    args = parser.parse_args(argv)
    parts = {}
    for path in args.inputs:
        file = os.path.join(path, "stats.json") if os.path.isdir(path) else path
        parts[os.path.basename(os.path.normpath(path))] = read_json(file)
    write_json(args.output, combine(args.stage, parts))
