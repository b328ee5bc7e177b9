"""Ingest memory follows bytes: a zstd bomb and a huge line cost a bounded multiple of one line."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import pytest
import zstandard

from workflow_scripts.ingest import readers, shards
from workflow_scripts.ingest.readers import Reject, decode_txt_line, is_utf8
from workflow_scripts.ingest.shards import has_words, stripped_len

REPO = Path(__file__).resolve().parents[2]
MIB = 1 << 20


def _texts() -> list[str]:
    rng = random.Random(11)
    pieces = ["a", "bc", " ", "  ", "\n", "\t", "\u3000", "ж", "word", "\u00a0", "x\u0301"]
    texts = ["".join(rng.choices(pieces, k=rng.randint(0, 40))) for _ in range(400)]
    return [*texts, "", " " * 30, "a" * 30, " a" * 15, "a " * 15]


def test_stripped_len_and_has_words_in_slices(monkeypatch: pytest.MonkeyPatch) -> None:
    for scan in (1, 2, 3, 7, 1 << 20):
        monkeypatch.setattr(shards, "SCAN", scan)
        for text in _texts():
            assert stripped_len(text) == len(text.strip()), (scan, text)
            for n in range(0, 8):
                assert has_words(text, n) == (len(text.split()) >= n), (scan, text, n)


def test_utf8_checked_in_slices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(readers, "SCAN", 3)
    good = "aж€😀 b".encode()
    for data in [good, good * 3, b"", b"\xff", good + b"\xe2\x82", b"\xe2\x82" + good, good[:2] + good[3:]]:
        try:
            data.decode()
            valid = True
        except UnicodeDecodeError:
            valid = False
        assert is_utf8(data) == valid, data
    assert decode_txt_line(b"caf\xc3\xa9\r\n\r\n")[0] == "café"
    assert decode_txt_line(b"\n")[0] == ""
    with pytest.raises(Reject, match="invalid_utf8"):
        decode_txt_line(b"caf\xc3\n")


def _ingest_peak_mib(raw: Path, out: Path) -> int:
    """Peak RSS (MiB) of the ingest CLI on ``raw``, in a fresh interpreter (VmHWM: ru_maxrss would count the
    memory of this process, which forked it)."""
    script = (
        "import sys\n"
        "from workflow_scripts.ingest.shards import main\n"
        "main(sys.argv[1:])\n"
        "print(next(x for x in open('/proc/self/status') if x.startswith('VmHWM:')).split()[1])\n"
    )
    args = [
        "--input",
        str(raw),
        "--output-dir",
        str(out),
        "--lang",
        "en",
        "--domain",
        "web",
        "--subdomain",
        "x",
    ]
    proc = subprocess.run(
        [sys.executable, "-c", script, *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return int(proc.stdout.split()[-1]) // 1024


def _write_zst(path: Path, parts: list[tuple[bytes, int]]) -> None:
    """A .zst of ``count`` copies of each ``part`` in turn, written in pieces."""
    with open(path, "wb") as raw, zstandard.ZstdCompressor(level=3).stream_writer(raw) as out:
        for part, count in parts:
            for _ in range(count):
                out.write(part)


def test_a_zstd_bomb_of_many_documents_is_ingested_in_bounded_memory(tmp_path: Path) -> None:
    raw = tmp_path / "bomb.jsonl.zst"
    doc = b'{"text": "start' + b" " * MIB + b'end"}\n'
    _write_zst(raw, [(doc, 160)])
    assert raw.stat().st_size < 160 * MIB // 10_000
    peak = _ingest_peak_mib(raw, tmp_path / "out")
    shard = next((tmp_path / "out").glob("*.jsonl"))
    assert shard.stat().st_size > 160 * MIB
    # one 1 MiB document at a time: the interpreter and a few MiB (all at once, more than 160)
    assert peak < 80, f"ingest peak RSS {peak} MiB for 160 MiB of 1 MiB documents"


def test_a_huge_line_costs_a_few_times_its_size(tmp_path: Path) -> None:
    raw = tmp_path / "line.jsonl.zst"
    _write_zst(raw, [(b'{"text": "', 1), (b"word " * (MIB // 5), 48), (b'"}\n{"text": "next"}\n', 1)])
    peak = _ingest_peak_mib(raw, tmp_path / "out")
    # reading it (2 x 48 MiB), its text (48) and its record (48), the interpreter
    assert peak < 48 * 5, f"ingest peak RSS {peak} MiB for one 48 MiB line"
