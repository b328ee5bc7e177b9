"""Raw vendor file readers for the ingest stage: format detection, streaming and per-record decoding.

A reader yields ``[line, raw]`` units: ``line`` is the 1-based line number (parquet: 1-based row number),
``raw`` the undecoded line bytes (jsonl, txt) or the row dict (parquet); it holds no unit once handed out,
so that the caller can let go of a long line as soon as it is decoded. A decoder turns ``raw`` into
``(text, vendor_id, meta)`` or raises :class:`Reject` naming the reason.
"""

from __future__ import annotations

import codecs
import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import orjson
import zstandard

from workflow_scripts.core.cli import UserError
from workflow_scripts.core.fsio import open_binary

FORMATS = ("jsonl", "jsonl.gz", "jsonl.zst", "txt", "txt.gz", "txt.zst", "parquet")
PARQUET_BATCH_ROWS = 1024
SCAN = 1 << 20  # a long line or text is examined in slices of this many bytes or characters, never copied

Decoded = tuple[str, str | None, dict[str, Any]]


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


def iter_units(path: str, fmt: str) -> Iterator[list[Any]]:
    """Stream ``[line, raw]`` units of a file without loading it whole; unreadable data -> IngestError."""
    try:
        if fmt == "parquet":
            yield from _parquet_rows(path)
        else:
            with open_binary(path) as fh:
                yield from _Numbered(fh)
    except (OSError, EOFError, ValueError, zstandard.ZstdError) as exc:
        raise IngestError(f"{path}: cannot read as {fmt}: {exc}") from exc


class _Numbered:
    """``[n, item]`` for the items of an iterator, n from 1, holding none of them once handed out (as
    enumerate does: it keeps its last result for reuse)."""

    def __init__(self, items: Iterator[Any]) -> None:
        self._items = items
        self._n = 0

    def __iter__(self) -> _Numbered:
        return self

    def __next__(self) -> list[Any]:
        item = next(self._items)
        self._n += 1
        return [self._n, item]


def _parquet_rows(path: str) -> Iterator[list[Any]]:
    import pyarrow.parquet as pq  # lazy: keeps `import ingest` cheap for Snakefile parsing

    row = 0
    with pq.ParquetFile(path) as pf:
        for batch in pf.iter_batches(batch_size=PARQUET_BATCH_ROWS):
            for record in batch.to_pylist():
                row += 1
                yield [row, record]


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
