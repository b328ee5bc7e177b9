"""Reading .zst files: every frame, truncation is an error, and memory bounded by bytes (a zstd bomb)."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import zstandard

from workflow_scripts.core import fsio
from workflow_scripts.core.fsio import open_binary

REPO = Path(__file__).resolve().parents[2]
MIB = 1 << 20


def _bomb(path: Path, lines: list[tuple[bytes, int]]) -> int:
    """Write a .zst of ``count`` copies of each ``piece`` in turn (streamed); return the expanded size."""
    size = 0
    with open(path, "wb") as raw, zstandard.ZstdCompressor(level=3).stream_writer(raw) as out:
        for piece, count in lines:
            block = piece * max(1, MIB // len(piece))
            for _ in range(count * len(piece) // len(block)):
                out.write(block)
            out.write(piece * (count % (len(block) // len(piece))))
            size += len(piece) * count
    return size


def _peak_growth_mib(path: Path, code: str) -> tuple[str, float]:
    """Run ``code`` (``f``: ``open_binary(path)``) in a fresh interpreter: its output and how much the peak
    RSS grew while it ran (MiB; VmHWM: ru_maxrss would count the memory of this process, which forked it)."""
    script = (
        "from workflow_scripts.core.fsio import open_binary\n"
        "def peak():\n"
        "    return int(next(x for x in open('/proc/self/status') if x.startswith('VmHWM:')).split()[1])\n"
        "before = peak()\n"
        f"with open_binary({str(path)!r}) as f:\n"
        f"    result = {code}\n"
        "print(result, (peak() - before) / 1024)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, check=True, timeout=60
    )
    result, growth = proc.stdout.rsplit(maxsplit=1)
    return result, float(growth)


def test_a_zstd_bomb_is_read_line_by_line_in_bounded_memory(tmp_path: Path) -> None:
    path = tmp_path / "bomb.jsonl.zst"
    line = b" " * (64 * 1024 - 1) + b"\n"
    size = _bomb(path, [(b'{"text": "first"}\n', 1), (line, 3200), (b'{"text": "last"}\n', 1)])
    assert size > 200 * MIB and path.stat().st_size < size // 5000
    result, growth = _peak_growth_mib(path, "sorted(set(map(len, f)))")
    assert result == f"[17, 18, {64 * 1024}]"
    assert growth < 20, f"reading {size / MIB:.0f} MiB line by line raised the peak RSS by {growth:.0f} MiB"


def test_a_huge_line_costs_at_most_about_twice_its_size(tmp_path: Path) -> None:
    path = tmp_path / "line.jsonl.zst"
    _bomb(path, [(b"x", 64 * MIB), (b"\n", 1), (b"tail\n", 1)])
    result, growth = _peak_growth_mib(path, "[len(x) for x in f]")
    assert result == f"[{64 * MIB + 1}, 5]"
    assert growth < 2.5 * 64, f"a 64 MiB line raised the peak RSS by {growth:.0f} MiB"


def test_one_read_returns_at_most_max_read_bytes(tmp_path: Path) -> None:
    path = tmp_path / "spaces.zst"
    size = _bomb(path, [(b" ", 64 * MIB)])
    reader = fsio.ZstdFrameReader(str(path))
    try:
        buffer = bytearray(64 * MIB)
        sizes = []
        while n := reader.readinto(buffer):
            sizes.append(n)
    finally:
        reader.close()
    assert sum(sizes) == size and max(sizes) <= fsio.MAX_READ


def _frames() -> tuple[bytes, bytes, list[int]]:
    """Compressed frames of several kinds (with and without checksum and content size, streamed, skippable,
    empty), their expanded content and the offsets where a frame ends."""
    parts = [
        zstandard.ZstdCompressor().compress(b'{"text": "one"}\n' * 5000),
        zstandard.ZstdCompressor(write_checksum=True).compress(b'{"text": "two"}\n'),
        struct.pack("<II", 0x184D2A53, 5) + b"skip!",
        zstandard.ZstdCompressor(write_content_size=False, write_checksum=True).compress(os.urandom(300_000)),
        zstandard.ZstdCompressor().compress(b""),
        zstandard.ZstdCompressor(level=19).compress(b"x" * 1_000_000 + b"\n"),
    ]
    content = b"".join(
        zstandard.ZstdDecompressor().decompressobj().decompress(p) for p in parts if p[:1] != b"S"
    )
    ends = [sum(map(len, parts[: i + 1])) for i in range(len(parts))]
    return b"".join(parts), content, [0, *ends]


def test_every_frame_is_read(tmp_path: Path) -> None:
    data, content, _ = _frames()
    path = tmp_path / "multi.jsonl.zst"
    path.write_bytes(data)
    with open_binary(path) as f:
        assert f.read() == content
    with open_binary(path) as f:
        assert sum(1 for _ in f) == content.count(b"\n")  # it ends with a newline
    path.write_bytes(b"")
    with open_binary(path) as f:
        assert f.read() == b""


def test_a_cut_anywhere_but_between_frames_is_an_error(tmp_path: Path) -> None:
    data, content, ends = _frames()
    path = tmp_path / "cut.zst"
    cuts = sorted(
        {*ends, *range(1, 12), *range(0, len(data), 997), *(e + d for e in ends for d in (-4, -1, 1, 3))}
    )
    for cut in (c for c in cuts if 0 <= c <= len(data)):
        path.write_bytes(data[:cut])
        if cut in ends:
            with open_binary(path) as f:
                assert content.startswith(f.read())
        else:
            with pytest.raises((OSError, zstandard.ZstdError)), open_binary(path) as f:
                f.read()


def test_trailing_garbage_is_an_error(tmp_path: Path) -> None:
    data, _, _ = _frames()
    path = tmp_path / "garbage.zst"
    path.write_bytes(data + b"not zstd")
    with pytest.raises((OSError, zstandard.ZstdError)), open_binary(path) as f:
        f.read()


def test_a_file_not_made_durable_is_renamed_without_an_fsync(tmp_path: Path, monkeypatch) -> None:
    synced: list[Path] = []
    monkeypatch.setattr(fsio, "fsync_path", synced.append)
    for durable in (True, False):
        with fsio.atomic_path(tmp_path / f"{durable}.txt", durable) as tmp:
            tmp.write_text("x")
        assert (tmp_path / f"{durable}.txt").read_text() == "x"
    assert synced == [tmp_path / ".tmp.True.txt", tmp_path]  # the file, then its directory
    fsio.sync_filesystem(tmp_path)  # what the caller runs once after many such files
