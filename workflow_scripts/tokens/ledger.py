"""The lineage ledger of a tokenized prefix: ``{prefix}.ledger.npz`` beside its ``.bin/.idx``, written by
tokenize (``LedgerBuilder``) and by the import of a tokenized source (``write_unknown``), read by lineage
(``Ledger``).

For each document of the ``.idx``, in order, its raw input file and line (the ingested record's ``source``
and ``line`` members: the vendor file's name and 1-based line, or parquet row) and its content hash. A numpy
``.npz`` (no pickled objects) of five arrays:

- ``files``: the raw files' names (str), each once, in the order first read;
- ``run_file`` (int32), ``run_line`` (int64), ``run_docs`` (int64): runs of documents, each ``run_docs``
  documents on consecutive lines of ``files[run_file]`` from ``run_line``; ``run_file`` -1 (and
  ``run_line`` 0) where the raw position is unknown (a record without them, an imported source);
- ``hashes`` (uint64, one a document): ``xxhash.xxh3_64`` (seed 0) of the document's text, the record's
  ``text`` member as UTF-8, as tokenized (before BOS/EOD); empty when the texts are unknown (an imported
  source). ``text_hash`` computes it; its hex form (16 digits) is what ``snakepack lineage --hash`` takes.

The tokenize quarantine's records are not documents, so they break a run (a record that is not tokenized
leaves a gap in its file's lines).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import xxhash

from workflow_scripts.core.cli import UserError
from workflow_scripts.core.fsio import atomic_path

LEDGER_EXT = ".ledger.npz"
FIELDS = ("files", "run_file", "run_line", "run_docs", "hashes")


def text_hash(data: str | bytes | memoryview) -> int:
    """A document's content hash: xxh3-64 of its UTF-8 text."""
    return xxhash.xxh3_64_intdigest(data.encode() if isinstance(data, str) else data)


def long_text_hash(text: str, chunk: int = 1 << 20) -> int:
    """``text_hash`` of a long text, encoded a piece at a time (no copy of the whole)."""
    h = xxhash.xxh3_64()
    for i in range(0, len(text), chunk):
        h.update(text[i : i + chunk].encode())
    return h.intdigest()


def utf8_hashes(blob: bytes, sizes: Sequence[int]) -> np.ndarray:
    """``text_hash`` of each text of UTF-8 texts laid back to back (``sizes``: their bytes)."""
    view, out, at, digest = memoryview(blob), [], 0, xxhash.xxh3_64_intdigest
    for size in sizes:
        out.append(digest(view[at : at + size]))
        at += size
    return np.array(out, np.uint64)


def str_hashes(texts: Sequence[str]) -> np.ndarray:
    """``text_hash`` of each text."""
    return np.fromiter((xxhash.xxh3_64_intdigest(t.encode()) for t in texts), np.uint64, len(texts))


class LedgerBuilder:
    """A tokenized prefix's ledger, document by document, in the ``.idx``'s order."""

    def __init__(self) -> None:
        self.files: dict[str, int] = {}
        self.run_file: list[int] = []
        self.run_line: list[int] = []
        self.run_docs: list[int] = []
        self.hashes: list[np.ndarray] = []

    def add(self, sources: Sequence[str | None], lines: Sequence[int], hashes: np.ndarray) -> None:
        """Documents with their raw files and lines (None or -1: unknown) and hashes; array work per
        document, a loop per run."""
        n = len(sources)
        if not len(lines) == len(hashes) == n:
            raise ValueError(f"{n} raw files, {len(lines)} lines and {len(hashes)} hashes")
        self.hashes.append(np.asarray(hashes, np.uint64))
        if not n:
            return
        files, raw = np.empty(n, object), np.asarray(lines, np.int64)
        files[:] = sources
        unknown = (files == None) | (raw < 0)  # noqa: E711 (element by element)
        new = np.ones(n, bool)
        new[1:] = (files[1:] != files[:-1]) | (raw[1:] != raw[:-1] + 1) | (unknown[1:] != unknown[:-1])
        new[1:] &= ~(unknown[1:] & unknown[:-1])  # an unknown stretch is one run
        starts = np.flatnonzero(new).tolist()
        for start, stop in zip(starts, [*starts[1:], n], strict=True):
            file = -1 if unknown[start] else self.files.setdefault(files[start], len(self.files))
            line = 0 if file < 0 else int(raw[start])
            if not self.run_docs or not self._continues(file, line):
                self.run_file.append(file)
                self.run_line.append(line)
                self.run_docs.append(0)
            self.run_docs[-1] += stop - start

    def _continues(self, file: int, line: int) -> bool:
        """Whether a document at ``file:line`` continues the last run."""
        last = self.run_file[-1]
        return last == file and (file < 0 or line == self.run_line[-1] + self.run_docs[-1])

    def write(self, prefix: str) -> None:
        """Write ``{prefix}.ledger.npz`` (atomically)."""
        hashes = np.concatenate(self.hashes) if self.hashes else np.empty(0, np.uint64)
        assert len(hashes) == sum(self.run_docs), "a hash for every document"
        save(prefix, list(self.files), self.run_file, self.run_line, self.run_docs, hashes)


