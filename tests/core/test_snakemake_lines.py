"""Snakemake's progress and read-only-file lines through the filters of ``core.snakemake_lines``, formatted
by Snakemake's own formatter as on the terminal."""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from snakemake.exceptions import print_exception
from snakemake.logging import DefaultFormatter
from snakemake_interface_logger_plugins.common import LogEvent

from workflow_scripts.core import snakemake_lines


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(DefaultFormatter())
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


@pytest.fixture
def terminal() -> Iterator[Lines]:
    """Snakemake's logger with the filters installed and a handler that keeps the formatted lines."""
    logger = logging.getLogger("snakemake.logging")
    filters, level = list(logger.filters), logger.level
    lines = Lines()
    logger.addHandler(lines)
    logger.setLevel(logging.INFO)
    snakemake_lines.install(logger)
    snakemake_lines.install(logger)  # a second parse of the Snakefile in one process adds nothing
    assert len(logger.filters) == len(filters) + 2
    yield lines
    logger.removeHandler(lines)
    logger.filters[:] = filters
    logger.setLevel(level)


def progress(done: int, total: int) -> None:
    """As Snakemake's scheduler logs it (scheduling/job_scheduler.py)."""
    logging.getLogger("snakemake.logging").info(
        None, extra={"event": LogEvent.PROGRESS, "done": done, "total": total}
    )


def test_the_percentage_never_goes_down_as_checkpoints_add_steps(terminal: Lines) -> None:
    for done, total in [(1, 81), (78, 81), (79, 93), (80, 93), (90, 93), (93, 93)]:
        progress(done, total)
    assert terminal.lines == [
        "1 of 81 steps (1%) done",
        "78 of 81 steps (96%) done",
        "79 of 93 steps done (12 more from a checkpoint)",
        "80 of 93 steps done",
        "90 of 93 steps (97%) done",
        "93 of 93 steps (100%) done",
    ]
    shown = [float(m[1]) for line in terminal.lines if (m := re.search(r"\((\d+)%\)", line))]
    assert shown == sorted(shown)


def test_a_read_only_output_is_one_line_naming_it(terminal: Lines, tmp_path: Path) -> None:
    pack = tmp_path / "merged" / "p.bin"
    try:
        raise PermissionError(13, os.strerror(13), str(pack))
    except PermissionError as error:
        print_exception(error)  # what Snakemake does with an error while it prepares a job
    (line,) = terminal.lines
    assert line == (
        f"{pack}: permission denied: Snakemake cannot replace it (a read-only file or folder?); "
        "make both writable (chmod u+w, chattr -i) and rerun"
    )


def test_other_errors_pass_unchanged(terminal: Lines) -> None:
    try:
        raise ValueError("something else")
    except ValueError as error:
        print_exception(error)
    assert "ValueError: something else" in terminal.lines[0]
