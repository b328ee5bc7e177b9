"""Crash-safe file output and transparent reading of compressed line files."""

from __future__ import annotations

import contextlib
import gzip
import io
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import orjson


def temp_sibling(path: Path) -> Path:
    """The one temporary name of ``path``: a rerun of the job that writes ``path`` (after a crash) reuses,
    and so replaces, what a killed run left there. It keeps the suffix (.zst, .gz)."""
    return path.with_name(f".tmp.{path.name}")


def fsync_path(path: Path) -> None:
    """Flush a file's (or a directory's entries') data to stable storage."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary sibling path; rename it onto ``path`` only if the block succeeds.

    Durable: the file is fsync'd before the rename and the directory after it, so that after a node crash
    (not only a process crash) ``path`` holds either the old or the complete new content, never an empty
    file (Lustre, ext4 with delayed allocation).
    """
    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_sibling(final)
    try:
        yield tmp
        fsync_path(tmp)
        os.replace(tmp, final)
        fsync_path(final.parent)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary sibling directory that replaces the directory ``path`` if the block succeeds."""
    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_sibling(final)
    old = final.with_name(f".old.{final.name}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        yield tmp
        fsync_path(tmp)
        if final.exists() or final.is_symlink():
            final.rename(old)
        tmp.rename(final)
        fsync_path(final.parent)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)


def write_if_changed(path: str | os.PathLike[str], data: bytes) -> bool:
    """Write ``data`` to ``path`` atomically unless it already holds exactly that; return whether it wrote.

    An unchanged file keeps its modification time, so the jobs that read it are not rerun.
    """
    final = Path(path)
    with contextlib.suppress(FileNotFoundError):
        if final.stat().st_size == len(data) and final.read_bytes() == data:
            return False
    with atomic_path(final) as tmp:
        tmp.write_bytes(data)
    return True


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
        return io.BufferedReader(ZstdFrameReader(name), 1 << 20)
    return open(name, "rb", buffering=1 << 20)


class ZstdFrameReader(io.RawIOBase):
    """Streaming zstd decompression that fails on a truncated file (python-zstandard's reader does not)."""

    def __init__(self, path: str) -> None:
        import zstandard

        self._path = path
        self._raw = open(path, "rb")  # noqa: SIM115 - closed in close()
        self._dctx = zstandard.ZstdDecompressor()
        self._dobj = self._dctx.decompressobj()
        self._pending = b""
        self._offset = 0
        self._frame_started = False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while self._offset == len(self._pending):
            chunk = self._raw.read(1 << 20)
            if not chunk:
                if self._frame_started and not self._dobj.eof:
                    raise OSError(f"{self._path}: truncated zstd stream (the last frame has no end)")
                return 0
            self._pending, self._offset = b"", 0
            while chunk:
                self._frame_started = True
                self._pending += self._dobj.decompress(chunk)
                chunk = b""
                if self._dobj.eof:  # a file may hold several frames
                    chunk = self._dobj.unused_data
                    self._dobj = self._dctx.decompressobj()
                    self._frame_started = bool(chunk)
        n = min(len(buffer), len(self._pending) - self._offset)
        buffer[:n] = memoryview(self._pending)[self._offset : self._offset + n]
        self._offset += n
        return n

    def close(self) -> None:
        self._raw.close()
        super().close()


class _GzipWriter(gzip.GzipFile):
    """Deterministic gzip output (no file name, no time in the header) that closes its file."""

    def __init__(self, path: str) -> None:
        self._raw = open(path, "wb")  # noqa: SIM115 - closed in close()
        super().__init__(filename="", mode="wb", fileobj=self._raw, mtime=0)

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._raw.close()


def open_binary_writer(path: str | os.PathLike[str], level: int = 3) -> IO[bytes]:
    """Open a file for binary writing, compressed as the name says (``.zst``, ``.gz``: deterministic)."""
    name = str(path)
    if name.endswith(".gz"):
        return _GzipWriter(name)
    if name.endswith(".zst"):
        import zstandard

        raw = open(name, "wb")  # noqa: SIM115 - closed through the wrapper
        return zstandard.ZstdCompressor(level=level).stream_writer(raw, closefd=True)
    return open(name, "wb", buffering=1 << 20)
