"""Crash-safe file output and transparent reading of compressed line files."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
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


@functools.cache
def _sync_file_range() -> Any:
    return getattr(ctypes.CDLL(None, use_errno=True), "sync_file_range", None)


def start_writeback(fd: int, offset: int, length: int) -> None:
    """Start writing a range of a file to storage, without waiting (Linux's ``sync_file_range``; nothing
    where there is none): the ``fsync`` that makes a large file durable then has little left to wait for.
    Advisory: a write-back error is the ``fsync``'s to raise."""
    call = _sync_file_range()
    if call is not None:
        call(ctypes.c_int(fd), ctypes.c_int64(offset), ctypes.c_int64(length), ctypes.c_uint(2))  # WRITE


def sync_filesystem(path: str | os.PathLike[str]) -> None:
    """Flush what was written to the file system holding ``path`` to stable storage, in one call
    (``syncfs``; ``sync`` where the C library or the kernel has none): after many files written with
    ``durable=False``, instead of an ``fsync`` of each file and of its directory. It flushes the whole file
    system (other jobs' writes on a shared node too). A write-back error raises, as ``fsync`` would."""
    fd = os.open(path, os.O_RDONLY)
    try:
        syncfs = getattr(ctypes.CDLL(None, use_errno=True), "syncfs", None)
        if syncfs is None:
            os.sync()
        elif syncfs(fd) != 0:
            error = ctypes.get_errno()
            if error != errno.ENOSYS:
                raise OSError(error, f"syncfs: {os.strerror(error)}", os.fspath(path))
            os.sync()
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str], durable: bool = True) -> Iterator[Path]:
    """Yield a temporary sibling path; rename it onto ``path`` only if the block succeeds.

    Durable: the file is fsync'd before the rename and the directory after it, so that after a node crash
    (not only a process crash) ``path`` holds either the old or the complete new content, never an empty
    file (Lustre, ext4 with delayed allocation). With ``durable=False`` the caller flushes instead
    (``sync_filesystem`` once after many files, before it writes what says they are done).
    """
    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_sibling(final)
    try:
        yield tmp
        if durable:
            fsync_path(tmp)
        os.replace(tmp, final)
        if durable:
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


def read_position(fh: IO[bytes]) -> int:
    """How far into its file a reader from :func:`open_binary` has read: for ``.gz``/``.zst``, in compressed
    bytes (what the decompressor has taken in, so past the decoded data it handed out)."""
    if isinstance(fh, gzip.GzipFile):
        return fh.fileobj.tell()
    raw = getattr(fh, "raw", None)
    return raw.compressed_position() if isinstance(raw, ZstdFrameReader) else fh.tell()


MAX_READ = 1 << 20  # the most decompressed bytes one read of a .zst file returns


class _ZstdFrameTracker:
    """Follows the frame and block headers of a zstd stream as its compressed bytes pass, skipping (not
    decoding) the payloads, to tell whether the stream ends on a frame boundary (RFC 8878: frames and
    skippable frames, each block's 3-byte header gives its compressed size)."""

    def __init__(self) -> None:
        self._skip = 0  # payload bytes to pass over
        self._want = 4  # header bytes to collect, then handed to _step
        self._buf = b""
        self._step = self._magic
        self._checksum = 0

    def at_boundary(self) -> bool:
        """Whether the bytes fed so far are whole frames (true for none at all)."""
        return self._step == self._magic and not self._buf and not self._skip

    def feed(self, data: bytes) -> None:
        pos, size = 0, len(data)
        while pos < size:
            if self._skip:
                take = min(self._skip, size - pos)
                self._skip -= take
                pos += take
                continue
            take = min(self._want - len(self._buf), size - pos)
            self._buf += data[pos : pos + take]
            pos += take
            if len(self._buf) == self._want:
                header, self._buf = self._buf, b""
                self._step(int.from_bytes(header, "little"))

    def _next(self, skip: int, want: int, step: Any) -> None:
        self._skip, self._want, self._step = skip, want, step

    def _magic(self, magic: int) -> None:
        if magic == 0xFD2FB528:
            self._next(0, 1, self._descriptor)
        elif magic & 0xFFFFFFF0 == 0x184D2A50:
            self._next(0, 4, lambda size: self._next(size, 4, self._magic))
        else:  # not zstd: the decompressor says so
            self._next(1 << 62, 4, self._magic)

    def _descriptor(self, fhd: int) -> None:
        single = fhd >> 5 & 1
        fields = (0 if single else 1) + (0, 1, 2, 4)[fhd & 3] + (single, 2, 4, 8)[fhd >> 6]
        self._checksum = 4 if fhd >> 2 & 1 else 0
        self._next(fields, 3, self._block)

    def _block(self, header: int) -> None:
        size = 1 if header >> 1 & 3 == 1 else header >> 3  # RLE blocks hold one byte
        if header & 1:  # the last block of the frame
            self._next(size + self._checksum, 4, self._magic)
        else:
            self._next(size, 3, self._block)


class _TrackedSource:
    """A file whose bytes, as they are read, go through a _ZstdFrameTracker."""

    def __init__(self, raw: IO[bytes], tracker: _ZstdFrameTracker) -> None:
        self._raw, self._tracker = raw, tracker

    def read(self, size: int = -1) -> bytes:
        data = self._raw.read(size)
        self._tracker.feed(data)
        return data


class ZstdFrameReader(io.RawIOBase):
    """Streaming zstd decompression of every frame of a file, at most ``MAX_READ`` bytes per read (a
    zstd bomb costs no memory), that fails on a truncated file (python-zstandard's reader does not)."""

    def __init__(self, path: str) -> None:
        import zstandard

        self._path = path
        self._raw = open(path, "rb")  # noqa: SIM115 - closed in close()
        self._tracker = _ZstdFrameTracker()
        self._reader = zstandard.ZstdDecompressor().stream_reader(
            _TrackedSource(self._raw, self._tracker), read_across_frames=True, closefd=False
        )

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        n = self._reader.readinto(view[:MAX_READ])
        if n == 0 and len(view):
            if self._raw.read(1):
                raise OSError(f"{self._path}: data after the last zstd frame was not decoded")
            if not self._tracker.at_boundary():
                raise OSError(f"{self._path}: truncated zstd stream (the last frame has no end)")
        return n

    def compressed_position(self) -> int:
        """The compressed bytes taken from the file so far."""
        return self._raw.tell()

    def close(self) -> None:
        if not self.closed:
            self._reader.close()
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
