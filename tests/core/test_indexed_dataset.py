"""Tests of the Megatron indexed-dataset core: byte format, reader, verify, merge, slices, CLI."""

from __future__ import annotations

import errno
import hashlib
import itertools
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.utils import build_dataset
from workflow_scripts.cli import main as snakepack
from workflow_scripts.core import indexed_dataset as idd
from workflow_scripts.core.dataset_merge import copy_range, merge, write_slice
from workflow_scripts.core.dataset_verify import verify
from workflow_scripts.core.indexed_dataset import (
    IndexedDataset,
    IndexedDatasetBuilder,
    IndexedDatasetError,
    best_dtype,
    write_index,
)

REPO = Path(__file__).resolve().parents[2]

GOLDEN = bytes.fromhex(
    "4d4d49444944580000 0100000000000000 08 0200000000000000 0300000000000000"
    "0300000002000000"
    "0000000000000000 0600000000000000"
    "0000000000000000 0100000000000000 0200000000000000".replace(" ", "")
)


def raw_idx(
    code: int = 8,
    lengths=(3, 2),
    pointers=None,
    doc_idx=(0, 1, 2),
    *,
    magic: bytes = idd.MAGIC,
    version: int = 1,
    seqs: int | None = None,
    docs: int | None = None,
) -> bytes:
    """Hand-crafted ``.idx`` bytes (pointers derived for itemsize 2 unless given)."""
    lengths = np.asarray(lengths, dtype="<i4")
    if pointers is None:
        pointers = np.concatenate([[0], np.cumsum(lengths[:-1], dtype=np.int64)]) * 2 if len(lengths) else []
    head = struct.pack(
        "<9sQBQQ",
        magic,
        version,
        code,
        len(lengths) if seqs is None else seqs,
        len(doc_idx) if docs is None else docs,
    )
    return (
        head
        + lengths.tobytes()
        + np.asarray(pointers, "<i8").tobytes()
        + np.asarray(doc_idx, "<i8").tobytes()
    )


def write_raw(prefix: Path, idx: bytes, bin_bytes: bytes = bytes(10)) -> Path:
    Path(f"{prefix}.idx").write_bytes(idx)
    Path(f"{prefix}.bin").write_bytes(bin_bytes)
    return prefix


def random_docs(rng: np.random.Generator, n: int, high: int, max_seqs: int = 3) -> list[list[list[int]]]:
    """Documents of 0..max_seqs sequences of 0..40 tokens each, values in [0, high)."""
    return [
        [rng.integers(0, high, rng.integers(0, 40)).tolist() for _ in range(rng.integers(0, max_seqs + 1))]
        for _ in range(n)
    ]


# -- byte format -------------------------------------------------------------------------------------


def test_golden_vector_byte_exact(tmp_path):
    build_dataset(tmp_path / "g", [[[1, 2, 3]], [[4, 5]]], np.uint16)
    assert len(GOLDEN) == 82
    assert (tmp_path / "g.idx").read_bytes() == GOLDEN
    assert (tmp_path / "g.bin").read_bytes() == np.array([1, 2, 3, 4, 5], "<u2").tobytes()


def test_golden_vector_reads(tmp_path):
    write_raw(tmp_path / "g", GOLDEN, np.arange(5, dtype="<u2").tobytes())
    ds = IndexedDataset(tmp_path / "g")
    assert (ds.dtype_code, ds.dtype, ds.num_sequences, ds.num_documents, ds.num_tokens) == (
        8,
        np.dtype(np.uint16),
        2,
        2,
        5,
    )
    assert ds.lengths.tolist() == [3, 2]
    assert ds.pointers.tolist() == [0, 6]
    assert ds.doc_idx.tolist() == [0, 1, 2]
    assert ds[1].tolist() == [3, 4]
    assert ds[-2].tolist() == [0, 1, 2]
    assert ds.document(0).tolist() == [0, 1, 2]
    assert not ds.lengths.flags.writeable and not ds.tokens.flags.writeable


