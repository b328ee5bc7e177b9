"""The user's cache: what is read back is what was written, and a home that cannot be written costs only
the time."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import yaml

from workflow_scripts.core import cache, settings


def test_written_entries_read_back_and_missing_ones_are_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cache, "CACHE", tmp_path / "c")
    assert cache.read("x.bin") is None
    cache.write("x.bin", b"\x00data")
    assert cache.read("x.bin") == b"\x00data" and sorted(p.name for p in (tmp_path / "c").iterdir()) == [
        "x.bin"
    ]


def test_an_unwritable_cache_is_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setattr(cache, "CACHE", blocker / "c")  # a directory under a file: cannot exist
    cache.write("x.bin", b"data")
    assert cache.read("x.bin") is None


def test_the_schema_is_parsed_once_per_version_of_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cache, "CACHE", tmp_path / "c")
    settings.schema.cache_clear()
    try:
        parsed = settings.schema()
        assert parsed == yaml.safe_load(settings.SCHEMA_PATH.read_text())
        assert len(list((tmp_path / "c").glob("schema-*.json"))) == 1
        settings.schema.cache_clear()
        monkeypatch.setattr(yaml, "load", None)  # the YAML parser is not needed again
        assert settings.schema() == parsed
    finally:
        settings.schema.cache_clear()


def test_the_cache_path_names_its_format_version(tmp_path: Path) -> None:
    """Entries of another format never meet this code: they live under another version's directory."""
    assert cache.location({"XDG_CACHE_HOME": str(tmp_path)}) == tmp_path / "snakepack" / f"v{cache.FORMAT}"
    assert cache.location({}) == Path.home() / ".cache" / "snakepack" / f"v{cache.FORMAT}"


def test_the_cache_stays_within_its_bound_dropping_the_least_recently_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cache, "CACHE", tmp_path / "snakepack" / f"v{cache.FORMAT}")
    monkeypatch.setenv("SNAKEPACK_CACHE_MAX_MB", str(100 / 2**20))  # 100 bytes
    old = tmp_path / "snakepack" / "v0"
    old.mkdir(parents=True)
    (old / "stale.bin").write_bytes(b"s" * 10)
    for age, name in enumerate("cba", start=1):
        cache.write(name, name.encode() * 40)
        os.utime(cache.CACHE / name, (time.time() - 60 * age,) * 2)
    assert cache.read("a") == b"a" * 40  # a read makes "a" the most recently used
    cache.write("d", b"d" * 40)  # 160 bytes: "b" and then "c", the least recently used, go
    assert sorted(p.name for p in cache.CACHE.iterdir()) == ["a", "d"]
    assert not old.exists()  # another format's entries go too


def test_a_bad_bound_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SNAKEPACK_CACHE_MAX_MB", "lots")
    with pytest.raises(ValueError, match="SNAKEPACK_CACHE_MAX_MB='lots': not a number of MB"):
        cache.bound()
    monkeypatch.delenv("SNAKEPACK_CACHE_MAX_MB")
    assert cache.bound() == cache.DEFAULT_MAX_MB * 2**20
