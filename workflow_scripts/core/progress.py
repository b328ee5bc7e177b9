"""What long work shows: a progress bar on a terminal, a log line every N seconds in batch jobs, and one
summary line (in/out/rejected, throughput, peak RSS) that also lands in the stage's ``stats.json``.

On a terminal the bar is tqdm's (documents, MB/s, ETA when the total is known). Elsewhere (a Slurm job's
log, a Snakemake rule's log) a line is printed every ``SNAKEPACK_PROGRESS_INTERVAL`` seconds (default 60;
the workflow sets it from the config key ``progress_interval``; 0 turns the lines off).
"""

from __future__ import annotations

import os
import resource
import sys
import time
from types import TracebackType
from typing import TYPE_CHECKING, Any

from workflow_scripts.core.runtime import PROGRESS_INTERVAL_ENV as INTERVAL_ENV

if TYPE_CHECKING:
    from tqdm import tqdm

DEFAULT_INTERVAL = 60.0


def peak_rss_mb() -> float:
    """This process's peak resident set size so far, in MB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e6


def _interval() -> float:
    try:
        return float(os.environ.get(INTERVAL_ENV, DEFAULT_INTERVAL))
    except ValueError:
        return DEFAULT_INTERVAL


class Progress:
    """Progress of one job over ``total`` bytes (None: unknown); use as a context manager."""

    def __init__(self, label: str, total: int | None = None) -> None:
        self.label = label
        self.total = total
        self.nbytes = self.docs = 0
        self.started = self.last_line = time.monotonic()
        self.interval = _interval()
        self.bar: tqdm | None = None  # on a terminal (imported there only: 30 ms of every job's start)
        if sys.stderr.isatty():
            from tqdm import tqdm

            self.bar = tqdm(
                total=total,
                desc=label,
                unit="B",
                unit_scale=True,
                unit_divisor=1000,
                file=sys.stderr,
                mininterval=0.5,
            )

    def __enter__(self) -> Progress:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.bar is not None:
            self.bar.close()

    def advance(self, nbytes: int, docs: int = 0) -> None:
        """Count ``nbytes`` more input bytes and ``docs`` more documents."""
        self.nbytes += nbytes
        self.docs += docs
        if self.bar is not None:
            self.bar.update(nbytes)
            self.bar.set_postfix_str(f"{self.docs:,} docs", refresh=False)
            return
        now = time.monotonic()
        if self.interval > 0 and now - self.last_line >= self.interval:
            self.last_line = now
            print(self._line(now - self.started), file=sys.stderr, flush=True)

    def _line(self, seconds: float) -> str:
        rate = self.nbytes / 1e6 / max(seconds, 1e-9)
        done = f"{self.nbytes / 1e6:,.1f} MB"
        eta = ""
        if self.total:
            done += f" of {self.total / 1e6:,.1f} MB ({100 * self.nbytes / self.total:.0f} %)"
            eta = f", ETA {max(self.total - self.nbytes, 0) / 1e6 / max(rate, 1e-9):,.0f} s"
        return f"{self.label}: {done}, {self.docs:,} docs, {rate:.1f} MB/s{eta}"

    def summary(
        self, docs_in: int, docs_out: int, rejected: int, nbytes: int | None = None
    ) -> dict[str, Any]:
        """Print the one summary line; return the figures for the stats (``seconds``, ``mb_per_s``,
        ``docs_per_s``, ``peak_rss_mb``). ``nbytes`` defaults to the bytes counted by ``advance``."""
        seconds = time.monotonic() - self.started
        nbytes = self.nbytes if nbytes is None else nbytes
        run = {
            "seconds": round(seconds, 3),
            "mb_per_s": round(nbytes / 1e6 / max(seconds, 1e-9), 2),
            "docs_per_s": round(docs_in / max(seconds, 1e-9), 1),
            "peak_rss_mb": round(peak_rss_mb(), 1),
        }
        print(
            f"{self.label}: {docs_in:,} in, {docs_out:,} out, {rejected:,} rejected; "
            f"{nbytes / 1e6:,.1f} MB in {seconds:.1f} s ({run['mb_per_s']} MB/s, "
            f"{run['docs_per_s']:,} docs/s), peak RSS {run['peak_rss_mb']:,.0f} MB",
            file=sys.stderr,
            flush=True,
        )
        return run
