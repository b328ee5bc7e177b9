"""``snakepack lineage``: the documents a pack's steps read; the steps and checkpoints that read a document.

Usage::

    snakepack lineage --config results/train/main_1/main_1.yml --steps 5:8       # documents of steps 5..8
    snakepack lineage --config results/train/main_1/main_1.yml --doc 0:1234      # path 0's sequence 1234
    snakepack lineage --config C --plan results/plan.json --steps 5:8           # ... and their sources
    snakepack lineage --config C --plan results/plan.json --source-doc en_web_news_split_0007:12

Each answer is JSON on standard output. ``--steps N:M`` (global steps, both included) lists every sequence
read with its path, its number in that ``.idx`` and the tokens read of it; with ``--plan``, also the pack's
document it belongs to and the tokenized source, document and epoch it was read from (``sources``).
``--doc PATH:SEQ`` (``PATH``: the index in ``train_data_paths``, or the prefix itself) and
``--source-doc SOURCE:DOC`` (a tokenized source's name and document, with ``--plan``) give the global steps
that read it and the checkpoints in the config's ``save`` folder that have seen it (saved at or after its
first step). The reading order is the trainer's (``steps``).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from functools import cache
from typing import Any

import orjson

from workflow_scripts.core.cli import UserError
from workflow_scripts.core.indexed_dataset import IndexedDataset
from workflow_scripts.datapacks.plan import Plan
from workflow_scripts.lineage.sources import PackSources, document_of
from workflow_scripts.lineage.steps import StepMap
from workflow_scripts.train import checkpoint_dirs
from workflow_scripts.train.reference.config import load_config
from workflow_scripts.train.reference.run_config import RunConfig


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


def split_number(option: str, text: str) -> tuple[str, int]:
    """``NAME:N`` as (NAME, N)."""
    name, sep, number = text.rpartition(":")
    if not sep or not name or not number.isdigit():
        raise UserError(f"{option} {text}: expected NAME:NUMBER")
    return name, int(number)


def parse_doc(text: str, paths: list[str]) -> tuple[int, int]:
    """``PATH:SEQ`` as (path index, sequence); ``PATH`` an index or one of ``paths``."""
    path, seq = split_number("--doc", text)
    if path.isdigit() and int(path) < len(paths):
        return int(path), seq
    if path in paths:
        return paths.index(path), seq
    raise UserError(f"--doc {text}: {path} is not one of train_data_paths ({', '.join(paths)})")


class Lineage:
    """One pack config's steps, with the plan's sources when given."""

    def __init__(self, cfg: RunConfig, plan: Plan | None) -> None:
        self.cfg, self.plan, self.steps = cfg, plan, StepMap(cfg)

    @cache  # noqa: B019 (one per command)
    def doc_idx(self, path: int) -> Any:
        return IndexedDataset(self.cfg.train_paths[path]).doc_idx

    @cache  # noqa: B019
    def sources(self, path: int) -> PackSources:
        assert self.plan is not None
        return PackSources.of_plan(self.plan, os.path.basename(self.cfg.train_paths[path]))

    def seen(self, path: int, sequences: Sequence[int]) -> dict[str, Any]:
        read = sorted({s for seq in sequences for s in self.steps.steps(path, seq)})
        layout = checkpoint_dirs.of(self.cfg.trainer)
        saved = layout.steps(self.cfg.save) if self.cfg.save else []
        return {"steps": read, "checkpoints": [layout.tag(s) for s in saved if read and s >= read[0]]}

    def of_steps(self, first: int, last: int) -> dict[str, Any]:
        documents = []
        for r in self.steps.sequences(first, last):
            entry: dict[str, Any] = {
                "path": self.cfg.train_paths[r.path],
                "sequence": r.sequence,
                "tokens": r.tokens,
            }
            if self.plan is not None:
                doc = document_of(self.doc_idx(r.path), r.sequence)
                where = self.sources(r.path).source_of(doc)
                entry |= {"document": doc, "source": where.source, "source_document": where.doc}
                entry["epoch"] = where.epoch
            documents.append(entry)
        return {"steps": [first, last], "documents": documents}

    def of_sequence(self, path: int, sequence: int) -> dict[str, Any]:
        return {"path": self.cfg.train_paths[path], "sequence": sequence, **self.seen(path, [sequence])}

    def of_source_document(self, source: str, doc: int) -> dict[str, Any]:
        packs = []
        for path in range(len(self.cfg.train_paths)):
            docs = self.sources(path).pack_documents(source, doc)
            doc_idx = self.doc_idx(path)
            sequences = [s for d in docs for s in range(int(doc_idx[d]), int(doc_idx[d + 1]))]
            packs.append(
                {"path": self.cfg.train_paths[path], "documents": docs, **self.seen(path, sequences)}
            )
        return {"source": source, "source_document": doc, "packs": packs}


def answer(args: argparse.Namespace) -> dict[str, Any]:
    plan = Plan.read(args.plan) if args.plan else None
    lineage = Lineage(load_config([args.config]), plan)
    if args.steps:
        return lineage.of_steps(*parse_range(args.steps))
    if args.doc:
        return lineage.of_sequence(*parse_doc(args.doc, lineage.cfg.train_paths))
    if plan is None:
        raise UserError("--source-doc needs --plan (the plan's rows map sources to the packs)")
    return lineage.of_source_document(*split_number("--source-doc", args.source_doc))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", required=True, help="the pack's trainer config (GPT-NeoX YAML)")
    parser.add_argument("--plan", help="plan.json (with its table beside it): name the sources")
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--steps", help="N:M, global steps (both included)")
    what.add_argument("--doc", help="PATH:SEQ, a sequence of the pack's .idx")
    what.add_argument("--source-doc", help="SOURCE:DOC, a document of a tokenized source (with --plan)")
    args = parser.parse_args(argv)
    sys.stdout.buffer.write(orjson.dumps(answer(args), option=orjson.OPT_INDENT_2) + b"\n")
    return 0
