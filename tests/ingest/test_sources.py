"""Configured sources to ingest groups (workflow_scripts.ingest.sources)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.utils import write_jsonl
from workflow_scripts.ingest.sources import SourceError, resolve_groups


def source(*patterns: str) -> dict:
    return {"name": "vendor", "paths": list(patterns), "lang": "en", "domain": "web", "subdomain": "cc"}


def test_every_pattern_must_match(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "a.jsonl", [{"text": "one"}])
    groups = resolve_groups([source(f"{tmp_path}/*.jsonl")], {})
    assert groups["en_web_cc"].files == (f"{tmp_path}/a.jsonl",)
    with pytest.raises(SourceError, match=rf"source vendor: no file matches '{tmp_path}/typo\*.jsonl'$"):
        resolve_groups([source(f"{tmp_path}/*.jsonl", f"{tmp_path}/typo*.jsonl")], {})
