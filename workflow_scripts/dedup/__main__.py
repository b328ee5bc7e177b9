"""``python -m workflow_scripts.dedup`` is ``snakepack dedup``."""

import sys

from workflow_scripts.cli import main

sys.exit(main(["dedup", *sys.argv[1:]]))
