"""The package's compiled extensions, loaded one way: ``load("workflow_scripts.tokens._ids")``.

``EXTENSIONS`` is the one table of them: each one's C source beside it, a ``.pyi`` stub beside that, and what
uses it. The install compiles them (``pip install -e .``, which needs a C compiler and Python's headers;
``bash .ci/setup`` installs both and the package). Every one is required: none has a Python fallback (each
does per-character or per-token work whose Python would be many times slower, and the stages are tuned and
tested with them), so a missing one is an error that names it and the install step, raised where a module
loads it, never a silent change of speed or behaviour.
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType

from workflow_scripts.core.cli import UserError

INSTALL = "run `bash .ci/setup`, or `pip install -e .` with a C compiler and Python's headers"
EXTENSIONS: dict[str, str] = {
    "workflow_scripts.tokens._ids": "tokenize's loops over token ids (framing, suspect tokens)",
    "workflow_scripts.tokens._jsonl": "the tokenize reader's JSON-lines scanner",
    "workflow_scripts.tokens._unitmemo": "the tokenize fast path's unit memo",
    "workflow_scripts.dedup._shingle": "dedup's unit hashes, shingles and MinHash signatures",
}


class ExtensionMissing(UserError, ImportError):
    """A compiled extension that is not built for this Python."""


def source(name: str) -> str:
    """The C source of extension ``name``, relative to the repository."""
    return name.replace(".", "/") + ".c"


def load(name: str) -> ModuleType:
    """The compiled extension ``name`` (one of ``EXTENSIONS``); ``ExtensionMissing`` when it is not built."""
    if name not in EXTENSIONS:
        raise KeyError(f"{name} is not one of the compiled extensions (workflow_scripts.core.compiled)")
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise ExtensionMissing(
            f"{source(name)} ({EXTENSIONS[name]}) is not built for this Python "
            f"({sys.executable}, {sys.version.split()[0]}): {INSTALL} ({exc})"
        ) from None
