"""How rule jobs find this package and its interpreter (called once when the Snakefile is parsed)."""

from __future__ import annotations

import os
import sys


def use_this_interpreter(basedir: str) -> None:
    """Put the running interpreter's bin dir first on PATH and ``basedir`` on PYTHONPATH.

    Rules call ``python -m workflow_scripts COMMAND`` (``snakepack COMMAND``); this makes that the interpreter
    running Snakemake, with this checkout's package, also inside Slurm jobs (they inherit the environment).
    A rule's conda environment, when one is used, is activated after this and comes first.
    """
    os.environ["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
    paths = [basedir, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
