"""Whole files that hold no usable text: a 0-byte or otherwise invalid .gz/.zst, a binary file named .jsonl,
a parquet file whose every row is rejected. Non-strict: counted (one unit for a file that cannot be read at
all), quarantined and named in the input's stats; strict: an error naming the file and the reason."""

from __future__ import annotations

import gzip
import random
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from tests.utils import write_jsonl
from workflow_scripts.ingest.shards import (
    IngestError,
    IngestSettings,
    RejectedRecordError,
    check_counts,
    ingest,
)


def options(**kw: Any) -> IngestSettings:
    return IngestSettings(shard_size=1 << 20, lang="en", domain="web", subdomain="cc", **kw)


def binary(seed: int = 3) -> bytes:
    return random.Random(seed).randbytes(5000)


def parquet(path: Path) -> None:
    pq.write_table(pa.table({"content": ["one text", "another text"]}), path)  # no "text" column


# name -> (writer of the file, rejected reasons of a non-strict run, the strict error's reason)
BAD: dict[str, tuple[Callable[[Path], Any], dict[str, int], str]] = {
    "empty.jsonl.gz": (
        lambda p: p.write_bytes(b""),
        {"unreadable_rest": 1},
        "empty file: 0 bytes is no gzip stream",
    ),
    "empty.jsonl.zst": (
        lambda p: p.write_bytes(b""),
        {"unreadable_rest": 1},
        "empty file: 0 bytes is no zstd stream",
    ),
    "plain.jsonl.gz": (
        lambda p: p.write_bytes(b'{"text": "not compressed"}\n'),
        {"unreadable_rest": 1},
        "corrupt gzip stream: Not a gzipped file",
    ),
    "plain.jsonl.zst": (
        lambda p: p.write_bytes(b'{"text": "not compressed"}\n'),
        {"unreadable_rest": 1},
        "corrupt zstd stream",
    ),
    "image.jsonl": (lambda p: p.write_bytes(binary()), {"unreadable_rest": 1}, "binary data, not text"),
    "image.txt.gz": (
        lambda p: p.write_bytes(gzip.compress(binary(), mtime=0)),
        {"unreadable_rest": 1},
        "binary data, not text",
    ),
    "image.jsonl.zst": (
        lambda p: p.write_bytes(zstandard.ZstdCompressor().compress(binary())),
        {"unreadable_rest": 1},
        "binary data, not text",
    ),
    "columns.parquet": (parquet, {"missing_text": 2}, "rejected record (missing_text)"),
}


def quarantine(out: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in (out / "quarantine.jsonl").read_bytes().splitlines()]


@pytest.mark.parametrize("name", BAD)
def test_non_strict_counts_quarantines_and_names_the_file(tmp_path: Path, name: str) -> None:
    write, reasons, error = BAD[name]
    bad = tmp_path / f"en_web_cc_{name}"
    write(bad)
    good = write_jsonl(tmp_path / "en_web_cc_good.jsonl", [{"text": "kept"}])
    stats = ingest([bad, good], tmp_path / "out", options())
    check_counts(stats)
    assert {k: v for k, v in stats["rejected"].items() if v} == reasons
    assert (stats["docs_in"], stats["docs_out"]) == (sum(reasons.values()) + 1, 1)
    entry = next(i for i in stats["inputs"] if i["path"] == str(bad))
    assert entry["rejected"] == reasons and entry["docs_out"] == 0
    assert {q["file"] for q in quarantine(tmp_path / "out")} == {bad.name}
    if "unreadable_rest" in reasons:
        assert entry["unreadable"].startswith(error)
        assert quarantine(tmp_path / "out")[0]["error"] == entry["unreadable"]
    good_entry = next(i for i in stats["inputs"] if i["path"] == str(good))
    assert good_entry["rejected"] == {} and good_entry["unreadable"] is None


@pytest.mark.parametrize("name", BAD)
def test_strict_fails_naming_the_file_and_the_reason(tmp_path: Path, name: str) -> None:
    write, _, error = BAD[name]
    bad = tmp_path / f"en_web_cc_{name}"
    write(bad)
    out = tmp_path / "out"
    with pytest.raises(IngestError) as err:
        ingest([bad], out, options(strict=True))
    message = str(err.value)
    assert message.startswith(f"{bad}:") and error in message and "\n" not in message
    if isinstance(err.value, RejectedRecordError):
        assert message == f"{bad}:1: {error}"
    else:
        assert re.match(rf"{re.escape(str(bad))}: cannot read as \S+ at byte \d+ \(line 1\): ", message)
    assert not out.exists() or list(out.iterdir()) == []


@pytest.mark.parametrize(
    "name", ["empty.jsonl", "empty.txt", "header-only.jsonl.gz", "header-only.jsonl.zst"]
)
def test_an_empty_but_valid_file_is_zero_documents_even_strict(tmp_path: Path, name: str) -> None:
    """An empty plain file, or a valid compressed stream of nothing, holds no document: not an error."""
    path = tmp_path / f"en_web_cc_{name}"
    if name.endswith(".gz"):
        path.write_bytes(gzip.compress(b"", mtime=0))
    elif name.endswith(".zst"):
        path.write_bytes(zstandard.ZstdCompressor().compress(b""))
    else:
        path.write_bytes(b"")
    stats = ingest([path], tmp_path / "out", options(strict=True))
    assert (stats["docs_in"], stats["docs_out"], sum(stats["rejected"].values())) == (0, 0, 0)


def test_a_nul_byte_after_the_first_block_is_a_line_reject_not_a_binary_file(tmp_path: Path) -> None:
    """Only the start of a file decides that it is binary; later damage stays a per-line reject."""
    lines = [orjson.dumps({"text": f"doc {i} " + "x" * 100}) for i in range(200)]
    path = write_jsonl(tmp_path / "en_web_cc_late.jsonl", [*lines, b'{"text": "a\x00b"'])
    stats = ingest([path], tmp_path / "out", options())
    assert stats["docs_out"] == 200 and stats["inputs"][0]["rejected"] == {"malformed_json": 1}