def save(
    prefix: str,
    files: list[str],
    run_file: Sequence[int],
    run_line: Sequence[int],
    run_docs: Sequence[int],
    hashes: np.ndarray,
) -> None:
    with atomic_path(prefix + LEDGER_EXT) as tmp, open(tmp, "wb") as f:
        np.savez(
            f,
            files=np.asarray(files, dtype=np.str_),
            run_file=np.asarray(run_file, np.int32),
            run_line=np.asarray(run_line, np.int64),
            run_docs=np.asarray(run_docs, np.int64),
            hashes=np.asarray(hashes, np.uint64),
        )


def write_unknown(prefix: str, documents: int) -> None:
    """The ledger of ``documents`` documents whose raw positions and texts are unknown (an import)."""
    runs = 1 if documents else 0
    save(prefix, [], [-1] * runs, [0] * runs, [documents] * runs, np.empty(0, np.uint64))


def ledger_path(prefix: str) -> str | None:
    """The ledger of ``prefix``: beside it, or beside the prefix its ``.bin`` links to (a count link, an
    imported source's link), link by link; None when there is none."""
    seen = set()
    while prefix not in seen:
        seen.add(prefix)
        if os.path.exists(prefix + LEDGER_EXT):
            return prefix + LEDGER_EXT
        bin_path = prefix + ".bin"
        if not os.path.islink(bin_path):
            return None
        target = os.path.join(os.path.dirname(bin_path), os.readlink(bin_path))
        prefix = os.path.normpath(target).removesuffix(".bin")
    return None


@dataclass(frozen=True)
class Position:
    """A tokenized document's raw file and line (None: unknown) and hash (16 hex digits; None: unknown)."""

    file: str | None
    line: int | None
    hash: str | None


class Ledger:
    """A tokenized prefix's ledger (``Ledger.read``): its runs read at once, its hashes when first asked for
    (a lookup by raw line reads no hash)."""

    def __init__(self, path: str, arrays: dict[str, np.ndarray]) -> None:
        self.path = path
        self.files = [str(f) for f in arrays["files"]]
        self.run_file, self.run_line = arrays["run_file"], arrays["run_line"]
        self.run_docs = arrays["run_docs"]
        self.run_first = np.concatenate([[0], np.cumsum(self.run_docs)]).astype(np.int64)

    @classmethod
    def read(cls, prefix: str) -> Ledger:
        path = ledger_path(prefix)
        if path is None:
            raise UserError(
                f"{prefix}: no lineage ledger ({LEDGER_EXT}) beside it or the files it links to: it was "
                "tokenized before tokenize wrote ledgers; run the workflow again to re-tokenize it"
            )
        with np.load(path, allow_pickle=False) as npz:
            return cls(path, {name: npz[name] for name in FIELDS if name != "hashes"})

    @functools.cached_property
    def hashes(self) -> np.ndarray:
        with np.load(self.path, allow_pickle=False) as npz:
            return npz["hashes"]

    @property
    def documents(self) -> int:
        return int(self.run_first[-1])

    def hex(self, doc: int) -> str | None:
        return f"{int(self.hashes[doc]):016x}" if len(self.hashes) else None

    def position(self, doc: int) -> Position:
        """Where document ``doc`` came from."""
        if not 0 <= doc < self.documents:
            raise UserError(f"{self.path}: no document {doc} (it has {self.documents})")
        k = int(np.searchsorted(self.run_first, doc, side="right")) - 1
        file = int(self.run_file[k])
        if file < 0:
            return Position(None, None, self.hex(doc))
        return Position(self.files[file], int(self.run_line[k]) + doc - int(self.run_first[k]), self.hex(doc))

    def at_line(self, file: str, line: int) -> list[int]:
        """The documents read from line ``line`` of the raw file named ``file`` (or its base name)."""
        names = {file, os.path.basename(file)}
        wanted = [k for k, name in enumerate(self.files) if name in names]
        runs = np.flatnonzero(
            np.isin(self.run_file, wanted) & (self.run_line <= line) & (line < self.run_line + self.run_docs)
        )
        return [int(self.run_first[k] + line - self.run_line[k]) for k in runs]

    def of_file(self, file: str) -> np.ndarray:
        """The documents read from the raw file named ``file`` (or its base name), ascending."""
        names = {file, os.path.basename(file)}
        wanted = np.isin(self.run_file, [k for k, name in enumerate(self.files) if name in names])
        runs = [np.arange(self.run_first[k], self.run_first[k + 1]) for k in np.flatnonzero(wanted)]
        return np.concatenate(runs) if runs else np.empty(0, np.int64)

    def with_hash(self, value: int) -> list[int]:
        """The documents whose hash is ``value``."""
        return np.flatnonzero(self.hashes == np.uint64(value)).tolist()
