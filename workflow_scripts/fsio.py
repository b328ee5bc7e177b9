"""Crash-safe file output and transparent reading of compressed line files."""

from __future__ import annotations

import contextlib
import gzip
import io
import os
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import orjson


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary sibling path; rename it onto ``path`` only if the block succeeds."""
    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.with_name(f".tmp{os.getpid()}.{final.name}")  # keeps the suffix (.zst, .gz)
    try:
        yield tmp
        os.replace(tmp, final)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def dumps_json(obj: Any) -> bytes:
    """Deterministic, human-readable JSON bytes (sorted keys, two-space indent, trailing newline)."""
    return (
        orjson.dumps(obj, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS | orjson.OPT_SERIALIZE_NUMPY)
        + b"\n"
    )


def write_json(path: str | os.PathLike[str], obj: Any) -> None:
    """Write ``obj`` as JSON to ``path`` atomically."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(dumps_json(obj))


def read_json(path: str | os.PathLike[str]) -> Any:
    """Read a JSON file."""
    return orjson.loads(Path(path).read_bytes())


def open_binary(path: str | os.PathLike[str]) -> IO[bytes]:
    """Open a possibly compressed file (``.gz``, ``.zst``) for streaming binary reading."""
    name = str(path)
    if name.endswith(".gz"):
        return gzip.open(name, "rb")
    if name.endswith(".zst"):
        import zstandard

        raw = open(name, "rb")  # noqa: SIM115 - closed through the wrapper
        return io.BufferedReader(zstandard.ZstdDecompressor().stream_reader(raw, closefd=True), 1 << 20)
    return open(name, "rb", buffering=1 << 20)


def open_binary_writer(path: str | os.PathLike[str], level: int = 3) -> IO[bytes]:
    """Open a file for binary writing, zstd-compressed when the name ends in ``.zst``."""
    name = str(path)
    if name.endswith(".zst"):
        import zstandard

        raw = open(name, "wb")  # noqa: SIM115 - closed through the wrapper
        return zstandard.ZstdCompressor(level=level).stream_writer(raw, closefd=True)
    return open(name, "wb", buffering=1 << 20)
