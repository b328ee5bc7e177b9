"""``snakepack lineage``: the documents a pack's steps read; the steps and checkpoints that read a document.

Usage::

    snakepack lineage --config results/train/main_1/main_1.yml --steps 5:8       # documents of steps 5..8
    snakepack lineage --config results/train/main_1/main_1.yml --doc 0:1234      # path 0's sequence 1234
    snakepack lineage --config C --plan results/plan.json --steps 5:8           # ... and their sources
    snakepack lineage --config C --plan results/plan.json --source-doc en_web_news_split_0007:12
    snakepack lineage --config C --plan results/plan.json --doc vendor_0003.jsonl.gz:5521  # a raw line
    snakepack lineage --config C --plan results/plan.json --hash 3f2a...e1      # a document's content hash
    snakepack lineage --config C --plan results/plan.json --text "the document's text"
    snakepack lineage --config C --plan results/plan.json --source en_web_news_split_0007   # how much read
    snakepack lineage --config C --plan results/plan.json --file vendor_0003.jsonl.gz
    snakepack lineage --config results/train/*/*.yml --plan results/plan.json --hash 3f2a...e1  # every pack

Each answer is JSON on standard output. ``--steps N:M`` (global steps, both included) lists every sequence
read with its path, its number in that ``.idx``, the tokens read of it and an excerpt (its first tokens,
decoded with the config's tokenizer); with ``--plan``, also the pack's document it belongs to, the
tokenized source, document and epoch it was read from (``sources``) and, from that source's lineage ledger
(``tokens.ledger``), its raw file and line (``raw``: ``FILE:LINE``, null where unknown) and content hash.
``--doc PATH:SEQ`` (``PATH``: the index in ``train_data_paths``, or the prefix itself) and
``--source-doc SOURCE:DOC`` (a tokenized source's name and document, with ``--plan``) give the global steps
that read it and the checkpoints in the config's ``save`` folder that have seen it (saved at or after its
first step). ``--doc FILE:LINE`` (a raw file, by name, and its line), ``--hash HEX`` and ``--text TEXT``
(whose hash is looked up) find the documents of the pack's sources in their ledgers, each answered as
``--source-doc``; a hash through the index ``snakemake lineage_index`` writes (``hash_index``: ``--index``,
by default ``tokenized/hash_index`` in ``--plan``'s folder) where it holds a source as it is, else (no
index, a ledger changed since) by reading the ledgers, as standard error says. ``--source NAME`` (a
tokenized source) and ``--file PATH`` (a raw file, by name: its documents in every source's ledger) say how
many of its documents the config's packs hold and how many the steps up to each checkpoint in ``save`` (and
up to the pack's end) have read (a document counts once, at the first step that reads a token of it:
``StepMap.first_steps``). A source tokenized before ledgers were written is a clear error for the queries by
raw file, hash or text, and has ``raw`` null in ``--steps``. The reading order is the trainer's (``steps``;
a Megatron-LM arguments file needs ``--plan``: ``steps.pack_config``). Several ``--config`` files (every
pack's: which packs hold a document) answer as ``packs``, one answer each with its ``config``; ``--steps``
there lists the packs whose steps the range overlaps, each with its part of the range.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from functools import cache, cached_property
from typing import Any

import numpy as np
import orjson

from workflow_scripts.core.cli import UserError
from workflow_scripts.core.indexed_dataset import IndexedDataset
from workflow_scripts.datapacks.plan import Plan
from workflow_scripts.lineage import hash_index
from workflow_scripts.lineage.sources import PackSources, document_of
from workflow_scripts.lineage.steps import StepMap, pack_config
from workflow_scripts.tokens.kinds import TokenizerFiles
from workflow_scripts.tokens.ledger import Ledger, text_hash
from workflow_scripts.train import checkpoint_dirs
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


def parse_doc(text: str, paths: list[str]) -> tuple[int | str, int]:
    """``PATH:SEQ`` as (path index, sequence), ``PATH`` an index or one of ``paths``; else ``FILE:LINE`` as
    (raw file, line)."""
    path, seq = split_number("--doc", text)
    if path.isdigit() and int(path) < len(paths):
        return int(path), seq
    if path in paths:
        return paths.index(path), seq
    return path, seq


def parse_hash(text: str) -> int:
    """A content hash: 16 hex digits (``tokens.ledger``)."""
    try:
        value = int(text, 16)
    except ValueError:
        value = -1
    if not 0 <= value < 1 << 64:
        raise UserError(f"--hash {text}: expected a document's content hash, 16 hex digits")
    return value


EXCERPT_TOKENS = 24  # the tokens an excerpt decodes


class Lineage:
    """One pack config's steps, with the plan's sources when given."""

    def __init__(self, cfg: RunConfig, plan: Plan | None) -> None:
        self.cfg, self.plan = cfg, plan

    @cached_property
    def steps(self) -> StepMap:
        """The pack's steps (built on first use: a pack that holds no document asked of needs none)."""
        return StepMap(self.cfg)

    @cache  # noqa: B019 (one per command)
    def doc_idx(self, path: int) -> Any:
        return IndexedDataset(self.cfg.train_paths[path]).doc_idx

    @cache  # noqa: B019
    def sources(self, path: int) -> PackSources:
        assert self.plan is not None
        return PackSources.of_plan(self.plan, os.path.basename(self.cfg.train_paths[path]))

    @cache  # noqa: B019
    def ledger(self, prefix: str) -> Ledger:
        return Ledger.read(prefix)

    @cache  # noqa: B019
    def dataset(self, path: int) -> IndexedDataset:
        return IndexedDataset(self.cfg.train_paths[path])

    @cache  # noqa: B019
    def tokenizer(self) -> Any:
        files = TokenizerFiles.resolve(self.cfg.vocab_file, merges=self.cfg.tokenizer[1])
        return files.load() if all(map(os.path.exists, files.paths)) else None

    def excerpt(self, path: int, sequence: int) -> str | None:
        """The sequence's first tokens as text (None without the config's tokenizer, or not its tokens)."""
        tokenizer = self.tokenizer()
        ids = [int(i) for i in self.dataset(path)[sequence][:EXCERPT_TOKENS]]
        if tokenizer is None or max(ids, default=0) >= tokenizer.vocab_size:  # not this tokenizer's tokens
            return None
        return tokenizer.decode(ids)

    def raw(self, prefix: str, doc: int) -> dict[str, Any]:
        """A tokenized source's document in its ledger: ``raw`` (FILE:LINE or None) and ``hash``."""
        try:
            where = self.ledger(prefix).position(doc)
        except UserError:  # tokenized before ledgers
            return {"raw": None, "hash": None}
        return {"raw": None if where.file is None else f"{where.file}:{where.line}", "hash": where.hash}

    def source_prefixes(self) -> dict[str, str]:
        """The tokenized sources the config's packs read: name -> prefix."""
        return {
            row["source"]: row["prefix"]
            for path in range(len(self.cfg.train_paths))
            for row in self.sources(path).rows
        }

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
                entry |= {"epoch": where.epoch, **self.raw(where.prefix, where.doc)}
            entry["excerpt"] = self.excerpt(r.path, r.sequence)
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

    def consumed(self, query: dict[str, Any], picked: Any, total: int) -> dict[str, Any]:
        """How many documents that ``picked(source, prefix, docs)`` (a mask of a plan row's source documents)
        names the pack holds, and how many distinct ones it has read by each checkpoint of its steps and by
        its end."""
        layout = checkpoint_dirs.of(self.cfg.trainer)
        saved = layout.steps(self.cfg.save) if self.cfg.save else []
        marks = [(layout.tag(s), s) for s in saved if self.cfg.offset < s <= self.cfg.end]
        names = {name: k for k, name in enumerate(sorted(self.source_prefixes()))}
        packs = []
        for path in range(len(self.cfg.train_paths)):
            sources, starts = self.sources(path), np.asarray(self.doc_idx(path)[:-1], np.int64)
            doc_step = np.minimum.reduceat(self.steps.first_steps(path), starts) if len(starts) else starts
            keys, steps, base = [np.empty(0, np.int64)], [np.empty(0, np.int64)], 0
            for k, row in enumerate(sources.rows):
                docs = sources.row_documents(k)
                mask = picked(row["source"], row["prefix"], docs)
                keys.append((names[row["source"]] << 40) + docs[mask])
                steps.append(doc_step[base : base + len(docs)][mask])
                base += len(docs)
            key, step = np.concatenate(keys), np.concatenate(steps)

            def read(last: int, key: np.ndarray = key, step: np.ndarray = step) -> dict[str, Any]:
                count = len(np.unique(key[step <= last]))
                return {"read": count, "fraction": round(count / total, 6) if total else None}

            packs.append(
                {
                    "path": self.cfg.train_paths[path],
                    "documents": len(key),
                    "distinct": len(np.unique(key)),
                    "checkpoints": [{"checkpoint": tag, "step": s, **read(s)} for tag, s in marks],
                    "end": {"step": self.cfg.end, **read(self.cfg.end)},
                }
            )
        return {**query, "documents": total, "packs": packs}

    def of_source(self, source: str) -> dict[str, Any]:
        prefix = self.source_prefixes().get(source)
        if prefix is None:
            raise UserError(f"--source {source}: not a source of {self.cfg.path}'s packs in the plan")
        total = IndexedDataset(prefix).num_documents
        return self.consumed(
            {"source": source}, lambda name, _, docs: np.full(len(docs), name == source), total
        )

    def of_file(self, file: str) -> dict[str, Any]:
        found = {prefix: self.ledger(prefix).of_file(file) for prefix in self.source_prefixes().values()}
        total = sum(len(docs) for docs in found.values())
        return self.consumed({"file": file}, lambda _, prefix, docs: np.isin(docs, found[prefix]), total)

    def of_matches(self, query: dict[str, Any], find: Any) -> dict[str, Any]:
        """Each document of the pack's sources that ``find(ledger)`` names, answered as ``--source-doc``."""
        prefixes = self.source_prefixes()
        return self.of_found(query, {source: find(self.ledger(prefixes[source])) for source in prefixes})

    def of_found(self, query: dict[str, Any], found: dict[str, list[int]]) -> dict[str, Any]:
        """The documents ``found`` names (source -> its documents), by source name, answered as
        ``--source-doc``."""
        prefixes, matches = self.source_prefixes(), []
        for source in sorted(found):
            for doc in found[source]:
                answer = self.of_source_document(source, doc)
                matches.append({**answer, **self.raw(prefixes[source], doc)})
        return {"query": query, "matches": matches}


