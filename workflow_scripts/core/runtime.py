"""How rule jobs find this package, its interpreter and their settings from the environment (set once
when the Snakefile is parsed; Slurm jobs inherit it)."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable

PROGRESS_INTERVAL_ENV = "SNAKEPACK_PROGRESS_INTERVAL"  # seconds between progress lines in batch jobs


def use_this_interpreter(basedir: str) -> None:
    """Put the running interpreter's bin dir first on PATH and ``basedir`` on PYTHONPATH.

    Rules call ``python -m workflow_scripts COMMAND`` (``snakepack COMMAND``); this makes that the interpreter
    running Snakemake, with this checkout's package, also inside Slurm jobs (they inherit the environment).
    A rule's conda environment, when one is used, is activated after this and comes first.
    """
    os.environ["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
    paths = [basedir, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))


def write_list(paths_var: str, list_file: str) -> str:
    """Shell: write a rule's (possibly 100,000) paths to ``list_file``, one a line, for an ``@LIST`` option.
    ``printf`` is a shell builtin, so no argument-length limit applies to it."""
    return f"printf '%s\\n' {paths_var} > {list_file}"


def set_progress_interval(seconds: float) -> None:
    """Jobs print a progress line every ``seconds`` (0: none) when not on a terminal."""
    os.environ[PROGRESS_INTERVAL_ENV] = str(seconds)


def show_when_done(path: str, message: str, wanted: Callable[[], bool]) -> logging.Handler:
    """A handler for Snakemake's logger that prints ``path`` when Snakemake logs ``message`` (that it has
    nothing to do: the file is then up to date, and the job that makes it prints it when it runs) and
    ``wanted()`` (asked then: the targets are known once the DAG is built)."""

    class Show(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.getMessage() == message and os.path.exists(path) and wanted():
                with open(path, encoding="utf-8") as f:
                    print(f.read(), end="", flush=True)

    return Show()