@pytest.mark.parametrize("dtype", [np.uint16, np.dtype(np.uint16), "uint16", np.dtype("<u2")])
def test_dtype_as_type_instance_or_name(tmp_path, dtype):
    build_dataset(tmp_path / "g", [[[1, 2, 3]], [[4, 5]]], dtype)
    assert (tmp_path / "g.idx").read_bytes() == GOLDEN


@pytest.mark.parametrize("dtype", [np.int64, np.float32, np.uint8, ">i4"])
def test_only_token_dtypes_are_written(tmp_path, dtype):
    with pytest.raises(ValueError, match=r"int32 \(code 4\) or uint16 \(code 8\)"):
        IndexedDatasetBuilder(tmp_path / "x", dtype)
    assert list(tmp_path.iterdir()) == []


def test_best_dtype_boundary():
    assert best_dtype(65499) == np.uint16
    assert best_dtype(65500) == np.int32
    assert best_dtype(32000) == np.uint16
    assert best_dtype(256_000) == np.int32
    with pytest.raises(ValueError):
        best_dtype(0)


@pytest.mark.parametrize("code", [1, 2, 3, 4, 5, 6, 7, 8])
def test_reader_accepts_megatron_core_codes(tmp_path, code):
    expected = {
        1: "uint8",
        2: "int8",
        3: "int16",
        4: "int32",
        5: "int64",
        6: "float64",
        7: "float32",
        8: "uint16",
    }
    itemsize = np.dtype(expected[code]).itemsize
    idx = raw_idx(code, lengths=[2], pointers=[0], doc_idx=[0, 1])
    write_raw(tmp_path / "c", idx, bytes(2 * itemsize))
    assert verify(tmp_path / "c")["dtype"] == expected[code]


def test_pointers_are_int64_beyond_2gib(tmp_path):
    # NEP 50 trap: int32 lengths times the itemsize must not wrap.
    path = tmp_path / "big.idx"
    write_index(path, np.int32, [np.array([600_000_000, 600_000_000, 5], np.int32)], [np.arange(4)])
    raw = path.read_bytes()
    pointers = np.frombuffer(raw, "<i8", 3, 34 + 12)
    assert pointers.tolist() == [0, 2_400_000_000, 4_800_000_000]
    # Same across part boundaries (merge passes one part per input).
    parts = [np.array([600_000_000], np.int32), np.array([600_000_000], np.int32), np.array([5], np.int32)]
    write_index(path, np.int32, parts, [np.arange(4)])
    assert path.read_bytes() == raw


# -- builder and reader ------------------------------------------------------------------------------


@pytest.mark.parametrize(("dtype", "high"), [(np.uint16, 65536), (np.int32, 2**31 - 1)])
def test_round_trip_random(tmp_path, dtype, high):
    rng = np.random.default_rng(7)
    docs = random_docs(rng, 300, high)
    docs[5] = []  # a document with no sequence
    docs[6] = [[]]  # a document with one empty sequence
    build_dataset(tmp_path / "r", docs, dtype)
    ds = IndexedDataset(tmp_path / "r")
    seqs = [s for d in docs for s in d]
    assert ds.dtype == np.dtype(dtype)
    assert ds.num_documents == len(docs)
    assert ds.num_sequences == len(seqs)
    assert ds.num_tokens == sum(map(len, seqs))
    assert ds.lengths.tolist() == [len(s) for s in seqs]
    assert ds.doc_idx.tolist() == np.cumsum([0] + [len(d) for d in docs]).tolist()
    assert os.path.getsize(ds.idx_path) == 34 + 12 * len(seqs) + 8 * (len(docs) + 1)
    assert os.path.getsize(ds.bin_path) == ds.num_tokens * np.dtype(dtype).itemsize
    for i, s in enumerate(seqs):
        assert ds[i].tolist() == s
    for i, d in enumerate(docs):
        assert ds.document(i).tolist() == [t for s in d for t in s]
    if dtype is np.int32:
        assert int(ds.tokens.max()) > 65535
    assert verify(tmp_path / "r") == ds.summary()


