"""A single-file container of named numpy arrays plus JSON metadata, written atomically and read by mmap.

Layout: ``MAGIC``, the arrays (each 64-byte aligned, C order), the JSON header, its length (``<u8``),
``MAGIC``. The header sits at the end so that arrays can be streamed in chunks while they are produced.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import math
import mmap
import os
import resource
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import numpy as np
import orjson

from workflow_scripts.core.fsio import atomic_path

MAGIC = b"SNKDEDUP"
ALIGN = 64


class StoreWriter:
    """Arrays written whole (``add``) or appended in chunks along axis 0 (``append``), and ``meta``."""

    def __init__(self, fh: IO[bytes], meta: dict[str, Any]) -> None:
        self.meta = meta
        self._fh = fh
        self._arrays: dict[str, dict[str, Any]] = {}
        self._open: str | None = None
        self._missing = 0  # cells still to come of the array being extended
        fh.write(MAGIC)

    def append(self, name: str, chunk: np.ndarray) -> None:
        """Append ``chunk`` to array ``name``; the chunks of one array must come in consecutive calls."""
        chunk = np.ascontiguousarray(chunk)
        entry = self._arrays.get(name)
        if entry is None:
            self._check_complete()
            self._fh.write(b"\0" * (-self._fh.tell() % ALIGN))
            entry = {"dtype": chunk.dtype.str, "shape": [0, *chunk.shape[1:]], "offset": self._fh.tell()}
            self._arrays[name] = entry
            self._open = name
        elif self._open != name or (entry["dtype"], entry["shape"][1:]) != (
            chunk.dtype.str,
            list(chunk.shape[1:]),
        ):
            raise ValueError(f"array {name!r}: chunks must be consecutive, of one dtype and row shape")
        self._fh.write(chunk.tobytes())
        entry["shape"][0] += chunk.shape[0]

    def extend(self, name: str, chunk: np.ndarray, shape: tuple[int, ...]) -> None:
        """Append the cells of ``chunk`` (in C order, any number) to array ``name`` of the final ``shape``: an
        array written in pieces that need not be whole rows. It must be complete before the next one."""
        entry = self._arrays.get(name)
        if entry is None:
            self._check_complete()
            self._fh.write(b"\0" * (-self._fh.tell() % ALIGN))
            entry = {"dtype": chunk.dtype.str, "shape": list(shape), "offset": self._fh.tell()}
            self._arrays[name] = entry
            self._open, self._missing = name, math.prod(shape)
        elif self._open != name or entry["dtype"] != chunk.dtype.str:
            raise ValueError(f"array {name!r}: pieces must be consecutive and of one dtype")
        if chunk.size > self._missing:
            raise ValueError(f"array {name!r}: more cells than its shape {entry['shape']}")
        self._fh.write(np.ascontiguousarray(chunk).tobytes())
        self._missing -= chunk.size

    def _check_complete(self) -> None:
        if self._missing:
            raise ValueError(f"array {self._open!r}: {self._missing} cells missing")

    def add(self, name: str, array: np.ndarray) -> None:
        """Write a whole array."""
        if name in self._arrays:
            raise ValueError(f"array {name!r} written twice")
        self.append(name, np.asarray(array))
        self._open = None

    def finish(self) -> None:
        self._check_complete()
        header = orjson.dumps({"arrays": self._arrays, "meta": self.meta}, option=orjson.OPT_SORT_KEYS)
        self._fh.write(header + struct.pack("<Q", len(header)) + MAGIC)


@contextlib.contextmanager
def write_store(path: str | os.PathLike[str], meta: dict[str, Any]) -> Iterator[StoreWriter]:
    """A StoreWriter for ``path``; the file appears, complete, only if the block succeeds."""
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        store = StoreWriter(fh, dict(meta))
        yield store
        store.finish()


_open_maps: collections.OrderedDict[Store, None] = collections.OrderedDict()


@functools.cache
def max_open_maps() -> int:
    """Memory maps held at once: each holds a file descriptor and counts to vm.max_map_count, so at most
    256, and at most half of this process's limit on open files."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return 256 if soft == resource.RLIM_INFINITY else max(8, min(256, soft // 2))


class Store:
    """Read-only view of a container: ``store.meta`` and ``store[name]`` (a memory map).

    At most ``max_open_maps()`` stores keep their map: the least recently used one drops it (it closes once
    no array viewing it is left), so one job can read 100,000 stores under the default limits on open
    files and memory maps.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        size = self.path.stat().st_size
        with open(self.path, "rb") as fh:
            if fh.read(len(MAGIC)) != MAGIC:
                raise ValueError(f"{path}: not a dedup store")
            fh.seek(size - 8 - len(MAGIC))
            (length,) = struct.unpack("<Q", fh.read(8))
            if fh.read(len(MAGIC)) != MAGIC:
                raise ValueError(f"{path}: truncated dedup store")
            fh.seek(size - 8 - len(MAGIC) - length)
            header = orjson.loads(fh.read(length))
        self.meta: dict[str, Any] = header["meta"]
        self._arrays: dict[str, dict[str, Any]] = header["arrays"]
        self._map: mmap.mmap | None = None

    def __getitem__(self, name: str) -> np.ndarray:
        """Array ``name``, a read-only view of the file (one memory map per file, made on first use)."""
        entry = self._arrays[name]
        dtype, shape = np.dtype(entry["dtype"]), tuple(entry["shape"])
        if self._map is None:
            with open(self.path, "rb") as fh:
                self._map = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
            if len(_open_maps) >= max_open_maps():
                oldest, _ = _open_maps.popitem(last=False)
                oldest._map = None
        _open_maps[self] = None
        _open_maps.move_to_end(self)
        count = int(np.prod(shape))
        return np.frombuffer(self._map, dtype=dtype, count=count, offset=entry["offset"]).reshape(shape)
