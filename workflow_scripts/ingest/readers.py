"""Raw vendor file readers for the ingest stage: format detection, streaming and per-record decoding.

A reader yields ``[line, raw]`` units: ``line`` is the 1-based line number (parquet: 1-based row number),
``raw`` the undecoded line bytes (jsonl, txt) or the row dict (parquet); it holds no unit once handed out,
so that the caller can let go of a long line as soon as it is decoded. A decoder turns ``raw`` into
``(text, vendor_id, meta)`` or raises :class:`Reject` naming the reason. Damaged data (a truncated or corrupt
gzip/zstd stream, a 0-byte compressed file, binary data, an unreadable parquet file or row group) ends a file
with one last unit whose ``raw`` is an :class:`Unreadable`: the line where the unreadable rest starts, with
the byte offset and the error.
"""

from __future__ import annotations

import codecs
import os
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
import zstandard

from workflow_scripts.core.cli import UserError
from workflow_scripts.core.fsio import open_binary, read_position

FORMATS = ("jsonl", "jsonl.gz", "jsonl.zst", "txt", "txt.gz", "txt.zst", "parquet")
PARQUET_BATCH_ROWS = 1024
SCAN = 1 << 20  # a long line or text is examined in slices of this many bytes or characters, never copied
SNIFF = 8192  # a text file's first bytes that must hold no NUL byte

Decoded = tuple[str, str | None, dict[str, Any]]
READ_ERRORS = (OSError, EOFError, ValueError, zlib.error, zstandard.ZstdError)


class IngestError(UserError):
    """Invalid input files or options for the ingest stage."""


