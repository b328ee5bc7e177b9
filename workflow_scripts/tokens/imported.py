"""Bring your own tokens: verify a Megatron ``.bin/.idx`` made elsewhere and enter it at the count stage.

Usage::

    snakepack import-tokenized --prefix SRC --output-prefix OUT --tokenizer-model M.model \\
        [--eod auto|PIECE|id:N|none] [--bos PIECE|id:N]

``SRC`` is a prefix written by Megatron-LM's or GPT-NeoX's ``preprocess_data.py``, by an earlier run of
this workflow or by any tool with the same layout. It is checked, not trusted:

- every invariant of the index (``snakepack verify``);
- its dtype is the one the workflow writes for the model's vocabulary (packs never mix dtypes);
- every token id lies inside the model's vocabulary (the ``.bin`` is streamed);
- every document ends with the EOD the tokenize stage would append (``--eod``: the same rule, see
  ``snakepack tokenize --help``; ``none`` for data made without ``--append-eod``) and, with ``--bos``, starts
  with that token.

``OUT.bin`` and ``OUT.idx`` become relative symbolic links to the source (no copy) and ``OUT.stats.json``
records what the tokenize stage records (the tokenizer's identity, counts), so the count stage, the plan's
one-tokenizer check and the pack writer treat the prefix like one tokenized here. ``OUT.ledger.npz`` (the
lineage ledger, ``ledger``) links to the source's when it has one (tokenized by this workflow), else says
that each document's raw position and text are unknown.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from workflow_scripts.core.cli import UserError
from workflow_scripts.core.dataset_verify import verify
from workflow_scripts.core.fsio import write_json
from workflow_scripts.core.indexed_dataset import IndexedDataset, best_dtype
from workflow_scripts.tokens import kinds
from workflow_scripts.tokens.kinds import TokenizerFiles
from workflow_scripts.tokens.ledger import LEDGER_EXT, write_unknown
from workflow_scripts.tokens.reader import REASONS

if TYPE_CHECKING:
    from workflow_scripts.tokens.engines.base import Tokenizer

TOKEN_CHUNK = 1 << 24  # tokens checked per step (64 MB of int32)
DOC_CHUNK = 1 << 22  # documents checked per step


class TokenizedSourceError(UserError, ValueError):
    """A tokenized source that does not match what it was declared to be."""


def check_range(ds: IndexedDataset, vocab_size: int) -> None:
    """Every token id in ``[0, vocab_size)``, streamed in chunks."""
    tokens = ds.tokens[: ds.num_tokens]
    for start in range(0, len(tokens), TOKEN_CHUNK):
        chunk = tokens[start : start + TOKEN_CHUNK]
        bad = np.flatnonzero((chunk >= vocab_size) | (chunk < 0))
        if bad.size:
            at = start + int(bad[0])
            raise TokenizedSourceError(
                f"{ds.bin_path}: token {int(tokens[at])} at position {at} is outside the vocabulary of the "
                f"tokenizer (0..{vocab_size - 1}): was it made with another model?"
            )


def check_boundaries(ds: IndexedDataset, token: int, what: str, last: bool) -> None:
    """Every document's last (or first) token is ``token``."""
    n = ds.num_documents
    for a in range(0, n, DOC_CHUNK):
        b = min(a + DOC_CHUNK, n)
        seqs = ds.doc_idx[a + 1 : b + 1] - 1 if last else ds.doc_idx[a:b]
        lengths = ds.lengths[seqs].astype(np.int64)
        offsets = ds.pointers[seqs] // ds.itemsize + (lengths - 1 if last else 0)
        empty = np.flatnonzero(lengths == 0)
        if empty.size:
            raise TokenizedSourceError(
                f"{ds.idx_path}: document {a + int(empty[0])} ends in an empty sequence"
            )
        bad = np.flatnonzero(ds.tokens[offsets] != token)
        if bad.size:
            d = int(bad[0])
            raise TokenizedSourceError(
                f"{ds.prefix}: document {a + d} {'ends' if last else 'starts'} with token "
                f"{int(ds.tokens[offsets[d]])}, not the {what} {token} (set the source's eod/bos to what "
                "the data was made with)"
            )


