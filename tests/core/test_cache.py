"""The user's cache: what is read back is what was written, and a home that cannot be written costs only
the time."""

from __future__ import annotations

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
