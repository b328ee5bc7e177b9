"""The user's cache of derived data that is a pure function of its name and slow to recompute:
``$XDG_CACHE_HOME/snakepack/v{FORMAT}`` (``~/.cache/snakepack/v1``). A name carries everything its content
depends on (a content hash, library versions); ``FORMAT`` is bumped when the way entries are written
changes, and a write removes the directories of other versions.

Bounded: after each write the entries beyond ``$SNAKEPACK_CACHE_MAX_MB`` (default ``DEFAULT_MAX_MB``) are
removed, least recently used first (a read marks an entry used). A missing or read-only home only costs the
time: reads and writes that fail are skipped.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from workflow_scripts.core.fsio import atomic_path

if TYPE_CHECKING:
    import numpy as np

FORMAT = 1
DEFAULT_MAX_MB = 256
MAX_MB_VARIABLE = "SNAKEPACK_CACHE_MAX_MB"


def location(environ: Mapping[str, str] = os.environ) -> Path:
    """The cache directory of this format version."""
    home = environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(home) / "snakepack" / f"v{FORMAT}"


CACHE = location()


def bound() -> int:
    """The cache's size bound in bytes, from ``$SNAKEPACK_CACHE_MAX_MB``."""
    value = os.environ.get(MAX_MB_VARIABLE, "").strip()
    if not value:
        return DEFAULT_MAX_MB * 2**20
    try:
        return int(float(value) * 2**20)
    except ValueError:
        raise ValueError(f"{MAX_MB_VARIABLE}={value!r}: not a number of MB") from None


def read(name: str) -> bytes | None:
    """The cached content of ``name``, or None; a hit marks the entry used."""
    path = CACHE / name
    try:
        data = path.read_bytes()
    except OSError:
        return None
    with contextlib.suppress(OSError):
        os.utime(path)
    return data


def write(name: str, data: bytes) -> None:
    """Cache ``data`` as ``name`` (atomically: a concurrent reader sees all of it or nothing), then keep the
    cache within its bound."""
    limit = bound()
    with contextlib.suppress(OSError), atomic_path(CACHE / name) as tmp:
        tmp.write_bytes(data)
    with contextlib.suppress(OSError):
        _evict(limit)


def _evict(limit: int) -> None:
    """Remove other format versions, then the least recently used entries until the rest fit ``limit``."""
    if CACHE.name == f"v{FORMAT}" and CACHE.parent.name == "snakepack":  # our own layout only
        for other in CACHE.parent.glob("v*"):
            if other != CACHE and other.name[1:].isdigit() and other.is_dir():
                shutil.rmtree(other, ignore_errors=True)
    entries = []
    for entry in os.scandir(CACHE):
        with contextlib.suppress(OSError):
            if entry.is_file(follow_symlinks=False):
                stat = entry.stat(follow_symlinks=False)
                entries.append((stat.st_mtime_ns, stat.st_size, entry.path))
    total = sum(size for _, size, _ in entries)
    for _, size, path in sorted(entries):
        if total <= limit:
            break
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        total -= size


def flags(name: str, size: int, compute: Callable[[], np.ndarray]) -> np.ndarray:
    """A boolean table of ``size`` entries: cached as bits (``name``), else computed and cached."""
    import numpy as np  # here: the commands that use no table do not pay numpy's import

    packed = read(name)
    if packed is not None and len(packed) == (size + 7) // 8:
        return np.unpackbits(np.frombuffer(packed, np.uint8), count=size).astype(bool)
    table = compute()
    write(name, np.packbits(table).tobytes())
    return table