class Reject(Exception):
    """A record that cannot be ingested."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _compression(name: str) -> str:
    """``gz``, ``zst`` or ``""`` from a file name, as fsio.open_binary decides it."""
    return next((ext for ext in ("gz", "zst") if name.endswith("." + ext)), "")


def resolve_format(path: str, fmt: str | None = None) -> str:
    """The format of ``path``: ``fmt`` if given (its compression must match the name), else by extension."""
    name = os.path.basename(path)
    if fmt in (None, "auto"):
        fmt = next((f for f in FORMATS if name.endswith("." + f)), None)
        if fmt is None:
            raise IngestError(f"{path}: cannot infer the format from the name (known: {', '.join(FORMATS)})")
    elif fmt not in FORMATS:
        raise IngestError(f"unknown format {fmt!r} (known: {', '.join(FORMATS)})")
    elif fmt.partition(".")[2] != _compression(name):
        raise IngestError(f"{path}: format {fmt!r} does not match the compression suffix of the name")
    return fmt


@dataclass(frozen=True)
class Unreadable:
    """The unreadable rest of a file. ``offset``: the byte of the file (compressed) reading had got to when it
    failed (parquet: the start of the failing row group, 0 for the whole file); ``data_offset``: where the
    rest starts in the decompressed data (``None`` for parquet); ``error``: one line saying what is wrong."""

    offset: int
    data_offset: int | None
    error: str

    def failure(self, path: str, fmt: str, line: int) -> IngestError:
        """The error of strict mode, naming the file, the offset and the reason."""
        where = f"at byte {self.offset} (line {line})"
        return IngestError(f"{path}: cannot read as {fmt} {where}: {self.error}")


def iter_units(path: str, fmt: str) -> Iterator[list[Any]]:
    """Stream ``[line, raw]`` units of a file without loading it whole; damaged data ends it with an
    :class:`Unreadable` unit, any other read failure (an I/O error) -> IngestError."""
    try:
        yield from _parquet_rows(path) if fmt == "parquet" else _lines(path)
    except READ_ERRORS as exc:
        raise IngestError(f"{path}: cannot read as {fmt}: {exc}") from exc


def _is_damage(exc: Exception) -> bool:
    """Whether a read error is about the data, not the system (which sets an errno: missing file, EIO)."""
    return not isinstance(exc, OSError) or exc.errno is None


def _describe(exc: Exception, path: str, what: str) -> str:
    """``truncated gzip stream: <error>``, ``corrupt parquet file: <error>``, ... in one line."""
    msg = " ".join(str(exc).removeprefix(f"{path}: ").split()) or type(exc).__name__
    if msg.startswith("truncated"):
        return msg
    return f"{'truncated' if isinstance(exc, EOFError) else 'corrupt'} {what}: {msg}"


def _lines(path: str) -> Iterator[list[Any]]:
    """The lines of a (possibly compressed) file; a partial last line before damage is not handed out, and
    a file that is no text at all (see :func:`_not_text`) is one unreadable rest from line 1."""
    what = {"gz": "gzip stream", "zst": "zstd stream"}.get(_compression(path), "data")
    with open_binary(path) as fh:
        lines = _Numbered(fh)
        try:
            problem = _not_text(path, fh, what)
            if problem is None:
                yield from lines
                return
            rest = Unreadable(0, 0, problem)
        except READ_ERRORS as exc:
            if not _is_damage(exc):
                raise
            rest = Unreadable(read_position(fh), lines.size, _describe(exc, path, what))
        yield [lines.n + 1, rest]


def _not_text(path: str, fh: Any, what: str) -> str | None:
    """Why a file cannot hold text lines, judged by its size and its first decoded bytes, or ``None``: a
    0-byte compressed file (a valid stream of nothing has a header), binary data (a NUL byte)."""
    if what != "data" and os.path.getsize(path) == 0:
        return f"empty file: 0 bytes is no {what}"
    nul = fh.peek(SNIFF)[:SNIFF].find(b"\0")
    return None if nul < 0 else f"binary data, not text (a NUL byte at byte {nul} of the data)"


class _Numbered:
    """``[n, item]`` for the items of an iterator, n from 1, holding none of them once handed out (as
    enumerate does: it keeps its last result for reuse); ``size`` sums the lengths of the items."""

    def __init__(self, items: Iterator[Any]) -> None:
        self._items = items
        self.n = self.size = 0

    def __iter__(self) -> _Numbered:
        return self

    def __next__(self) -> list[Any]:
        item = next(self._items)
        self.n += 1
        self.size += len(item)
        return [self.n, item]


def _parquet_rows(path: str) -> Iterator[list[Any]]:
    """The rows of a parquet file, one row group after the other so that a damaged one keeps those before."""
    import pyarrow.parquet as pq  # lazy: keeps `import ingest` cheap for Snakefile parsing

    row = offset = 0
    try:
        with pq.ParquetFile(path) as pf:
            for group in range(pf.num_row_groups):
                offset = _row_group_offset(pf.metadata.row_group(group))
                for batch in pf.iter_batches(batch_size=PARQUET_BATCH_ROWS, row_groups=[group]):
                    for record in batch.to_pylist():
                        row += 1
                        yield [row, record]
            return
    except READ_ERRORS as exc:
        if not _is_damage(exc):
            raise
        rest = Unreadable(offset, None, _describe(exc, path, "parquet file"))
    yield [row + 1, rest]


def _row_group_offset(group: Any) -> int:
    """The byte offset of a parquet row group: its first page."""
    chunks = [group.column(i) for i in range(group.num_columns)]
    return min(
        (c.dictionary_page_offset if c.has_dictionary_page else c.data_page_offset for c in chunks), default=0
    )


def make_decoder(fmt: str, text_keys: Sequence[str], id_key: str | None) -> Callable[[Any], Decoded]:
    """A function decoding one raw unit of format ``fmt``; see :func:`decode_fields` for the field rules."""
    kind = fmt.partition(".")[0]
    if kind == "txt":
        return decode_txt_line
    keys = tuple(text_keys)
    skip = frozenset(keys) | {id_key}

    def fields(obj: dict[str, Any]) -> Decoded:
        return decode_fields(obj, keys, id_key, skip)

    if kind == "parquet":
        return fields

    def json_line(raw: bytes) -> Decoded:
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise Reject(_json_error_reason(raw)) from None
        if not isinstance(obj, dict):
            raise Reject("not_object")
        return fields(obj)

    return json_line


def _json_error_reason(raw: bytes) -> str:
    if not raw or raw.isspace():
        return "blank_line"
    return "malformed_json" if is_utf8(raw) else "invalid_utf8"


def is_utf8(data: bytes) -> bool:
    """Whether ``data`` is valid UTF-8 (checked in slices: no decoded copy of a long line)."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    view = memoryview(data)
    try:
        for start in range(0, len(view), SCAN):
            decoder.decode(view[start : start + SCAN])
        decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        return False
    return True


def decode_txt_line(raw: bytes) -> Decoded:
    """One document per line: the line without its terminator, no vendor id, no metadata."""
    end = len(raw)
    while end and raw[end - 1] in b"\r\n":
        end -= 1
    try:
        return str(memoryview(raw)[:end], "utf-8"), None, {}
    except UnicodeDecodeError:
        raise Reject("invalid_utf8") from None


def decode_fields(
    obj: dict[str, Any], text_keys: tuple[str, ...], id_key: str | None, skip: frozenset[str | None]
) -> Decoded:
    """Text, vendor id and metadata of a vendor record.

    Text: the values of the ``text_keys`` present, in order, joined with a blank line ("\\n\\n"), blank ones
    skipped; no key present -> ``missing_text``, a present value that is not a string -> ``non_string_text``.
    Vendor id: a string (an int is converted), ``None``/absent -> ``None``, anything else -> ``invalid_id``.
    Meta: every other key of the record (``skip`` = text keys and id key).
    """
    parts = [obj[k] for k in text_keys if k in obj]
    if not parts:
        raise Reject("missing_text")
    if not all(isinstance(p, str) for p in parts):
        raise Reject("non_string_text")
    text = "\n\n".join([p for p in parts if p and not p.isspace()])
    vid = obj.get(id_key) if id_key else None
    if vid is not None and not isinstance(vid, str):
        if type(vid) is not int:
            raise Reject("invalid_id")
        vid = str(vid)
    return text, vid, {k: v for k, v in obj.items() if k not in skip}
