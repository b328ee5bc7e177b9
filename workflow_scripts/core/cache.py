"""The user's cache of derived data that is a pure function of its name and slow to recompute:
``$XDG_CACHE_HOME/snakepack`` (``~/.cache/snakepack``). A name carries everything its content depends on
(a content hash, library versions). A missing or read-only home only costs the time: reads and writes
that fail are skipped.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from workflow_scripts.core.fsio import atomic_path

if TYPE_CHECKING:
    import numpy as np

CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "snakepack"


def read(name: str) -> bytes | None:
    """The cached content of ``name``, or None."""
    try:
        return (CACHE / name).read_bytes()
    except OSError:
        return None


def write(name: str, data: bytes) -> None:
    """Cache ``data`` as ``name`` (atomically: a concurrent reader sees all of it or nothing)."""
    with contextlib.suppress(OSError), atomic_path(CACHE / name) as tmp:
        tmp.write_bytes(data)


def flags(name: str, size: int, compute: Callable[[], np.ndarray]) -> np.ndarray:
    """A boolean table of ``size`` entries: cached as bits (``name``), else computed and cached."""
    import numpy as np  # here: the commands that use no table do not pay numpy's import

    packed = read(name)
    if packed is not None and len(packed) == (size + 7) // 8:
        return np.unpackbits(np.frombuffer(packed, np.uint8), count=size).astype(bool)
    table = compute()
    write(name, np.packbits(table).tobytes())
    return table