def test_add_documents_matches_per_document_writes(tmp_path):
    rng = np.random.default_rng(3)
    lengths = rng.integers(0, 50, 1000)
    lengths[[0, 10, 999]] = 0
    flat = rng.integers(0, 100_000, int(lengths.sum()))
    with IndexedDatasetBuilder(tmp_path / "bulk", np.int32) as b:
        b.add_documents(flat, lengths)
    with IndexedDatasetBuilder(tmp_path / "loop", np.int32) as b:
        for doc in np.split(flat, np.cumsum(lengths)[:-1]):
            b.add_document(doc)
    for ext in ("bin", "idx"):
        assert (tmp_path / f"bulk.{ext}").read_bytes() == (tmp_path / f"loop.{ext}").read_bytes()


@pytest.mark.parametrize("durable", [True, False])
def test_a_durable_builder_starts_the_write_back_as_it_goes(tmp_path, monkeypatch, durable):
    """Each run of ``WRITEBACK_BYTES`` of the .bin, in order and flushed to the file first, has its
    write-back started (the fsync at close then has little left to wait for); the bytes are the same."""
    started: list[tuple[int, int]] = []
    real = idd.start_writeback

    def record(fd: int, offset: int, length: int) -> None:
        assert offset + length <= os.fstat(fd).st_size  # flushed first
        started.append((offset, length))
        real(fd, offset, length)

    monkeypatch.setattr(idd, "start_writeback", record)
    monkeypatch.setattr(idd, "WRITEBACK_BYTES", 1000)
    docs = [np.arange(n, dtype=np.int32) for n in range(1, 80)]
    with IndexedDatasetBuilder(tmp_path / "d", np.int32, durable=durable) as b:
        for doc in docs:
            b.add_document(doc)
    written = IndexedDataset(tmp_path / "d")
    assert [written.document(i).tolist() for i in range(79)] == [d.tolist() for d in docs]
    if not durable:
        assert started == []
        return
    ends = list(itertools.accumulate(n for _, n in started))
    assert [offset for offset, _ in started] == [0, *ends[:-1]] and all(n >= 1000 for _, n in started)
    assert 0 <= (tmp_path / "d.bin").stat().st_size - ends[-1] < 1000 + 4 * 79


def test_add_documents_checks_lengths(tmp_path):
    with IndexedDatasetBuilder(tmp_path / "x", np.uint16) as b:
        with pytest.raises(ValueError, match="sum to 3 but 4 tokens"):
            b.add_documents([1, 2, 3, 4], [1, 2])
        with pytest.raises(ValueError, match=r"in 0\.\.2\*\*31-1"):
            b.add_documents([1, 2], [3, -1])
        b.add_documents([], [])
        b.add_documents([], [0, 0])
    assert IndexedDataset(tmp_path / "x").doc_idx.tolist() == [0, 1, 2]


def test_growth_beyond_initial_capacity(tmp_path):
    n = 200_000  # > the 65 536 preallocated entries
    lengths = np.arange(n) % 3
    with IndexedDatasetBuilder(tmp_path / "g", np.uint16) as b:
        b.add_documents(np.ones(int(lengths.sum()), np.uint16), lengths)
        for i in range(70_000):
            b.add_item([i % 7])
        b.end_document()
        assert (b.num_documents, b.num_sequences) == (n + 1, n + 70_000)
    ds = IndexedDataset(tmp_path / "g")
    assert ds.lengths[:n].tolist() == lengths.tolist()
    assert ds.document(n).tolist() == [i % 7 for i in range(70_000)]
    verify(tmp_path / "g")


@pytest.mark.parametrize(
    ("dtype", "tokens", "error"),
    [
        (np.uint16, [1, 65536], ValueError),
        (np.uint16, [-1], ValueError),
        (np.int32, [2**31], ValueError),
        (np.int32, np.array([1.0]), TypeError),
        (np.int32, [[1, 2]], ValueError),
    ],
)
def test_tokens_that_do_not_fit_are_rejected(tmp_path, dtype, tokens, error):
    with IndexedDatasetBuilder(tmp_path / "x", dtype) as b:
        with pytest.raises(error):
            b.add_document(tokens)
        b.add_document(np.array([65535], np.uint16))  # safe cast from a narrower type
    assert IndexedDataset(tmp_path / "x")[0].tolist() == [65535]


