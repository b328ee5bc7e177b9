"""Megatron indexed datasets (``.bin``/``.idx``, "MMIDIDX" version 1): the format, its reader and writers.

Layout of ``PREFIX.idx`` (little-endian): 9-byte magic ``MMIDIDX\\0\\0``, ``<Q`` version 1, ``<B`` dtype code,
``<Q`` S (sequences), ``<Q`` D (length of the document index = documents + 1), then ``int32[S]`` sequence
lengths, ``int64[S]`` sequence pointers (byte offsets into ``.bin``) and ``int64[D]`` document index
(``[0, ..., S]``). Size: ``34 + 12*S + 8*D`` bytes. ``PREFIX.bin`` is the raw concatenation of the token
arrays. Megatron-LM core's optional multimodal ``sequence_modes`` trailer is neither written nor accepted.

dtype codes follow Megatron-LM core: 1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 6 float64, 7 float32,
8 uint16. GPT-NeoX (and its forks) swap 6 and 7 (6 float32, 7 float64), so a file with code 6 or 7 is
ambiguous between the two; token files only ever use 4 (int32) or 8 (uint16), where all agree, and those
are the only codes written here. The reader accepts every code of the table above.

Here: the header and dtypes, the memory-mapped reader (``IndexedDataset``), the index writer
(``write_index``), the streaming builder (``IndexedDatasetBuilder``, its index in ``spill_column`` columns)
and a cheap identity (``fingerprint``). Checking every invariant is ``dataset_verify``; merging and slicing
``dataset_merge``; the ``verify``/``info``/``merge`` commands ``dataset_commands``.

Pointers are always computed in int64 (numpy >= 2 keeps ``int32 * int`` in int32 and would wrap). All
outputs are written to temporary names and renamed only on success.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property
from types import TracebackType
from typing import IO, Any

import numpy as np
import numpy.typing as npt

from workflow_scripts.core.cli import UserError
from workflow_scripts.core.fsio import atomic_path, start_writeback
from workflow_scripts.core.spill_column import ColumnChunks, SpillColumn

MAGIC = b"MMIDIDX\x00\x00"
VERSION = 1
HEADER = struct.Struct("<9sQBQQ")  # magic, version, dtype code, S, D
HEADER_SIZE = HEADER.size  # 34

# Megatron-LM core ``DType``; GPT-NeoX maps 6 -> float32 and 7 -> float64 instead.
DTYPES: dict[int, np.dtype] = {
    1: np.dtype("u1"),
    2: np.dtype("i1"),
    3: np.dtype("<i2"),
    4: np.dtype("<i4"),
    5: np.dtype("<i8"),
    6: np.dtype("<f8"),
    7: np.dtype("<f4"),
    8: np.dtype("<u2"),
}
TOKEN_DTYPE_CODES: dict[np.dtype, int] = {np.dtype("<i4"): 4, np.dtype("<u2"): 8}
UINT16_VOCAB_LIMIT = 65500  # Megatron DType.optimal_dtype / GPT-NeoX __best_fitting_dtype: < 65500 -> uint16

INDEX_CHUNK = 1 << 22  # index elements handled per step when streaming index arrays
COLUMN_BUFFER = 1 << 20  # index elements a builder keeps in memory before spilling them
WRITEBACK_BYTES = 16 << 20  # a durable builder starts writing each such run of its .bin to storage

DTypeLike = npt.DTypeLike
PathLike = str | os.PathLike[str]


class IndexedDatasetError(UserError, ValueError):
    """A missing, malformed or inconsistent indexed dataset; the message names the file and the problem."""


def bin_path(prefix: PathLike) -> str:
    """The data file of ``prefix``."""
    return os.fspath(prefix) + ".bin"


def idx_path(prefix: PathLike) -> str:
    """The index file of ``prefix``."""
    return os.fspath(prefix) + ".idx"


def best_dtype(vocab_size: int) -> np.dtype:
    """Token dtype for a vocabulary: uint16 when ``vocab_size < 65500``, else int32 (as Megatron/NeoX)."""
    if not 0 < vocab_size <= 2**31:
        raise ValueError(f"vocab_size must be in 1..2**31, got {vocab_size}")
    return np.dtype("<u2") if vocab_size < UINT16_VOCAB_LIMIT else np.dtype("<i4")


def token_dtype(dtype: DTypeLike) -> np.dtype:
    """Normalise a token dtype (``np.dtype``, scalar type or name); only int32 and uint16 are allowed."""
    dt = np.dtype(dtype)
    if dt not in TOKEN_DTYPE_CODES:
        raise ValueError(f"token dtype must be int32 (code 4) or uint16 (code 8), got {dt}")
    return dt


@dataclass(frozen=True)
class Header:
    """The fixed 34-byte header of an ``.idx`` file."""

    dtype_code: int
    num_sequences: int  # S
    doc_idx_len: int  # D = documents + 1

    @property
    def dtype(self) -> np.dtype:
        return DTYPES[self.dtype_code]

    @property
    def idx_size(self) -> int:
        """The size the ``.idx`` file must have."""
        return HEADER_SIZE + 12 * self.num_sequences + 8 * self.doc_idx_len

    def bin_size(self, path: str) -> int:
        """The size the ``.bin`` must have, from the last sequence's pointer and length in ``.idx`` file
        ``path`` (whose size ``read_header`` checked)."""
        s = self.num_sequences
        if s == 0:
            return 0
        with open(path, "rb") as f:
            f.seek(HEADER_SIZE + 4 * (s - 1))
            (length,) = struct.unpack("<i", f.read(4))
            f.seek(HEADER_SIZE + 4 * s + 8 * (s - 1))
            (pointer,) = struct.unpack("<q", f.read(8))
        return pointer + length * self.dtype.itemsize


def file_size(path: str) -> int:
    """The size of ``path`` in bytes; a missing file is an ``IndexedDatasetError``."""
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        raise IndexedDatasetError(f"{path}: missing file") from None


def read_header(path: PathLike) -> Header:
    """Read and check the header of an ``.idx`` file (magic, version, dtype code, size)."""
    path = os.fspath(path)
    size = file_size(path)
    with open(path, "rb") as f:
        raw = f.read(HEADER_SIZE)
    if raw[: len(MAGIC)] != MAGIC[: len(raw)]:
        raise IndexedDatasetError(f"{path}: bad magic {raw[: len(MAGIC)]!r}, not a Megatron MMIDIDX index")
    if len(raw) < HEADER_SIZE:
        raise IndexedDatasetError(f"{path}: truncated header ({len(raw)} bytes, need {HEADER_SIZE})")
    _, version, code, seqs, docs = HEADER.unpack(raw)
    if version != VERSION:
        raise IndexedDatasetError(f"{path}: unsupported version {version} (expected {VERSION})")
    if code not in DTYPES:
        raise IndexedDatasetError(f"{path}: unknown dtype code {code} (known: 1..8)")
    header = Header(code, seqs, docs)
    if size != header.idx_size:
        what = "truncated" if size < header.idx_size else "trailing bytes"
        if seqs and size == header.idx_size + seqs:
            what = "trailing bytes (multimodal sequence_modes? not supported)"
        raise IndexedDatasetError(
            f"{path}: {what}: {size} bytes, header says 34 + 12*S + 8*D = {header.idx_size} "
            f"(S={seqs}, D={docs})"
        )
    return header


# A dataset that is a rule's output:
REBUILD = "delete its .bin and .idx and rerun: Snakemake makes them again"


def check_complete(prefix: PathLike, fix: str = REBUILD) -> Header:
    """The cheap completeness check of a dataset before it is used: both files exist, the ``.idx`` header
    and size are right, and the ``.bin`` has the size the ``.idx`` implies (its last pointer plus its last
    length, in tokens of its dtype). Reads 34 + 12 bytes; ``dataset_verify.verify`` checks everything.
    The error names the file, the sizes and ``fix`` (how the workflow makes the dataset again)."""
    idx, data = idx_path(prefix), bin_path(prefix)
    for path, other in ((idx, data), (data, idx)):
        if not os.path.exists(path):
            beside = f" ({other} is there)" if os.path.exists(other) else ""
            raise IndexedDatasetError(f"{path}: missing{beside}; {fix}")
    try:
        header = read_header(idx)
    except IndexedDatasetError as err:
        raise IndexedDatasetError(f"{err}; {fix}") from None
    expected = header.bin_size(idx)
    actual = file_size(data)
    if actual != expected:
        what = "truncated" if actual < expected else "longer than its index says"
        raise IndexedDatasetError(
            f"{data}: {what}: {actual} bytes, its index {idx} says {expected} "
            f"({expected // header.dtype.itemsize} tokens of {header.dtype.name}); {fix}"
        )
    return header


@dataclass(frozen=True)
class DocumentSpan:
    """Documents ``[doc_start, doc_stop)``: their sequences, ``.bin`` byte range and tokens (a view)."""

    doc_start: int
    doc_stop: int
    seq_start: int
    seq_stop: int
    byte_start: int
    byte_stop: int
    tokens: np.ndarray = field(repr=False, compare=False)

    @property
    def nbytes(self) -> int:
        return self.byte_stop - self.byte_start

    @property
    def num_tokens(self) -> int:
        return len(self.tokens)


class IndexedDataset:
    """Read-only, memory-mapped view of ``PREFIX.bin``/``PREFIX.idx``.

    Opening checks the header and the ``.idx`` size only; ``verify`` checks everything else.
    """

    def __init__(self, prefix: PathLike) -> None:
        self.prefix = os.fspath(prefix)
        self.idx_path = idx_path(prefix)
        self.bin_path = bin_path(prefix)
        self.header = read_header(self.idx_path)
        self.bin_size = file_size(self.bin_path)
        s, d = self.header.num_sequences, self.header.doc_idx_len
        idx = np.memmap(self.idx_path, dtype=np.uint8, mode="r")
        self.lengths: np.ndarray = np.frombuffer(idx, "<i4", s, HEADER_SIZE)
        self.pointers: np.ndarray = np.frombuffer(idx, "<i8", s, HEADER_SIZE + 4 * s)
        self.doc_idx: np.ndarray = np.frombuffer(idx, "<i8", d, HEADER_SIZE + 12 * s)

    @cached_property
    def tokens(self) -> np.ndarray:
        """The whole ``.bin`` as a read-only token array (mapped on first use; a plain array over the map,
        whose slices cost a fifth of a ``np.memmap``'s: a shuffled slice takes one per document)."""
        n = self.bin_size // self.itemsize
        if n == 0:
            return np.empty(0, self.dtype)
        return np.memmap(self.bin_path, dtype=self.dtype, mode="r", shape=(n,)).view(np.ndarray)

    @property
    def dtype(self) -> np.dtype:
        return self.header.dtype

    @property
    def dtype_code(self) -> int:
        return self.header.dtype_code

    @property
    def itemsize(self) -> int:
        return self.header.dtype.itemsize

    @property
    def num_sequences(self) -> int:
        return self.header.num_sequences

    @property
    def num_documents(self) -> int:
        return max(self.header.doc_idx_len - 1, 0)

    @cached_property
    def num_tokens(self) -> int:
        return int(self.lengths.sum(dtype=np.int64))

    def __len__(self) -> int:
        return self.num_sequences

    def _tokens(self, byte_start: int, byte_stop: int) -> np.ndarray:
        start, stop = byte_start // self.itemsize, byte_stop // self.itemsize
        if stop > len(self.tokens):
            raise IndexedDatasetError(f"{self.bin_path}: truncated: bytes up to {byte_stop} referenced")
        if not 0 <= byte_start <= byte_stop:
            raise IndexedDatasetError(f"{self.idx_path}: bad byte range [{byte_start}, {byte_stop})")
        return self.tokens[start:stop]

    def _seq_offset(self, seq: int) -> int:
        """Byte offset where sequence ``seq`` starts (``seq == S`` gives the end of the data)."""
        if seq < self.num_sequences:
            return int(self.pointers[seq])
        if self.num_sequences == 0:
            return 0
        return int(self.pointers[-1]) + int(self.lengths[-1]) * self.itemsize

    def __getitem__(self, i: int) -> np.ndarray:
        """Tokens of sequence ``i`` (a read-only view)."""
        i = int(i)
        if not -self.num_sequences <= i < self.num_sequences:
            raise IndexError(f"sequence {i} out of range (S={self.num_sequences})")
        i %= self.num_sequences
        start = int(self.pointers[i])
        return self._tokens(start, start + int(self.lengths[i]) * self.itemsize)

    def documents(self, start: int, stop: int) -> DocumentSpan:
        """Documents ``[start, stop)`` as sequence range, ``.bin`` byte range and token view."""
        if not 0 <= start <= stop <= self.num_documents:
            raise IndexError(f"documents [{start}, {stop}) out of range (documents={self.num_documents})")
        seq_start, seq_stop = int(self.doc_idx[start]), int(self.doc_idx[stop])
        byte_start, byte_stop = self._seq_offset(seq_start), self._seq_offset(seq_stop)
        return DocumentSpan(
            start, stop, seq_start, seq_stop, byte_start, byte_stop, self._tokens(byte_start, byte_stop)
        )

    def document(self, i: int) -> np.ndarray:
        """Tokens of document ``i``: its sequences concatenated (a read-only view)."""
        return self.documents(i, i + 1).tokens

    def summary(self) -> dict[str, Any]:
        """Counts for logs and file names."""
        return {
            "documents": self.num_documents,
            "sequences": self.num_sequences,
            "tokens": self.num_tokens,
            "dtype": self.dtype.name,
        }


def write_index(
    path: PathLike, dtype: DTypeLike, length_parts: Iterable[np.ndarray], doc_idx_parts: Iterable[np.ndarray]
) -> None:
    """Write an ``.idx`` file whose lengths / document index are the concatenations of the given parts
    (each iterated more than once).

    Pointers are derived from the lengths (exclusive prefix sum in int64, times the itemsize), streamed
    in chunks so memory stays at the size of the parts.
    """
    dt = token_dtype(dtype)
    seqs = sum(len(p) for p in length_parts)
    docs = sum(len(p) for p in doc_idx_parts)
    with open(path, "wb") as f:
        f.write(HEADER.pack(MAGIC, VERSION, TOKEN_DTYPE_CODES[dt], seqs, docs))
        for part in length_parts:
            for a in range(0, len(part), INDEX_CHUNK):
                f.write(np.ascontiguousarray(part[a : a + INDEX_CHUNK], dtype="<i4"))
        end = 0
        for part in length_parts:
            for a in range(0, len(part), INDEX_CHUNK):
                chunk = part[a : a + INDEX_CHUNK]
                pointers = np.empty(len(chunk), dtype="<i8")
                pointers[0] = 0
                np.cumsum(chunk[:-1], dtype=np.int64, out=pointers[1:])
                pointers *= dt.itemsize
                pointers += end
                end = int(pointers[-1]) + int(chunk[-1]) * dt.itemsize
                f.write(pointers)
        for part in doc_idx_parts:
            for a in range(0, len(part), INDEX_CHUNK):
                f.write(np.ascontiguousarray(part[a : a + INDEX_CHUNK], dtype="<i8"))


class _Aborted(Exception):
    """Passed to the temporary-file context managers when a builder is aborted without an exception."""


class IndexedDatasetBuilder:
    """Streaming writer of ``PREFIX.bin``/``PREFIX.idx``.

    Tokens go to a temporary ``.bin`` as they are added; lengths and the document index grow in columns
    that spill to temporary files (``spill_column``); ``close()`` writes the ``.idx`` and renames both files
    into place (fsync'd unless ``durable`` is False: see ``fsio.atomic_path``; a durable builder starts the
    write-back of its ``.bin`` as it goes, ``fsio.start_writeback``). Used as a context manager, an
    exception aborts: temporary files are removed and no final file appears.
    """

    def __init__(self, prefix: PathLike, dtype: DTypeLike = np.int32, durable: bool = True) -> None:
        self.prefix = os.fspath(prefix)
        self.dtype = token_dtype(dtype)
        directory = os.path.dirname(os.path.abspath(self.prefix))
        buffer = min(INDEX_CHUNK, COLUMN_BUFFER)
        self._lengths = SpillColumn("<i4", directory, buffer)
        self._doc_idx = SpillColumn("<i8", directory, buffer)
        self._doc_idx.append(0)
        self._num_tokens = 0
        self._durable = durable
        self._written_back = 0  # .bin bytes whose write-back has started
        self._stack = contextlib.ExitStack()
        try:
            self._idx_tmp = self._stack.enter_context(atomic_path(idx_path(prefix), durable))
            bin_tmp = self._stack.enter_context(atomic_path(bin_path(prefix), durable))
            bin_file = open(bin_tmp, "wb", buffering=1 << 20)  # noqa: SIM115 - closed by the exit stack
            self._bin: IO[bytes] | None = self._stack.enter_context(bin_file)
        except BaseException:
            self._stack.close()
            raise

    def __enter__(self) -> IndexedDatasetBuilder:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc is None:
            self.close()
        else:
            self.abort(exc)

    @property
    def num_sequences(self) -> int:
        return len(self._lengths)

    @property
    def num_documents(self) -> int:
        return len(self._doc_idx) - 1

    @property
    def num_tokens(self) -> int:
        return self._num_tokens

    def _as_tokens(self, tokens: npt.ArrayLike) -> np.ndarray:
        """``tokens`` as a 1-D array of the file dtype; values that do not fit are an error, not a wrap."""
        arr = np.asarray(tokens)
        if arr.ndim != 1:
            raise ValueError(f"tokens must be 1-D, got shape {arr.shape}")
        if arr.size == 0:
            return np.empty(0, self.dtype)
        if arr.dtype.kind not in "iu":
            raise TypeError(f"tokens must be integers, got {arr.dtype}")
        if not np.can_cast(arr.dtype, self.dtype):
            info = np.iinfo(self.dtype)
            lo, hi = int(arr.min()), int(arr.max())
            if lo < info.min or hi > info.max:
                raise ValueError(f"token ids {lo}..{hi} do not fit {self.dtype.name}")
        return np.ascontiguousarray(arr, dtype=self.dtype)

    def _write(self, arr: np.ndarray) -> None:
        if self._bin is None:
            raise ValueError(f"{self.prefix}: builder is closed")
        self._bin.write(arr)
        self._num_tokens += len(arr)
        if self._durable and self._bin.tell() - self._written_back >= WRITEBACK_BYTES:
            self._bin.flush()  # so that the fsync at close has little left to wait for
            end = self._bin.tell()
            start_writeback(self._bin.fileno(), self._written_back, end - self._written_back)
            self._written_back = end

    def add_item(self, tokens: npt.ArrayLike) -> None:
        """Append one sequence to the current document (finish it with ``end_document``)."""
        arr = self._as_tokens(tokens)
        if len(arr) > np.iinfo(np.int32).max:
            raise ValueError(f"a sequence holds at most 2**31-1 tokens, got {len(arr)}")
        self._write(arr)
        self._lengths.append(len(arr))

    def end_document(self) -> None:
        """Close the current document: all sequences added since the previous one."""
        self._doc_idx.append(len(self._lengths))

    def add_document(self, tokens: npt.ArrayLike) -> None:
        """Append one document made of one sequence."""
        self.add_item(tokens)
        self.end_document()

    def add_document_chunks(self, chunks: Iterable[npt.ArrayLike]) -> int:
        """Append one one-sequence document whose tokens come in ``chunks`` (written as they come, so a huge
        document never sits in memory whole); return its length."""
        length = 0
        for chunk in chunks:
            arr = self._as_tokens(chunk)
            self._write(arr)
            length += len(arr)
        if length > np.iinfo(np.int32).max:
            raise ValueError(f"a sequence holds at most 2**31-1 tokens, got {length}")
        self._lengths.append(length)
        self.end_document()
        return length

    def add_documents(self, flat_tokens: npt.ArrayLike, lengths: npt.ArrayLike) -> None:
        """Append many one-sequence documents at once: ``flat_tokens`` cut by ``lengths`` (vectorised)."""
        lens = np.asarray(lengths)
        if lens.ndim != 1 or (lens.size and lens.dtype.kind not in "iu"):
            raise ValueError("lengths must be a 1-D integer array")
        lens = lens.astype(np.int64)
        if lens.size and (lens.min() < 0 or lens.max() > np.iinfo(np.int32).max):
            raise ValueError("lengths must be in 0..2**31-1")
        arr = self._as_tokens(flat_tokens)
        if int(lens.sum()) != len(arr):
            raise ValueError(f"lengths sum to {int(lens.sum())} but {len(arr)} tokens were given")
        self._write(arr)
        first = len(self._lengths)
        self._lengths.extend(lens)
        self._doc_idx.extend(np.arange(first + 1, first + len(lens) + 1, dtype=np.int64))

    def close(self) -> None:
        """Write the ``.idx`` and rename both files into place (no-op when already closed)."""
        if self._bin is None:
            return
        try:
            if self._doc_idx.last != len(self._lengths):
                raise IndexedDatasetError(
                    f"{self.prefix}: {len(self._lengths) - (self._doc_idx.last or 0)} sequence(s) added "
                    "after the last end_document()"
                )
            self._bin.close()
            self._bin = None
            write_index(self._idx_tmp, self.dtype, ColumnChunks(self._lengths), ColumnChunks(self._doc_idx))
        except BaseException as exc:
            self.abort(exc)
            raise
        self._close_columns()
        self._stack.close()

    def _close_columns(self) -> None:
        self._lengths.close()
        self._doc_idx.close()

    def abort(self, exc: BaseException | None = None) -> None:
        """Discard everything written: remove the temporary files."""
        self._bin = None
        self._close_columns()
        exc = exc if exc is not None else _Aborted()
        self._stack.__exit__(type(exc), exc, exc.__traceback__)


def fingerprint(prefix: PathLike) -> dict[str, Any]:
    """Cheap identity of a dataset: blake2b of the ``.idx`` file and the ``.bin`` size."""
    with open(idx_path(prefix), "rb") as f:
        digest = hashlib.file_digest(f, "blake2b").hexdigest()
    return {"idx_blake2b": digest, "bin_bytes": file_size(bin_path(prefix))}
