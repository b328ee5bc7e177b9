"""``snakepack lineage``: the documents a pack's steps read; the steps and checkpoints that read a document.

Usage::

    snakepack lineage --config results/train/main_1/main_1.yml --steps 5:8      # documents of steps 5..8
    snakepack lineage --config results/train/main_1/main_1.yml --doc 0:1234     # path 0's document 1234

Each answer is JSON on standard output. ``--steps N:M`` (global steps, both included) lists every document
read with its path, its number in that ``.idx`` and the tokens read of it. ``--doc PATH:DOC`` (``PATH``: the
index in ``train_data_paths``, or the prefix itself) gives the global steps that read it and the
checkpoints in the config's ``save`` folder that have seen it (saved at or after its first step). The
reading order is the trainer's (``steps``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import orjson

from workflow_scripts.core.cli import UserError
from workflow_scripts.lineage.steps import StepMap
from workflow_scripts.train import checkpoint_dirs
from workflow_scripts.train.reference.config import load_config


def parse_range(text: str) -> tuple[int, int]:
    """``N:M`` or ``N`` as (first, last) global steps."""
    first, _, last = text.partition(":")
    try:
        lo, hi = int(first), int(last or first)
    except ValueError:
        raise UserError(f"--steps {text}: expected N:M (global steps)") from None
    if hi < lo:
        raise UserError(f"--steps {text}: the last step is before the first")
    return lo, hi


def parse_doc(text: str, paths: list[str]) -> tuple[int, int]:
    """``PATH:DOC`` as (path index, document); ``PATH`` an index or one of ``paths``."""
    path, sep, doc = text.rpartition(":")
    if not sep or not doc.isdigit():
        raise UserError(f"--doc {text}: expected PATH:DOC (a train_data_paths index or prefix, a number)")
    if path.isdigit() and int(path) < len(paths):
        return int(path), int(doc)
    if path in paths:
        return paths.index(path), int(doc)
    raise UserError(f"--doc {text}: {path} is not one of train_data_paths ({', '.join(paths)})")


def answer(args: argparse.Namespace) -> dict:
    cfg = load_config([args.config])
    steps = StepMap(cfg)
    if args.steps:
        first, last = parse_range(args.steps)
        reads = steps.documents(first, last)
        return {
            "steps": [first, last],
            "documents": [{"path": cfg.train_paths[r.path], "doc": r.doc, "tokens": r.tokens} for r in reads],
        }
    path, doc = parse_doc(args.doc, cfg.train_paths)
    read = steps.steps(path, doc)
    saved = checkpoint_dirs.of(cfg.trainer).steps(cfg.save) if cfg.save else []
    return {
        "path": cfg.train_paths[path],
        "doc": doc,
        "steps": read,
        "checkpoints": [checkpoint_dirs.of(cfg.trainer).tag(s) for s in saved if read and s >= read[0]],
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", required=True, help="the pack's trainer config (GPT-NeoX YAML)")
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--steps", help="N:M, global steps (both included)")
    what.add_argument("--doc", help="PATH:DOC, a document of the pack")
    args = parser.parse_args(argv)
    sys.stdout.buffer.write(orjson.dumps(answer(args), option=orjson.OPT_INDENT_2) + b"\n")
    return 0
