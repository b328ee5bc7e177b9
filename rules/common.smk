"""Shared paths and helpers for the rules. Only cheap, pure Python here: no data is read at parse time."""

import os
import sys

# Rules call `python -m workflow_scripts.<module>`: use the interpreter that runs Snakemake, and this checkout's
# package, also inside Slurm jobs (they inherit the environment). A rule's conda env, when used, comes first.
os.environ["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in [workflow.basedir, os.environ.get("PYTHONPATH", "")] if p
)

OUT = config["output_root"].rstrip("/")
LOGS = config["log_root"].rstrip("/")