def _relative_link(target: str, link: str) -> None:
    """``link`` -> ``target`` (relative), replacing an existing link atomically."""
    tmp = f"{link}.tmp"
    if os.path.lexists(tmp):
        os.unlink(tmp)
    os.symlink(os.path.relpath(os.path.abspath(target), os.path.dirname(os.path.abspath(link))), tmp)
    os.replace(tmp, link)


def import_prefix(source: str, output_prefix: str, tokenizer: Tokenizer, eod: str, bos: str | None) -> dict:
    """Verify ``source`` against ``tokenizer``; link it as ``output_prefix``; write and return its stats."""
    summary = verify(source)
    ds = IndexedDataset(source)
    expected = best_dtype(tokenizer.vocab_size)
    if ds.dtype != expected:
        raise TokenizedSourceError(
            f"{ds.idx_path}: tokens are {ds.dtype.name}; with a vocabulary of {tokenizer.vocab_size} the "
            f"workflow writes {expected.name}, and a pack cannot mix them"
        )
    check_range(ds, tokenizer.vocab_size)
    eod_id, eod_rule = (None, "none: the data has no EOD") if eod == "none" else tokenizer.eod(eod)
    if eod_id is not None:
        check_boundaries(ds, eod_id, "EOD", last=True)
    bos_id = None if bos is None else tokenizer.token_id(bos)
    if bos_id is not None:
        check_boundaries(ds, bos_id, "BOS", last=False)
    os.makedirs(os.path.dirname(os.path.abspath(output_prefix)), exist_ok=True)
    for ext in (".bin", ".idx"):
        _relative_link(source + ext, output_prefix + ext)
    if os.path.exists(source + LEDGER_EXT):
        _relative_link(source + LEDGER_EXT, output_prefix + LEDGER_EXT)
    else:
        write_unknown(output_prefix, summary["documents"])
    stats: dict[str, Any] = {
        "input": source,
        "output_prefix": output_prefix,
        "imported": True,
        "tokenizer_model": tokenizer.path,
        "tokenizer_type": tokenizer.kind,
        "tokenizer_merges": tokenizer.merges,
        "tokenizer_sha256": TokenizerFiles.of(tokenizer).sha256(),
        "vocab_size": tokenizer.vocab_size,
        "dtype": ds.dtype.name,
        "mode": "pretrain",
        "eod_id": eod_id,
        "eod_piece": tokenizer.piece(eod_id),
        "eod_rule": eod_rule,
        "bos_id": bos_id,
        "sft_markers": [],
        "docs_in": summary["documents"],
        "docs_out": summary["documents"],
        "rejected": dict.fromkeys(REASONS, 0),
        "tokens": summary["tokens"],
        "bytes": 0,
        "input_bytes": ds.bin_size,
    }
    write_json(output_prefix + ".stats.json", stats)
    return stats


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prefix", required=True, help="the source prefix (PREFIX.bin and PREFIX.idx)")
    parser.add_argument("--output-prefix", required=True, help="the linked prefix to write")
    kinds.add_arguments(parser, "the tokenizer the data was made with")
    parser.add_argument(
        "--eod", default="auto", help="EOD every document ends with: auto, a piece, id:N or none"
    )
    parser.add_argument(
        "--bos", help="BOS every document starts with: a piece or id:N (default: not checked)"
    )
    args = parser.parse_args(argv)
    stats = import_prefix(args.prefix, args.output_prefix, kinds.from_args(args).load(), args.eod, args.bos)
    print(
        f"imported {args.prefix}: {stats['docs_out']} documents, {stats['tokens']} tokens, "
        f"EOD {stats['eod_id']} ({stats['eod_rule']}) -> {args.output_prefix}"
    )
    return 0