def answer(args: argparse.Namespace, lineage: Lineage) -> dict[str, Any]:
    """The query's answer for one pack's config."""
    plan = lineage.plan
    if args.steps:
        return lineage.of_steps(*parse_range(args.steps))
    if args.doc:
        where, number = parse_doc(args.doc, lineage.cfg.train_paths)
        if isinstance(where, int):
            return lineage.of_sequence(where, number)
    given = [
        o for o in ("doc", "source_doc", "hash", "text", "source", "file") if getattr(args, o) is not None
    ]
    option = "--" + given[0].replace("_", "-")
    if plan is None:
        raise UserError(f"{option} needs --plan (the plan's rows map sources to the packs)")
    if args.doc:
        query = {"file": where, "line": number}
        return lineage.of_matches(query, lambda ledger: ledger.at_line(str(where), number))
    if args.source:
        return lineage.of_source(args.source)
    if args.file:
        return lineage.of_file(args.file)
    if args.hash or args.text is not None:
        value = parse_hash(args.hash) if args.hash else text_hash(args.text)
        index = args.index or os.path.join(os.path.dirname(args.plan), *hash_index.BESIDE_PLAN)
        found = hash_index.find(value, lineage.source_prefixes(), lineage.ledger, index)
        return lineage.of_found({"hash": f"{value:016x}"}, found)
    return lineage.of_source_document(*split_number("--source-doc", args.source_doc))


