"""``python -m workflow_scripts.train.reference`` is ``snakepack train-reference``."""

import sys

from workflow_scripts.core.cli import run
from workflow_scripts.train.reference.train import main

if __name__ == "__main__":
    sys.exit(run("snakepack train-reference", main, sys.argv[1:]))