def test_empty_documents(tmp_path):
    with IndexedDatasetBuilder(tmp_path / "e", np.uint16) as b:
        b.end_document()  # no sequence at all (Megatron: repeated doc_idx value)
        b.add_document([7, 8])
        b.add_document([])  # one empty sequence
        b.end_document()
    ds = IndexedDataset(tmp_path / "e")
    assert ds.doc_idx.tolist() == [0, 0, 1, 2, 2]
    assert ds.lengths.tolist() == [2, 0]
    assert [ds.document(i).tolist() for i in range(4)] == [[], [7, 8], [], []]
    span = ds.documents(2, 4)
    assert (span.seq_start, span.seq_stop, span.byte_start, span.byte_stop) == (1, 2, 4, 4)
    assert verify(tmp_path / "e")["documents"] == 4


def test_dataset_with_nothing(tmp_path):
    with IndexedDatasetBuilder(tmp_path / "z", np.int32):
        pass
    assert (tmp_path / "z.idx").stat().st_size == 42
    assert (tmp_path / "z.bin").stat().st_size == 0
    ds = IndexedDataset(tmp_path / "z")
    assert verify(tmp_path / "z") == {"documents": 0, "sequences": 0, "tokens": 0, "dtype": "int32"}
    assert ds.documents(0, 0).num_tokens == 0
    with pytest.raises(IndexError):
        ds[0]


def test_documents_span_and_bounds(tmp_path):
    build_dataset(tmp_path / "d", [[[1, 2], [3]], [[4, 5, 6]], [], [[7]]], np.int32)
    ds = IndexedDataset(tmp_path / "d")
    span = ds.documents(1, 4)
    assert (span.doc_start, span.doc_stop, span.seq_start, span.seq_stop) == (1, 4, 2, 4)
    assert (span.byte_start, span.byte_stop, span.nbytes, span.num_tokens) == (12, 28, 16, 4)
    assert span.tokens.tolist() == [4, 5, 6, 7]
    assert ds.document(0).tolist() == [1, 2, 3]
    for bad in [(-1, 1), (2, 1), (0, 5)]:
        with pytest.raises(IndexError):
            ds.documents(*bad)
    with pytest.raises(IndexError):
        ds[4]


# -- atomicity ---------------------------------------------------------------------------------------


def test_exception_in_builder_leaves_no_files(tmp_path):
    with pytest.raises(RuntimeError, match="boom"), IndexedDatasetBuilder(tmp_path / "a", np.uint16) as b:
        b.add_document([1, 2, 3])
        assert len(list(tmp_path.iterdir())) == 1  # the temporary .bin
        raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []


def test_failed_rewrite_keeps_previous_files(tmp_path):
    build_dataset(tmp_path / "a", [[[1]]])
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    with pytest.raises(RuntimeError), IndexedDatasetBuilder(tmp_path / "a", np.uint16) as b:
        b.add_document([9, 9])
        raise RuntimeError
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_unterminated_document_aborts(tmp_path):
    message = r"1 sequence\(s\) added after the last end_document"
    with (
        pytest.raises(IndexedDatasetError, match=message),
        IndexedDatasetBuilder(tmp_path / "u", np.uint16) as b,
    ):
        b.add_document([1])
        b.add_item([2])
    assert list(tmp_path.iterdir()) == []


def test_explicit_abort_and_closed_builder(tmp_path):
    b = IndexedDatasetBuilder(tmp_path / "x", np.uint16)
    b.add_document([1])
    b.abort()
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ValueError, match="closed"):
        b.add_document([1])


# -- verify ------------------------------------------------------------------------------------------


def _truncate(prefix: Path, n: int) -> None:
    p = Path(f"{prefix}.idx")
    p.write_bytes(p.read_bytes()[:n])


