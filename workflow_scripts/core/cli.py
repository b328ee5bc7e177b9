"""The command-line convention of every tool: a user error is one line and exit 2; a bug keeps its trace."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence


class UserError(Exception):
    """Something the user can fix (an input, an option, a file): reported in one line, exit status 2."""


USER_OS_ERRORS = (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError)


def run(prog: str, main: Callable[[Sequence[str] | None], int | None], argv: Sequence[str] | None) -> int:
    """Call ``main(argv)``; a ``UserError`` (or a missing/unreadable file) becomes one line and status 2."""
    try:
        return main(argv) or 0
    except UserError as err:
        message = str(err)
    except USER_OS_ERRORS as err:
        message = f"{err.strerror}: {err.filename}" if err.filename else str(err)
    print(f"{prog}: error: {message}", file=sys.stderr)
    return 2
