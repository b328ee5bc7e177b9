"""Damaged inputs (truncated or corrupt .gz/.zst streams, unreadable parquet): the readable prefix is kept,
the rest quarantined with its byte offset and reason; strict mode fails naming file and offset."""

from __future__ import annotations

import gzip
import random
import re
import subprocess
import sys
import zlib
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from tests.utils import shard_records, write_jsonl
from workflow_scripts.ingest.shards import IngestError, IngestSettings, check_counts, ingest

ROOT = Path(__file__).resolve().parents[2]
N = 2000
WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa"]


def options(**kw: Any) -> IngestSettings:
    return IngestSettings(shard_size=1 << 20, lang="en", domain="web", subdomain="cc", **kw)


def originals() -> list[dict[str, str]]:
    rng = random.Random(7)
    return [{"id": f"d{i}", "text": " ".join(rng.choices(WORDS, k=rng.randint(5, 40)))} for i in range(N)]


def jsonl_bytes(records: list[dict[str, str]]) -> bytes:
    return b"".join(orjson.dumps(r) + b"\n" for r in records)


def compress(data: bytes, ext: str) -> bytes:
    return gzip.compress(data, mtime=0) if ext == "gz" else zstandard.ZstdCompressor().compress(data)


def decompressed_prefix(cut: bytes, ext: str) -> bytes:
    """All that the cut stream decompresses to (incomplete blocks included where the codec gives them)."""
    if ext == "gz":
        return zlib.decompressobj(wbits=31).decompress(cut)
    return zstandard.ZstdDecompressor().decompressobj().decompress(cut)