VIOLATIONS = {
    "missing idx": (lambda p: Path(f"{p}.idx").unlink(), r"\.idx: missing file"),
    "missing bin": (lambda p: Path(f"{p}.bin").unlink(), r"\.bin: missing file"),
    "empty idx": (lambda p: _truncate(p, 0), r"\.idx: truncated header \(0 bytes, need 34\)"),
    "short header": (lambda p: _truncate(p, 20), r"\.idx: truncated header \(20 bytes, need 34\)"),
    "truncated idx": (
        lambda p: _truncate(p, 74),
        r"\.idx: truncated: 74 bytes, header says 34 \+ 12\*S \+ 8\*D = 82 \(S=2, D=3\)",
    ),
    "trailing bytes": (
        lambda p: Path(f"{p}.idx").write_bytes(GOLDEN + b"\0\0\0"),
        r"\.idx: trailing bytes: 85 bytes",
    ),
    "multimodal modes": (
        lambda p: Path(f"{p}.idx").write_bytes(GOLDEN + b"\0\0"),
        r"\.idx: trailing bytes \(multimodal sequence_modes\? not supported\)",
    ),
    "foreign file": (
        lambda p: Path(f"{p}.idx").write_bytes(b"PK\x03\x04" + bytes(100)),
        r"\.idx: bad magic b'PK\\x03\\x04.*not a Megatron MMIDIDX index",
    ),
    "foreign short file": (lambda p: Path(f"{p}.idx").write_bytes(b"{}\n"), r"\.idx: bad magic b'\{\}\\n'"),
    "bad magic 9th byte": (
        lambda p: Path(f"{p}.idx").write_bytes(raw_idx(magic=b"MMIDIDX\x00\x01")),
        r"\.idx: bad magic",
    ),
    "version": (
        lambda p: Path(f"{p}.idx").write_bytes(raw_idx(version=2)),
        r"\.idx: unsupported version 2 \(expected 1\)",
    ),
    "dtype code 9": (lambda p: Path(f"{p}.idx").write_bytes(raw_idx(code=9)), r"\.idx: unknown dtype code 9"),
    "dtype code 0": (lambda p: Path(f"{p}.idx").write_bytes(raw_idx(code=0)), r"\.idx: unknown dtype code 0"),
    "empty doc_idx": (
        lambda p: Path(f"{p}.idx").write_bytes(raw_idx(doc_idx=[])),
        r"\.idx: empty document index \(D=0\)",
    ),
    "doc_idx[0]": (
        lambda p: Path(f"{p}.idx").write_bytes(raw_idx(doc_idx=[1, 2])),
        r"\.idx: doc_idx\[0\] = 1, expected 0",
    ),
    "non-monotone": (
        lambda p: Path(f"{p}.idx").write_bytes(raw_idx(doc_idx=[0, 2, 1, 2])),
        r"\.idx: doc_idx not monotone: doc_idx\[1\] = 2 > doc_idx\[2\] = 1",
    ),
    "doc_idx[-1]": (
        lambda p: Path(f"{p}.idx").write_bytes(raw_idx(doc_idx=[0, 1])),
        r"\.idx: doc_idx\[-1\] = 1, expected S = 2",
    ),
    "negative length": (
        lambda p: Path(f"{p}.idx").write_bytes(raw_idx(lengths=[7, -2])),
        r"\.idx: negative length: lengths\[1\] = -2",
    ),
    "pointer[0]": (
        lambda p: Path(f"{p}.idx").write_bytes(raw_idx(pointers=[2, 8])),
        r"\.idx: pointers\[0\] = 2, expected 0",
    ),
    "pointer arithmetic": (
        lambda p: Path(f"{p}.idx").write_bytes(raw_idx(pointers=[0, 4])),
        r"\.idx: pointer arithmetic: pointers\[1\] - pointers\[0\] = 4, expected lengths\[0\] \* 2 = 6",
    ),
    "bin too long": (
        lambda p: Path(f"{p}.bin").write_bytes(bytes(12)),
        r"\.bin: size 12 bytes, expected tokens \* itemsize = 5 \* 2 = 10",
    ),
    "bin too short": (
        lambda p: Path(f"{p}.bin").write_bytes(bytes(9)),
        r"\.bin: size 9 bytes, expected tokens \* itemsize = 5 \* 2 = 10",
    ),
}


@pytest.mark.parametrize("name", VIOLATIONS)
def test_verify_names_each_violation(tmp_path, name):
    prefix = write_raw(tmp_path / "v", GOLDEN)
    assert verify(prefix)["tokens"] == 5  # the untouched file is valid
    damage, message = VIOLATIONS[name]
    damage(prefix)
    with pytest.raises(IndexedDatasetError, match=message) as info:
        verify(prefix)
    assert str(info.value).startswith(str(prefix))


