"""Where the trainers leave their records (standard library only: the Snakefile lists them while parsed)."""

from __future__ import annotations

import glob
import os

# Relative to the train stage's folder: the Slurm segments, every run of them (attempts/) and their curve
# (train_curve's loss.csv and evals.csv), and the reference trainer's curves and segments.
PATTERNS = (
    "*/segments/*.json",
    "*/segments/attempts/*.json",
    "loss.csv",
    "evals.csv",
    "reference/*/loss.csv",
    "reference/*/eval.jsonl",
    "reference/*/segments/*.json",
)


def training_files(train_dir: str) -> list[str]:
    """Every training record under ``train_dir``, sorted (none before anything trained)."""
    root = glob.escape(train_dir)
    return sorted(p for pattern in PATTERNS for p in glob.glob(os.path.join(root, pattern)))
