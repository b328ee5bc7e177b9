"""New indexed datasets made of parts of others: ``merge`` (whole datasets, in order); ``append_ranges``
(document ranges of one dataset) and ``append_documents`` (chosen documents of one dataset, in any order)
append to an open ``.bin`` and give the index parts, so that one file gathers the parts of many datasets (a
datapack: ``datapacks.packer``); ``write_slice`` and ``write_documents`` write one such part as a dataset.
``.bin`` bytes are copied in the kernel (``copy_range``: ``copy_file_range``, else ``sendfile``, else a
read/write loop), or gathered with numpy a bounded number of tokens at a time; the index is rebuilt with
numpy.

Merging follows Megatron ``IndexedDatasetBuilder.add_index`` (each input's document index is offset by the
sequences before it, its leading 0 dropped), not GPT-NeoX ``merge_file_``, which leaves the document index
at ``[0]``. Inputs are merged in the order given, never sorted. Outputs are written to temporary names and
renamed only on success.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np

from workflow_scripts.core.dataset_verify import verify
from workflow_scripts.core.fsio import atomic_path
from workflow_scripts.core.indexed_dataset import (
    TOKEN_DTYPE_CODES,
    IndexedDataset,
    IndexedDatasetError,
    PathLike,
    bin_path,
    check_complete,
    file_size,
    idx_path,
    write_index,
)
from workflow_scripts.core.progress import Progress

_COPY_CHUNK = 1 << 30  # bytes per copy_file_range / sendfile call (the kernel caps one call near 2 GiB)
GATHER_TOKENS = 1 << 22  # tokens gathered per step by ``append_documents``


def copy_range(src: PathLike, offset: int, nbytes: int, dst: IO[bytes]) -> None:
    """Append ``nbytes`` bytes of file ``src`` starting at ``offset`` to the open binary file ``dst``.

    Copies in the kernel with ``os.copy_file_range``, falling back to ``os.sendfile`` and then to a
    buffered read/write loop where the file system or platform does not support it.
    """
    dst.flush()
    pos = dst.tell()
    with open(src, "rb") as f:
        done = _copy_kernel(f.fileno(), dst.fileno(), offset, nbytes, pos)
        if done < nbytes:
            f.seek(offset + done)
            dst.seek(pos + done)
            remaining = nbytes - done
            while remaining:
                buf = f.read(min(remaining, 1 << 24))
                if not buf:
                    break
                dst.write(buf)
                remaining -= len(buf)
            done = nbytes - remaining
    if done < nbytes:
        raise IndexedDatasetError(f"{src}: ends before byte {offset + nbytes} (copied {done} of {nbytes})")
    dst.seek(pos + nbytes)


_UNSUPPORTED = {errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL, errno.ENOTSUP, errno.EBADF}


def _copy_kernel(fd_in: int, fd_out: int, offset: int, nbytes: int, pos: int) -> int:
    """Copy with ``copy_file_range`` or ``sendfile``; return the bytes copied (short at end of file or when
    neither is supported)."""
    done = 0
    copy_file_range = getattr(os, "copy_file_range", None)
    if copy_file_range is not None:
        try:
            while done < nbytes:
                n = copy_file_range(fd_in, fd_out, min(nbytes - done, _COPY_CHUNK), offset + done, pos + done)
                if n == 0:
                    return done
                done += n
            return done
        except OSError as e:
            if e.errno not in _UNSUPPORTED:
                raise
    sendfile = getattr(os, "sendfile", None)
    if sendfile is None:
        return done
    try:
        os.lseek(fd_out, pos + done, os.SEEK_SET)
        while done < nbytes:
            n = sendfile(fd_out, fd_in, offset + done, min(nbytes - done, _COPY_CHUNK))
            if n == 0:
                break
            done += n
    except OSError as e:
        if e.errno not in _UNSUPPORTED:
            raise
    return done


def _same_file(a: str, b: str) -> bool:
    return Path(a).resolve() == Path(b).resolve()


def merge(
    prefixes: Sequence[PathLike], out_prefix: PathLike, progress: Progress | None = None
) -> dict[str, Any]:
    """Concatenate datasets in the given order into ``out_prefix``; return the counts.

    Every input is verified first; all must share one dtype. ``.bin`` bytes are copied in the kernel; the
    index is built with numpy (memory bounded by the indexes, not the data). Output is atomic.
    """
    if not prefixes:
        raise IndexedDatasetError("merge: no inputs")
    out = os.fspath(out_prefix)
    inputs = [os.fspath(p) for p in prefixes]
    per_input: list[dict[str, Any]] = []
    length_parts: list[np.ndarray] = []
    doc_idx_parts = [np.zeros(1, dtype=np.int64)]
    offset = 0
    for p in inputs:
        if _same_file(bin_path(p), bin_path(out)):
            raise IndexedDatasetError(f"{bin_path(out)}: merge output is also an input")
        check_complete(p)  # a missing or truncated input named, before the full check
        per_input.append({"prefix": p, **verify(p)})
        # Copy the index arrays so that no input stays mapped (one open descriptor per mapping).
        ds = IndexedDataset(p)
        if ds.dtype not in TOKEN_DTYPE_CODES:
            raise IndexedDatasetError(f"{ds.idx_path}: dtype {ds.dtype.name} is not a token dtype")
        if ds.dtype.name != per_input[0]["dtype"]:
            raise IndexedDatasetError(
                f"{ds.idx_path}: dtype {ds.dtype.name} differs from {idx_path(inputs[0])} "
                f"({per_input[0]['dtype']}); all merge inputs must share one dtype"
            )
        length_parts.append(np.array(ds.lengths))
        doc_idx_parts.append(ds.doc_idx[1:] + offset)
        offset += ds.num_sequences
        del ds
    with atomic_path(idx_path(out)) as idx_tmp, atomic_path(bin_path(out)) as bin_tmp:
        with open(bin_tmp, "wb") as f:
            for p, counts in zip(inputs, per_input, strict=True):
                copy_range(bin_path(p), 0, size := file_size(bin_path(p)), f)
                if progress is not None:
                    progress.advance(size, counts["documents"])
        write_index(idx_tmp, per_input[0]["dtype"], length_parts, doc_idx_parts)
    return {
        "documents": sum(x["documents"] for x in per_input),
        "sequences": offset,
        "tokens": sum(x["tokens"] for x in per_input),
        "dtype": per_input[0]["dtype"],
        "inputs": per_input,
    }


@dataclass(frozen=True)
class Part:
    """Documents of one dataset appended to an open ``.bin``: their index parts (offset by the sequences
    before them) and counts."""

    lengths: np.ndarray
    doc_idx: np.ndarray  # the document index without its leading 0
    documents: int
    sequences: int
    tokens: int


def _token_source(src: IndexedDataset) -> IndexedDataset:
    if src.dtype not in TOKEN_DTYPE_CODES:
        raise IndexedDatasetError(f"{src.idx_path}: dtype {src.dtype.name} is not a token dtype")
    return src


def _span(src: IndexedDataset, start: int, stop: int) -> tuple[int, int, int, int]:
    """Sequences ``[s, t)`` and ``.bin`` bytes ``[x, y)`` of documents ``[start, stop)``, from the index alone
    (``IndexedDataset.documents`` maps the ``.bin`` too: a tenth of a millisecond a source)."""
    if not 0 <= start <= stop <= src.num_documents:
        raise IndexError(f"documents [{start}, {stop}) out of range (documents={src.num_documents})")
    seq_start, seq_stop = int(src.doc_idx[start]), int(src.doc_idx[stop])
    return seq_start, seq_stop, src._seq_offset(seq_start), src._seq_offset(seq_stop)


def append_ranges(
    src: IndexedDataset, ranges: Sequence[tuple[int, int]], dst: IO[bytes], sequences: int = 0
) -> Part:
    """Append documents ``[a, b)`` of each range of ``src``, in order, to ``dst``: one byte-range copy per
    range (a slice that wraps around its source has two ranges) plus index arithmetic. ``sequences``: the
    sequences ``dst`` holds before them. The source is not re-verified; the index parts are consistent
    whenever the source is, and a ``.bin`` shorter than its index is an error. They are copies: no index
    stays mapped."""
    spans = [_span(_token_source(src), a, b) for a, b in ranges]
    lengths, doc_idx = [], []
    start = sequences
    for (a, b), (seq_start, seq_stop, byte_start, byte_stop) in zip(ranges, spans, strict=True):
        lengths.append(src.lengths[seq_start:seq_stop])
        doc_idx.append(src.doc_idx[a + 1 : b + 1] - seq_start + sequences)
        sequences += seq_stop - seq_start
        copy_range(src.bin_path, byte_start, byte_stop - byte_start, dst)
    return Part(
        np.concatenate(lengths) if lengths else np.empty(0, np.int32),
        np.concatenate(doc_idx) if doc_idx else np.empty(0, np.int64),
        sum(b - a for a, b in ranges),
        sequences - start,
        sum(y - x for _, _, x, y in spans) // src.itemsize,
    )


def append_documents(src: IndexedDataset, docs: np.ndarray, dst: IO[bytes], sequences: int = 0) -> Part:
    """Append documents ``docs`` (indices, in that order) of ``src``, one sequence each, to ``dst``: a
    shuffled source's share. The tokens are gathered about ``GATHER_TOKENS`` at a time; the index parts take
    12 bytes a document. Not re-verified, as ``append_ranges``."""
    docs = np.asarray(docs, np.int64)
    first = _token_source(src).doc_idx[docs]
    if np.any(src.doc_idx[docs + 1] - first != 1):
        raise IndexedDatasetError(f"{src.idx_path}: gathering documents needs one sequence per document")
    lens = src.lengths[first]
    starts = src.pointers[first] // src.itemsize
    ends = np.cumsum(lens, dtype=np.int64)  # once: each step searches it instead of summing the rest
    a = 0
    while a < len(docs):
        done = int(ends[a - 1]) if a else 0
        b = a + max(1, int(np.searchsorted(ends[a:], done + GATHER_TOKENS)))
        dst.write(
            np.concatenate([src.tokens[s : s + n] for s, n in zip(starts[a:b], lens[a:b], strict=True)])
        )
        a = b
    return Part(
        lens,
        np.arange(sequences + 1, sequences + len(docs) + 1, dtype=np.int64),
        len(docs),
        len(docs),
        int(ends[-1]) if len(ends) else 0,
    )


def write_slice(
    src_prefix: PathLike, ranges: Sequence[tuple[int, int]], out_prefix: PathLike
) -> dict[str, Any]:
    """Write documents ``[a, b)`` of each range of ``src_prefix``, in order, as the dataset ``out_prefix``
    (``append_ranges``; atomic)."""
    src = IndexedDataset(src_prefix)
    byte_ranges = [list(_span(src, a, b)[2:]) for a, b in ranges]
    with atomic_path(idx_path(out_prefix)) as idx_tmp, atomic_path(bin_path(out_prefix)) as bin_tmp:
        with open(bin_tmp, "wb") as f:
            part = append_ranges(src, ranges, f)
        write_index(idx_tmp, src.dtype, [part.lengths], [np.zeros(1, np.int64), part.doc_idx])
    return {**_counts(part, src), "byte_ranges": byte_ranges}


def write_documents(src_prefix: PathLike, docs: np.ndarray, out_prefix: PathLike) -> dict[str, Any]:
    """Write documents ``docs`` (indices, in that order) of ``src_prefix``, one sequence each, as the dataset
    ``out_prefix`` (``append_documents``; atomic)."""
    src = IndexedDataset(src_prefix)
    with atomic_path(idx_path(out_prefix)) as idx_tmp, atomic_path(bin_path(out_prefix)) as bin_tmp:
        with open(bin_tmp, "wb") as f:
            part = append_documents(src, docs, f)
        write_index(idx_tmp, src.dtype, [part.lengths], [np.zeros(1, np.int64), part.doc_idx])
    return _counts(part, src)


def _counts(part: Part, src: IndexedDataset) -> dict[str, Any]:
    return {
        "documents": part.documents,
        "sequences": part.sequences,
        "tokens": part.tokens,
        "dtype": src.dtype.name,
    }
