"""``python -m workflow_scripts.ingest`` is ``snakepack ingest``."""

import sys

from workflow_scripts.cli import main

sys.exit(main(["ingest", *sys.argv[1:]]))
