"""``python -m workflow_scripts COMMAND ...`` is ``snakepack COMMAND ...`` (how the rules call it)."""

import sys

from workflow_scripts.cli import main

sys.exit(main())
