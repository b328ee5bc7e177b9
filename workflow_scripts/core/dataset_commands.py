"""The indexed-dataset commands: ``snakepack verify`` (every invariant), ``snakepack info`` (counts and dtype
as JSON) and ``snakepack merge`` (concatenate in the given order, with an optional JSON log). Each takes
dataset prefixes, or their ``.bin``/``.idx`` file names.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from workflow_scripts.core import indexed_dataset
from workflow_scripts.core.dataset_merge import merge
from workflow_scripts.core.dataset_verify import verify
from workflow_scripts.core.fsio import dumps_json, write_json
from workflow_scripts.core.progress import Progress


def _prefix(path: str) -> str:
    return path.removesuffix(".bin").removesuffix(".idx")


def verify_main(argv: Sequence[str] | None = None) -> int:
    """``snakepack verify PREFIX...``: check every invariant of each dataset; a line and status 2 for each
    that fails (the CLI's user-error convention), after checking them all."""
    parser = argparse.ArgumentParser(description="Check every .bin/.idx invariant of each dataset.")
    parser.add_argument("prefixes", nargs="+", metavar="PREFIX", help="dataset prefixes (or their .bin/.idx)")
    failed = 0
    for prefix in map(_prefix, parser.parse_args(argv).prefixes):
        try:
            s = verify(prefix)
        except indexed_dataset.IndexedDatasetError as e:
            print(f"{parser.prog}: error: {e}", file=sys.stderr)
            failed += 1
        else:
            print(
                f"ok {prefix}: {s['documents']} documents, {s['sequences']} sequences, "
                f"{s['tokens']} tokens, {s['dtype']}"
            )
    return 2 if failed else 0


def info_main(argv: Sequence[str] | None = None) -> int:
    """``snakepack info PREFIX``: counts and dtype as JSON."""
    parser = argparse.ArgumentParser(description="Print a dataset's counts and dtype as JSON.")
    parser.add_argument("prefix", metavar="PREFIX")
    prefix = _prefix(parser.parse_args(argv).prefix)
    summary = indexed_dataset.IndexedDataset(prefix).summary()
    sys.stdout.buffer.write(dumps_json({"prefix": prefix, **summary}))
    return 0


def merge_main(argv: Sequence[str] | None = None) -> int:
    """``snakepack merge --output OUT [--log FILE] [--list FILE] IN...``: concatenate in the given order."""
    parser = argparse.ArgumentParser(description="Merge datasets in the given order (Megatron's add_index).")
    parser.add_argument("--output", required=True, metavar="OUT", help="output prefix")
    parser.add_argument("--log", metavar="FILE", help="write a JSON merge log here")
    parser.add_argument("--list", metavar="FILE", help="read input prefixes from FILE, one a line, first")
    parser.add_argument("inputs", nargs="*", metavar="IN", help="input prefixes, merged in this order")
    args = parser.parse_args(argv)
    listed = [line for line in Path(args.list).read_text().splitlines() if line] if args.list else []
    inputs = listed + args.inputs
    if not inputs:
        parser.error("give input prefixes or --list FILE")
    for p in inputs:  # a missing or truncated input named before anything reads it
        indexed_dataset.check_complete(p)
    fingerprints = [indexed_dataset.fingerprint(p) for p in inputs] if args.log else []
    total = sum(indexed_dataset.file_size(indexed_dataset.bin_path(p)) for p in inputs)
    with Progress(f"merge {args.output}", total) as progress:
        summary = merge(inputs, args.output, progress)
        run = progress.summary(summary["documents"], summary["documents"], 0)
    if args.log:
        for entry, fp in zip(summary["inputs"], fingerprints, strict=True):
            entry.update(fp)
        write_json(args.log, {"output": args.output, **summary, "run": run})
    print(
        f"merged {len(inputs)} inputs into {args.output}: {summary['documents']} documents, "
        f"{summary['sequences']} sequences, {summary['tokens']} tokens"
    )
    return 0