def cut_file(tmp_path: Path, ext: str) -> tuple[Path, bytes]:
    """A 2,000-record ``.jsonl.{ext}`` cut at 60 % of its bytes; returns it and its cut bytes."""
    data = compress(jsonl_bytes(originals()), ext)
    path = tmp_path / f"en_web_cc_part-1.jsonl.{ext}"
    path.write_bytes(data[: len(data) * 6 // 10])
    return path, path.read_bytes()


def quarantine(out: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in (out / "quarantine.jsonl").read_bytes().splitlines()]


def intact(tmp_path: Path) -> Path:
    return write_jsonl(tmp_path / "en_web_cc_part-2.jsonl", [{"text": "after"}, {"text": "the damage"}])


@pytest.mark.parametrize("ext", ["gz", "zst"])
def test_truncated_stream_keeps_the_prefix_and_quarantines_the_rest(tmp_path: Path, ext: str) -> None:
    path, cut = cut_file(tmp_path, ext)
    stats = ingest([path, intact(tmp_path)], tmp_path / "out", options())
    records = shard_records(tmp_path / "out")
    kept = [(r["id"], r["text"]) for r in records if r["source"] == path.name]
    assert 0 < len(kept) < N
    assert kept == [(r["id"], r["text"]) for r in originals()[: len(kept)]]
    assert [r["text"] for r in records[len(kept) :]] == ["after", "the damage"]  # the run went on
    good = len(jsonl_bytes(originals()[: len(kept)]))
    assert len(decompressed_prefix(cut, ext)) >= good
    [entry] = quarantine(tmp_path / "out")
    offset = entry.pop("offset")
    assert isinstance(offset, int) and 0 < offset <= len(cut)
    assert entry == {
        "file": path.name,
        "line": len(kept) + 1,
        "reason": "unreadable_rest",
        "raw": "",
        "data_offset": good,
        "error": (
            "truncated gzip stream: Compressed file ended before the end-of-stream marker was reached"
            if ext == "gz"
            else "truncated zstd stream (the last frame has no end)"
        ),
    }
    assert stats["rejected"]["unreadable_rest"] == 1 and sum(stats["rejected"].values()) == 1
    assert (stats["docs_in"], stats["docs_out"]) == (len(kept) + 1 + 2, len(kept) + 2)
    assert stats["inputs"][0]["docs_in"] == len(kept) + 1
    check_counts(stats)


def test_a_partial_last_line_is_not_ingested(tmp_path: Path) -> None:
    """The cut falls inside a record: its decompressed start is there, but it belongs to the damaged rest."""
    path, cut = cut_file(tmp_path, "gz")
    prefix = decompressed_prefix(cut, "gz")
    assert not prefix.endswith(b"\n")
    stats = ingest([path], tmp_path / "out", options())
    [entry] = quarantine(tmp_path / "out")
    assert entry["data_offset"] == prefix.rfind(b"\n") + 1
    assert stats["docs_out"] == prefix.count(b"\n") == entry["line"] - 1


@pytest.mark.parametrize("ext", ["gz", "zst"])
def test_strict_fails_naming_file_offset_and_reason(tmp_path: Path, ext: str) -> None:
    path, cut = cut_file(tmp_path, ext)
    out = tmp_path / "out"
    with pytest.raises(IngestError) as err:
        ingest([intact(tmp_path), path], out, options(strict=True))
    pattern = (
        rf"{re.escape(str(path))}: cannot read as jsonl\.{ext} at byte {len(cut)} \(line \d+\): truncated "
    )
    assert re.fullmatch(pattern + r".*", str(err.value))
    assert "\n" not in str(err.value)
    assert list(out.iterdir()) == []


def test_cli_non_strict_finishes_and_strict_exits_2(tmp_path: Path) -> None:
    path, cut = cut_file(tmp_path, "gz")
    group = ["--lang", "en", "--domain", "web", "--subdomain", "cc", "--shard-size", "100000"]

    def run(out: str, *extra: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "workflow_scripts", "ingest", "--input", str(path), "--output-dir"]
        return subprocess.run(
            [*cmd, str(tmp_path / out), *group, *extra], cwd=ROOT, capture_output=True, text=True, timeout=60
        )

    proc = run("out")
    assert proc.returncode == 0, proc.stderr
    assert [(e["file"], e["reason"]) for e in quarantine(tmp_path / "out")] == [
        (path.name, "unreadable_rest")
    ]
    proc = run("strict", "--strict")
    assert proc.returncode == 2
    assert f"snakepack ingest: error: {path}: cannot read as jsonl.gz at byte {len(cut)} " in proc.stderr


def test_not_gzip_and_trailing_garbage_are_corrupt_streams(tmp_path: Path) -> None:
    plain = tmp_path / "en_web_cc_part-1.jsonl.gz"
    plain.write_bytes(b'{"text": "not compressed"}\n')
    data = jsonl_bytes(originals()[:10])
    tail = tmp_path / "en_web_cc_part-2.jsonl.gz"
    tail.write_bytes(gzip.compress(data, mtime=0) + b"garbage after the member")
    stats = ingest([plain, tail], tmp_path / "out", options())
    assert [r["id"] for r in shard_records(tmp_path / "out")] == [f"d{i}" for i in range(10)]
    entries = quarantine(tmp_path / "out")
    assert [(e["file"], e["line"], e["data_offset"]) for e in entries] == [
        (plain.name, 1, 0),
        (tail.name, 11, len(data)),
    ]
    assert all(e["error"].startswith("corrupt gzip stream: Not a gzipped file") for e in entries)
    assert stats["rejected"]["unreadable_rest"] == 2
    check_counts(stats)


def parquet_file(path: Path, rows: int = 3000) -> Path:
    pq.write_table(pa.table({"text": [f"row {i}" for i in range(rows)]}), path, row_group_size=1000)
    return path


def test_truncated_parquet_is_quarantined_whole(tmp_path: Path) -> None:
    path = parquet_file(tmp_path / "en_web_cc_part-1.parquet")
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    stats = ingest([path, intact(tmp_path)], tmp_path / "out", options())
    assert [r["text"] for r in shard_records(tmp_path / "out")] == ["after", "the damage"]
    [entry] = quarantine(tmp_path / "out")
    assert entry["error"].startswith("corrupt parquet file: Parquet magic bytes not found in footer")
    assert entry | {"error": None} == {
        "file": path.name,
        "line": 1,
        "reason": "unreadable_rest",
        "raw": "",
        "offset": 0,
        "data_offset": None,
        "error": None,
    }
    assert (stats["docs_in"], stats["docs_out"], stats["rejected"]["unreadable_rest"]) == (3, 2, 1)
    check_counts(stats)
    with pytest.raises(
        IngestError, match=rf"^{re.escape(str(path))}: cannot read as parquet at byte 0 \(line 1\)"
    ):
        ingest([path], tmp_path / "strict", options(strict=True))


def test_corrupt_parquet_row_group_keeps_the_ones_before(tmp_path: Path) -> None:
    path = parquet_file(tmp_path / "en_web_cc_part-1.parquet")
    column = pq.ParquetFile(path).metadata.row_group(1).column(0)
    start = column.dictionary_page_offset if column.has_dictionary_page else column.data_page_offset
    data = bytearray(path.read_bytes())
    data[start : start + 20] = b"\xff" * 20  # the page header of the second row group
    path.write_bytes(bytes(data))
    stats = ingest([path], tmp_path / "out", options())
    assert [r["text"] for r in shard_records(tmp_path / "out")] == [f"row {i}" for i in range(1000)]
    [entry] = quarantine(tmp_path / "out")
    assert (entry["line"], entry["offset"], entry["reason"]) == (1001, start, "unreadable_rest")
    assert entry["error"].startswith("corrupt parquet file: ")
    check_counts(stats)


@pytest.mark.parametrize("ext", ["gz", "zst", "zst-frames", "parquet", "jsonl"])
def test_intact_files_are_unaffected(tmp_path: Path, ext: str) -> None:
    data = jsonl_bytes(originals())
    path = tmp_path / f"en_web_cc_part-1.jsonl.{ext.partition('-')[0]}"
    if ext == "zst-frames":
        path.write_bytes(b"".join(compress(data[i : i + 5000], "zst") for i in range(0, len(data), 5000)))
    elif ext in ("gz", "zst"):
        path.write_bytes(compress(data, ext))
    elif ext == "parquet":
        path = parquet_file(tmp_path / "en_web_cc_part-1.parquet")
    else:  # an uncompressed file is never truncated: a last line without a newline is a normal record
        path = tmp_path / "en_web_cc_part-1.jsonl"
        path.write_bytes(data.rstrip(b"\n"))
    stats = ingest([path], tmp_path / "out", options())
    expected = 3000 if ext == "parquet" else N
    assert stats["docs_in"] == stats["docs_out"] == len(shard_records(tmp_path / "out")) == expected
    assert (tmp_path / "out" / "quarantine.jsonl").read_bytes() == b""
