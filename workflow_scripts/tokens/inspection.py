"""Inspect a tokenized dataset: documents as text, pieces and ids; per-document token counts (seed 003).

Usage::

    snakepack inspect PREFIX [--tokenizer-model M.model] [-n 100] [--counts-out FILE]

``PREFIX`` may also be given as ``PREFIX.bin`` or ``PREFIX.idx``. Prints the first ``-n`` documents (ids
only without a model; text and pieces too with one; control tokens such as EOD or SFT markers are shown as
their pieces inside the text). ``--counts-out`` writes every document's token count, one per line in
document order (seed 003's ``count_tokens.py``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, TextIO

import numpy as np

from workflow_scripts.core.fsio import atomic_path
from workflow_scripts.core.indexed_dataset import IndexedDataset
from workflow_scripts.tokens import kinds

if TYPE_CHECKING:
    from workflow_scripts.tokens.engines.base import Tokenizer


def strip_suffix(prefix: str) -> str:
    """``PREFIX`` from ``PREFIX``, ``PREFIX.bin`` or ``PREFIX.idx``."""
    return prefix[:-4] if prefix.endswith((".bin", ".idx")) else prefix


def document_token_counts(ds: IndexedDataset) -> np.ndarray:
    """Tokens of every document (the sum of its sequences' lengths)."""
    ends = np.zeros(ds.num_sequences + 1, np.int64)
    np.cumsum(ds.lengths, out=ends[1:])
    return ends[ds.doc_idx[1:]] - ends[ds.doc_idx[:-1]]


def format_document(index: int, ids: np.ndarray, tokenizer: Tokenizer | None) -> Iterator[str]:
    """The lines that show one document."""
    token_ids = [int(i) for i in ids]
    yield f"=== document {index}: {len(token_ids)} tokens ==="
    if tokenizer is not None:
        yield "--- text ---"
        yield tokenizer.render(token_ids)
        yield "--- pieces ---"
        yield " ".join(str(tokenizer.piece(i)) for i in token_ids)
    yield "--- ids ---"
    yield " ".join(map(str, token_ids))


def show(ds: IndexedDataset, n: int, tokenizer: Tokenizer | None, out: TextIO) -> None:
    """Write the first ``n`` documents of ``ds`` to ``out``."""
    for d in range(min(n, ds.num_documents)):
        for line in format_document(d, ds.document(d), tokenizer):
            out.write(line + "\n")


COUNTS_CHUNK = 1 << 20


def write_counts(ds: IndexedDataset, path: str) -> None:
    """Write every document's token count, one per line, atomically (a million counts at a time)."""
    counts = document_token_counts(ds)
    with atomic_path(path) as tmp, open(tmp, "w", encoding="ascii") as f:
        for a in range(0, counts.size, COUNTS_CHUNK):
            np.savetxt(f, counts[a : a + COUNTS_CHUNK], fmt="%d")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("prefix", metavar="PREFIX", help="dataset prefix (or its .bin / .idx)")
    kinds.add_arguments(parser, "the data's tokenizer, to show text and pieces", required=False)
    parser.add_argument("-n", type=int, default=100, help="documents to show (default %(default)s; 0: none)")
    parser.add_argument("--counts-out", metavar="FILE", help="write per-document token counts here")
    args = parser.parse_args(argv)
    ds = IndexedDataset(strip_suffix(args.prefix))
    tokenizer = kinds.from_args(args).load() if args.tokenizer_model else None
    if args.counts_out:
        write_counts(ds, args.counts_out)
    show(ds, args.n, tokenizer, sys.stdout)
    return 0