def test_reader_refuses_reads_past_a_truncated_bin(tmp_path):
    prefix = write_raw(tmp_path / "t", GOLDEN, bytes(8))
    ds = IndexedDataset(prefix)
    assert ds[0].tolist() == [0, 0, 0]
    with pytest.raises(IndexedDatasetError, match=r"t\.bin: truncated"):
        ds[1]
    write_raw(tmp_path / "n", raw_idx(pointers=[-6, 0]))
    with pytest.raises(IndexedDatasetError, match=r"n\.idx: bad byte range \[-6, 0\)"):
        IndexedDataset(tmp_path / "n")[0]


# -- merge, copy_range, write_slice ------------------------------------------------------------------


@pytest.fixture
def three(tmp_path):
    """Three datasets whose names sort differently from the order they are merged in."""
    rng = np.random.default_rng(11)
    docs = {name: random_docs(rng, n, 100_000) for name, n in [("c", 5), ("a", 7), ("b", 4)]}
    docs["a"][2] = []
    for name, d in docs.items():
        build_dataset(tmp_path / name, d, np.int32)
    return tmp_path, docs


def test_merge_in_given_order(three):
    tmp, docs = three
    order = ["c", "a", "b"]
    summary = merge([tmp / n for n in order], tmp / "m")
    ds = IndexedDataset(tmp / "m")
    all_docs = [d for n in order for d in docs[n]]
    seqs = [s for d in all_docs for s in d]
    assert verify(tmp / "m") == ds.summary()
    assert ds.doc_idx.tolist() == np.cumsum([0] + [len(d) for d in all_docs]).tolist()
    assert ds.lengths.tolist() == [len(s) for s in seqs]
    assert ds.tokens.tolist() == [t for s in seqs for t in s]
    assert [ds.document(i).tolist() for i in range(ds.num_documents)] == [
        [t for s in d for t in s] for d in all_docs
    ]
    assert (tmp / "m.bin").read_bytes() == b"".join((tmp / f"{n}.bin").read_bytes() for n in order)
    assert summary["documents"] == len(all_docs) == 16
    assert summary["sequences"] == len(seqs)
    assert summary["tokens"] == len(ds.tokens)
    assert [Path(x["prefix"]).name for x in summary["inputs"]] == order


def test_merge_doc_idx_megatron_semantics(tmp_path):
    build_dataset(tmp_path / "x", [[[1], [2]], [[3]]])  # doc_idx [0, 2, 3]
    build_dataset(tmp_path / "y", [[], [[4]], [[5], [6]]])  # doc_idx [0, 0, 1, 3]
    merge([tmp_path / "x", tmp_path / "y", tmp_path / "x"], tmp_path / "m")
    assert IndexedDataset(tmp_path / "m").doc_idx.tolist() == [0, 2, 3, 3, 4, 6, 8, 9]


def test_merge_with_empty_input(tmp_path):
    build_dataset(tmp_path / "e", [])
    build_dataset(tmp_path / "x", [[[1, 2]]])
    merge([tmp_path / "e", tmp_path / "x", tmp_path / "e"], tmp_path / "m")
    ds = IndexedDataset(tmp_path / "m")
    assert ds.doc_idx.tolist() == [0, 1]
    assert ds.tokens.tolist() == [1, 2]


def test_merge_dtype_mismatch(tmp_path):
    build_dataset(tmp_path / "u", [[[1]]], np.uint16)
    build_dataset(tmp_path / "i", [[[1]]], np.int32)
    with pytest.raises(IndexedDatasetError, match=r"i\.idx: dtype int32 differs from .*u\.idx \(uint16\)"):
        merge([tmp_path / "u", tmp_path / "i"], tmp_path / "m")
    assert not list(tmp_path.glob("m*")) and not list(tmp_path.glob(".m*"))


