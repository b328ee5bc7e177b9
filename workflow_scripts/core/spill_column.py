"""An append-only 1-D integer column whose memory is bounded: it spills to an anonymous temporary file.

The indexed-dataset builder keeps its sequence lengths and document index in two of these, so that its
memory does not grow with the documents it writes; ``ColumnChunks`` gives a column to ``write_index``.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from typing import IO

import numpy as np


class SpillColumn:
    """An append-only 1-D integer column whose memory is bounded: values gather in a buffer of ``buffer``
    elements that is written to an anonymous temporary file (in ``directory``) whenever it fills."""

    def __init__(self, dtype: str, directory: str, buffer: int) -> None:
        self._buffer = np.empty(buffer, dtype=dtype)
        self._n = 0  # values in the buffer
        self._spilled = 0  # values in the file
        self._directory = directory
        self._file: IO[bytes] | None = None
        self.last: int | None = None

    def __len__(self) -> int:
        return self._spilled + self._n

    def _flush(self) -> None:
        if self._file is None:
            self._file = tempfile.TemporaryFile(dir=self._directory)  # noqa: SIM115 - closed by close()
        self._file.write(self._buffer[: self._n].tobytes())
        self._spilled += self._n
        self._n = 0

    def extend(self, values: np.ndarray) -> None:
        if not len(values):
            return
        self.last = int(values[-1])
        start = 0
        while start < len(values):
            take = min(len(self._buffer) - self._n, len(values) - start)
            self._buffer[self._n : self._n + take] = values[start : start + take]
            self._n += take
            start += take
            if self._n == len(self._buffer):
                self._flush()

    def append(self, value: int) -> None:
        if self._n == len(self._buffer):
            self._flush()
        self._buffer[self._n] = value
        self._n += 1
        self.last = value

    def chunks(self) -> Iterator[np.ndarray]:
        """The values in order, a buffer's worth at a time (may be iterated again)."""
        if self._file is not None:
            self._file.seek(0)
            for _ in range(0, self._spilled, len(self._buffer)):
                yield np.frombuffer(self._file.read(self._buffer.nbytes), dtype=self._buffer.dtype)
        yield self._buffer[: self._n]

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


class ColumnChunks:
    """A column seen as a re-iterable sequence of parts (what ``write_index`` takes)."""

    def __init__(self, column: SpillColumn) -> None:
        self.column = column

    def __iter__(self) -> Iterator[np.ndarray]:
        return self.column.chunks()
