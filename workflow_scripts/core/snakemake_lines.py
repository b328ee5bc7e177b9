"""Two of Snakemake's terminal lines, made true and short by filters on its logger (installed when the
Snakefile is parsed: ``install``).

- Progress: Snakemake prints ``N of M steps (P) done`` with M the jobs known so far; a checkpoint adds jobs,
  so P fell (``78 of 81 steps (96%)``, then ``79 of 93 steps (85%)``). Here a percentage is shown only when
  it is not below the last one shown; a line whose percentage would fall says how many steps the total grew
  by instead.
- A file Snakemake cannot remove before it runs a job again (a read-only pack or folder) raised a Python
  traceback of Snakemake's internals; here it is one line naming the file and the fix.
"""

from __future__ import annotations

import logging
import re

from snakemake.logging import format_percentage
from snakemake_interface_logger_plugins.common import LogEvent

# The last line of a PermissionError's traceback: "PermissionError: [Errno 13] Permission denied: 'PATH'".
PERMISSION = re.compile(r"^PermissionError: \[Errno \d+\] (?P<reason>[^:]+): '(?P<path>.+)'$", re.M)


def _say(record: logging.LogRecord, text: str) -> None:
    """Make ``record`` a plain message (Snakemake's formatter prints ``msg`` for a record without event)."""
    record.msg, record.args = text, ()
    record.event = None


class MonotonicProgress(logging.Filter):
    """Rewrites Snakemake's progress lines so that the percentages shown never go down."""

    def __init__(self) -> None:
        super().__init__()
        self.shown = 0.0  # the last percentage shown
        self.total = 0  # the total of the last line

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "event", None) != LogEvent.PROGRESS:
            return True
        done, total = int(getattr(record, "done", 0)), int(getattr(record, "total", 0))
        fraction = done / total if total else 1.0
        grew, self.total = total - self.total if self.total else 0, total
        if fraction >= self.shown:
            self.shown = fraction
            _say(record, f"{done} of {total} steps ({format_percentage(done, total)}) done")
        else:
            more = f" ({grew} more from a checkpoint)" if grew > 0 else ""
            _say(record, f"{done} of {total} steps done{more}")
        return True


class ReadOnlyOutput(logging.Filter):
    """Turns the traceback of a PermissionError Snakemake met on a file into one line naming the file."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "event", None) != LogEvent.ERROR or getattr(record, "exception", None) != (
            "PermissionError"
        ):
            return True
        found = PERMISSION.search(str(record.msg))
        if found is not None:
            path, reason = found["path"], found["reason"]
            _say(
                record,
                f"{path}: {reason.lower()}: Snakemake cannot replace it (a read-only file or folder?); "
                "make both writable (chmod u+w, chattr -i) and rerun",
            )
        return True


def install(logger: logging.Logger) -> None:
    """Add the filters to Snakemake's logger (``logging.getLogger("snakemake.logging")``), once."""
    for kind in (MonotonicProgress, ReadOnlyOutput):
        if not any(isinstance(f, kind) for f in logger.filters):
            logger.addFilter(kind())