def test_merge_refuses_broken_input_and_self(tmp_path):
    build_dataset(tmp_path / "ok", [[[1]]])
    write_raw(tmp_path / "bad", raw_idx(doc_idx=[0, 1]))
    with pytest.raises(IndexedDatasetError, match=r"bad\.idx: doc_idx\[-1\] = 1"):
        merge([tmp_path / "ok", tmp_path / "bad"], tmp_path / "m")
    with pytest.raises(IndexedDatasetError, match="merge output is also an input"):
        merge([tmp_path / "ok"], tmp_path / "ok")
    with pytest.raises(IndexedDatasetError, match="no inputs"):
        merge([], tmp_path / "m")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.bin", "bad.idx", "ok.bin", "ok.idx"]


@pytest.mark.parametrize("fallback", ["copy_file_range", "sendfile", "python"])
def test_copy_range_and_fallbacks(tmp_path, monkeypatch, fallback):
    src = tmp_path / "src"
    data = os.urandom(100_000)
    src.write_bytes(data)
    copied = {"copy_file_range": 0, "sendfile": 0}

    def spy(name, real):
        def call(*args):
            n = real(*args)
            copied[name] += n
            return n

        return call

    def unsupported(*args, **kwargs):
        raise OSError(errno.EXDEV, "cross-device")

    monkeypatch.setattr(os, "copy_file_range", spy("copy_file_range", os.copy_file_range))
    monkeypatch.setattr(os, "sendfile", spy("sendfile", os.sendfile))
    if fallback in ("sendfile", "python"):
        monkeypatch.setattr(os, "copy_file_range", unsupported)
    if fallback == "python":
        monkeypatch.setattr(os, "sendfile", unsupported)
    with open(tmp_path / "dst", "wb") as f:
        f.write(b"head")
        copy_range(src, 10, 5000, f)
        f.write(b"mid")
        copy_range(src, 0, len(data), f)
        copy_range(src, 5, 0, f)
        f.write(b"tail")
        with pytest.raises(IndexedDatasetError, match="ends before byte 100001"):
            copy_range(src, 1, len(data), f)
    out = (tmp_path / "dst").read_bytes()
    assert out[: 4 + 5000 + 3 + len(data) + 4] == b"head" + data[10:5010] + b"mid" + data + b"tail"
    # the path under test really copied the bytes (the last call copies what there is before failing)
    kernel = 5000 + len(data) + len(data) - 1
    expected = {
        "copy_file_range": {"copy_file_range": kernel, "sendfile": 0},
        "sendfile": {"copy_file_range": 0, "sendfile": kernel},
        "python": {"copy_file_range": 0, "sendfile": 0},
    }[fallback]
    assert copied == expected


def test_write_slice(tmp_path):
    docs = [[[1, 2], [3]], [[4]], [], [[5, 6, 7]], [[8], [9], []]]
    build_dataset(tmp_path / "s", docs, np.int32)
    for a, b in [(0, 5), (1, 4), (2, 3), (3, 3), (4, 5), (0, 1)]:
        out = tmp_path / f"out_{a}_{b}"
        info = write_slice(tmp_path / "s", [(a, b)], out)
        ds = IndexedDataset(out)
        assert verify(out) == ds.summary()
        assert ds.doc_idx.tolist() == np.cumsum([0] + [len(d) for d in docs[a:b]]).tolist()
        assert ds.tokens.tolist() == [t for d in docs[a:b] for s in d for t in s]
        assert info["documents"] == b - a and info["tokens"] == ds.num_tokens
        ((start, stop),) = info["byte_ranges"]
        assert stop - start == 4 * ds.num_tokens
    with pytest.raises(IndexError):
        write_slice(tmp_path / "s", [(3, 6)], tmp_path / "bad")
    assert not list(tmp_path.glob("*bad*"))


def test_slices_merge_back_to_the_source(tmp_path):
    rng = np.random.default_rng(5)
    build_dataset(tmp_path / "src", random_docs(rng, 50, 65536), np.uint16)
    cuts = [0, 13, 13, 31, 50]
    parts = []
    for i, (a, b) in enumerate(itertools.pairwise(cuts)):
        write_slice(tmp_path / "src", [(a, b)], tmp_path / f"p{i}")
        parts.append(tmp_path / f"p{i}")
    merge(parts, tmp_path / "back")
    for ext in ("bin", "idx"):
        assert (tmp_path / f"back.{ext}").read_bytes() == (tmp_path / f"src.{ext}").read_bytes()


