"""``python -m workflow_scripts COMMAND ...`` is ``snakepack COMMAND ...`` (how the rules call it)."""

from workflow_scripts.cli import entry

entry()