def answers(args: argparse.Namespace) -> dict[str, Any]:
    """One config's answer as it is; several configs' as ``packs``, one answer each (``--steps``: of the
    packs whose steps it overlaps, each its own part of the range)."""
    plan = Plan.read(args.plan) if args.plan else None
    runs = [Lineage(pack_config(config, plan), plan) for config in args.config]
    if len(runs) == 1:
        return answer(args, runs[0])
    if args.doc and isinstance(parse_doc(args.doc, runs[0].cfg.train_paths)[0], int):
        raise UserError(f"--doc {args.doc}: a sequence of one pack's .idx: give that pack's --config alone")
    if not args.steps:
        return {"packs": [{"config": run.cfg.path, **answer(args, run)} for run in runs]}
    first, last = parse_range(args.steps)
    packs = []
    for run in sorted(runs, key=lambda r: r.cfg.offset):
        lo, hi = max(first, run.cfg.offset + 1), min(last, run.cfg.end)
        if lo <= hi:
            packs.append({"config": run.cfg.path, **run.of_steps(lo, hi)})
    if not packs:
        spans = ", ".join(f"{r.cfg.offset + 1} to {r.cfg.end}" for r in runs)
        raise UserError(f"--steps {args.steps}: no step of the configs' packs ({spans})")
    return {"packs": packs}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--config",
        required=True,
        nargs="+",
        help="a pack's trainer config (GPT-NeoX YAML or Megatron-LM .args), or several: each pack answered",
    )
    parser.add_argument("--plan", help="plan.json (with its table beside it): name the sources")
    parser.add_argument(
        "--index", help="the hash index for --hash/--text (default: tokenized/hash_index beside --plan)"
    )
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--steps", help="N:M, global steps (both included)")
    what.add_argument(
        "--doc", help="PATH:SEQ, a sequence of the pack's .idx; or FILE:LINE, a raw line (with --plan)"
    )
    what.add_argument("--source-doc", help="SOURCE:DOC, a document of a tokenized source (with --plan)")
    what.add_argument("--hash", help="HEX, a document's content hash (with --plan)")
    what.add_argument("--text", help="TEXT, a document's whole text, found by its hash (with --plan)")
    what.add_argument("--source", help="NAME, a tokenized source: how much of it was read (with --plan)")
    what.add_argument("--file", help="PATH, a raw file: how much of it was read (with --plan)")
    args = parser.parse_args(argv)
    sys.stdout.buffer.write(orjson.dumps(answers(args), option=orjson.OPT_INDENT_2) + b"\n")
    return 0