# -- command line ------------------------------------------------------------------------------------


def test_cli_verify_info_merge(tmp_path, capsys):
    build_dataset(tmp_path / "a", [[[1, 2, 3]], [[4, 5]]])
    build_dataset(tmp_path / "b", [[[6]]])
    write_raw(tmp_path / "bad", raw_idx(version=3))

    assert snakepack(["verify", str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    assert capsys.readouterr().out.count("ok ") == 2
    assert snakepack(["verify", str(tmp_path / "a"), str(tmp_path / "bad"), str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [
        f"snakepack verify: error: {tmp_path / 'bad'}.idx: unsupported version 3 (expected 1)",
        f"snakepack verify: error: {tmp_path / 'none'}.idx: missing file",
    ]

    assert snakepack(["info", str(tmp_path / "a")]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info == {
        "prefix": str(tmp_path / "a"),
        "documents": 2,
        "sequences": 2,
        "tokens": 5,
        "dtype": "uint16",
    }

    log = tmp_path / "logs" / "merge.json"
    args = [
        "merge",
        "--output",
        str(tmp_path / "m"),
        "--log",
        str(log),
        str(tmp_path / "b"),
        str(tmp_path / "a"),
    ]
    assert snakepack(args) == 0
    assert IndexedDataset(tmp_path / "m").tokens.tolist() == [6, 1, 2, 3, 4, 5]
    entry = json.loads(log.read_text())
    assert [Path(x["prefix"]).name for x in entry["inputs"]] == ["b", "a"]
    assert entry["inputs"][1]["idx_blake2b"] == hashlib.blake2b((tmp_path / "a.idx").read_bytes()).hexdigest()
    assert entry["inputs"][1]["bin_bytes"] == 10
    assert (entry["documents"], entry["sequences"], entry["tokens"]) == (3, 3, 6)

    build_dataset(tmp_path / "i32", [[[1]]], np.int32)
    assert (
        snakepack(["merge", "--output", str(tmp_path / "x"), str(tmp_path / "a"), str(tmp_path / "i32")]) == 2
    )
    assert "all merge inputs must share one dtype" in capsys.readouterr().err
    assert snakepack(["info", str(tmp_path / "nope")]) == 2
    assert capsys.readouterr().err == f"snakepack info: error: {tmp_path / 'nope'}.idx: missing file\n"


def test_cli_as_module(tmp_path):
    build_dataset(tmp_path / "a", [[[1]]])
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "workflow_scripts",
            "verify",
            str(tmp_path / "a"),
            str(tmp_path / "z"),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 2
    assert run.stdout.startswith(f"ok {tmp_path / 'a'}: 1 documents, 1 sequences, 1 tokens, uint16")
    assert run.stderr == f"snakepack verify: error: {tmp_path / 'z'}.idx: missing file\n"


def test_the_builder_index_spills_to_disk_and_writes_the_same_bytes(tmp_path, monkeypatch):
    """The per-document index is buffered and spilled in chunks, so its memory does not grow with the
    documents; the files are the same whatever the buffer size."""
    rng = np.random.default_rng(5)
    docs = [[list(rng.integers(0, 500, int(n))) for n in rng.integers(1, 4, 1)] for _ in range(300)]
    docs += [[list(rng.integers(0, 500, 3)), list(rng.integers(0, 500, 2))] for _ in range(50)]  # 2 sequences
    reference = build_dataset(tmp_path / "a", docs)
    monkeypatch.setattr(idd, "INDEX_CHUNK", 7)
    spilled = build_dataset(tmp_path / "b", docs)
    for ext in (".bin", ".idx"):
        assert Path(reference + ext).read_bytes() == Path(spilled + ext).read_bytes()
    with idd.IndexedDatasetBuilder(tmp_path / "c", np.int32) as builder:
        flat = rng.integers(0, 500, 1000)
        builder.add_documents(flat, np.full(100, 10))  # extends across many buffers
    assert verify(tmp_path / "c")["documents"] == 100 and not list(tmp_path.glob("tmp*"))
