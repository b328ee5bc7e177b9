"""Progress lines in batch jobs and the summary that lands in the stats."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.utils import build_dataset
from workflow_scripts.cli import main as snakepack
from workflow_scripts.core import progress
from workflow_scripts.core.fsio import read_json


def test_batch_jobs_get_a_line_every_interval_and_one_summary(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(progress.INTERVAL_ENV, "0")  # off
    with progress.Progress("quiet", total=100) as p:
        p.advance(50, 5)
    assert capsys.readouterr().err == ""
    monkeypatch.setenv(progress.INTERVAL_ENV, "0.000001")
    with progress.Progress("job x", total=4_000_000) as p:
        p.advance(1_000_000, 10)
        p.advance(1_000_000, 10)
        run = p.summary(docs_in=20, docs_out=18, rejected=2)
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("job x: 1.0 MB of 4.0 MB (25 %), 10 docs, ") and "ETA" in lines[0]
    assert lines[1].startswith("job x: 2.0 MB of 4.0 MB (50 %), 20 docs, ")
    assert lines[2].startswith("job x: 20 in, 18 out, 2 rejected; 2.0 MB in ") and "peak RSS" in lines[2]
    assert set(run) == {"seconds", "mb_per_s", "docs_per_s", "peak_rss_mb"}
    assert run["peak_rss_mb"] > 10 and run["mb_per_s"] > 0 and run["docs_per_s"] > 0


def test_the_merge_log_carries_the_run(tmp_path: Path) -> None:
    a = build_dataset(tmp_path / "a", [[[1, 2, 3]], [[4, 5]]])
    log = tmp_path / "merge.json"
    assert snakepack(["merge", "--output", str(tmp_path / "m"), "--log", str(log), a, a]) == 0
    run = read_json(log)["run"]
    assert run["seconds"] >= 0 and run["peak_rss_mb"] > 0
