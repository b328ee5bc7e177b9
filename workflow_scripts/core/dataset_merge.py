"""New indexed datasets made of parts of others: ``merge`` (whole datasets, in order), ``write_slice``
(document ranges of one dataset) and ``write_documents`` (chosen documents of one dataset, in any order).
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
from pathlib import Path
from typing import IO, Any

import numpy as np

from workflow_scripts.core.dataset_verify import verify
from workflow_scripts.core.fsio import atomic_path
from workflow_scripts.core.indexed_dataset import (
    REBUILD,
    TOKEN_DTYPE_CODES,
    IndexedDataset,
    IndexedDatasetBuilder,
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
GATHER_TOKENS = 1 << 22  # tokens gathered per step by ``write_documents``
SLICES = "slices"  # the folder of a pack's slices (rules/datapacks.smk: slice_pack)


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


def input_fix(prefix: str) -> str:
    """How the workflow makes a merge input again: a pack's slices by cutting the folder again, else
    ``indexed_dataset.REBUILD``."""
    folder = os.path.dirname(prefix)
    if os.path.basename(folder) == SLICES:
        return f"delete {folder} and rerun: Snakemake cuts the pack's slices again"
    return REBUILD


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
        check_complete(p, input_fix(p))  # a missing or truncated input named, before the full check
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


def write_slice(
    src_prefix: PathLike, ranges: Sequence[tuple[int, int]], out_prefix: PathLike, durable: bool = True
) -> dict[str, Any]:
    """Write documents ``[a, b)`` of each range of ``src_prefix``, in order, as the dataset ``out_prefix``.

    One byte-range copy per range plus index arithmetic (a slice that wraps around its source has two
    ranges). The source is not re-verified (callers cutting many slices verify it once); the written index
    is consistent whenever the source is. Atomic (``durable``: see ``fsio.atomic_path``).
    """
    src = IndexedDataset(src_prefix)
    if src.dtype not in TOKEN_DTYPE_CODES:
        raise IndexedDatasetError(f"{src.idx_path}: dtype {src.dtype.name} is not a token dtype")
    spans = [src.documents(a, b) for a, b in ranges]
    lengths, doc_idx = [], [np.zeros(1, dtype=np.int64)]
    sequences = 0
    for span in spans:
        lengths.append(src.lengths[span.seq_start : span.seq_stop])
        doc_idx.append(src.doc_idx[span.doc_start + 1 : span.doc_stop + 1] - span.seq_start + sequences)
        sequences += span.seq_stop - span.seq_start
    idx_out, bin_out = atomic_path(idx_path(out_prefix), durable), atomic_path(bin_path(out_prefix), durable)
    with idx_out as idx_tmp, bin_out as bin_tmp:
        with open(bin_tmp, "wb") as f:
            for span in spans:
                copy_range(src.bin_path, span.byte_start, span.nbytes, f)
        write_index(idx_tmp, src.dtype, lengths, doc_idx)
    return {
        "documents": sum(s.doc_stop - s.doc_start for s in spans),
        "sequences": sequences,
        "tokens": sum(s.num_tokens for s in spans),
        "dtype": src.dtype.name,
        "byte_ranges": [[s.byte_start, s.byte_stop] for s in spans],
    }


def write_documents(
    src_prefix: PathLike, docs: np.ndarray, out_prefix: PathLike, durable: bool = True
) -> dict[str, Any]:
    """Write documents ``docs`` (indices, in that order) of ``src_prefix``, one sequence each, as the dataset
    ``out_prefix``: a shuffled source's slice. The tokens are gathered about ``GATHER_TOKENS`` at a time;
    the index arrays take 8 bytes a document. The source is not re-verified (as ``write_slice``). Atomic,
    as ``write_slice``."""
    src = IndexedDataset(src_prefix)
    docs = np.asarray(docs, np.int64)
    first = src.doc_idx[docs]
    if np.any(src.doc_idx[docs + 1] - first != 1):
        raise IndexedDatasetError(f"{src.idx_path}: gathering documents needs one sequence per document")
    starts, lens = src.pointers[first] // src.itemsize, src.lengths[first].astype(np.int64)
    ends = np.cumsum(lens)  # once: each step searches it instead of summing the rest
    with IndexedDatasetBuilder(out_prefix, src.dtype, durable) as builder:
        a = 0
        while a < len(docs):
            done = int(ends[a - 1]) if a else 0
            b = a + max(1, int(np.searchsorted(ends[a:], done + GATHER_TOKENS)))
            parts = [src.tokens[s : s + n] for s, n in zip(starts[a:b], lens[a:b], strict=True)]
            builder.add_documents(np.concatenate(parts), lens[a:b])
            a = b
    return {
        "documents": len(docs),
        "sequences": len(docs),
        "tokens": int(ends[-1]) if len(ends) else 0,
        "dtype": src.dtype.name,
    }
