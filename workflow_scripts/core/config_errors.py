"""One-line explanations of configuration errors (Snakemake's own dumps the whole schema and config)."""

from __future__ import annotations

import difflib
import logging
import re
from collections.abc import Iterable
from typing import Any

MAX_VALUE_CHARS = 80


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= MAX_VALUE_CHARS else text[: MAX_VALUE_CHARS - 3] + "..."


def _key_path(path: Iterable[Any]) -> str:
    """``datapacks.phases[1].iters`` from a JSON path."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else f".{part}" if out else str(part)
    return out


def explain(error: Any, schema_file: str = "config/schema.yaml") -> str:
    """A jsonschema ``ValidationError`` as one line naming the key, the value and what is allowed."""
    where = _key_path(error.absolute_path)
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        known = error.schema.get("properties", {})
        prefix = f"{where}." if where else ""
        hints = []
        for key in (k for k in error.instance if k not in known):
            close = difflib.get_close_matches(key, known, n=1)
            hints.append(f"{prefix}{key!s}" + (f" (did you mean {prefix}{close[0]}?)" if close else ""))
        return f"config: unknown key {', '.join(hints)}; {schema_file} lists every key"
    message = error.message
    if error.validator == "oneOf":
        options = [sorted(s.get("required", [])) for s in error.schema["oneOf"]]
        message = f"{_short(error.instance)} needs exactly one of " + ", ".join(
            "/".join(o) for o in options if o
        )
    elif len(message) > 2 * MAX_VALUE_CHARS:
        message = (
            f"{_short(error.instance)} is not valid here ({error.validator}: {_short(error.validator_value)})"
        )
    return f"config: {where or 'the configuration'}: {message}; see {schema_file}"


CONFIG_SUFFIXES = (".yaml", ".yml", ".json")
# The last line of Snakemake's traceback when a --configfile does not exist (common/configfile.py).
MISSING_CONFIGFILE = re.compile(
    r"^FileNotFoundError: \[Errno 2\] No such file or directory: '(?P<path>.+)'$", re.M
)


def configfile_not_found(path: str) -> str:
    """One line for a ``--configfile`` that does not exist; a name without a config suffix is taken for a
    target given after ``--configfile`` (argparse reads every name after it as a config file)."""
    if path.endswith(CONFIG_SUFFIXES):
        return f"config file '{path}' not found"
    return (
        f"config file '{path}' not found: a target after --configfile is read as a config file; put targets "
        "before --configfile or use --configfile F --"
    )


class MissingConfigfile(logging.Filter):
    """On Snakemake's logger (``snakemake.logging``): its traceback for a missing ``--configfile`` becomes
    ``configfile_not_found``'s line. Snakemake reads the config files before the Snakefile, so this must be
    in place before its command line is read (``install_missing_configfile``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = str(record.msg)
        if getattr(record, "exception", None) == "FileNotFoundError" and "load_configfile" in text:
            found = MISSING_CONFIGFILE.search(text)
            if found is not None:
                record.msg, record.args = configfile_not_found(found["path"]), ()
                record.event = None  # a plain message for Snakemake's formatter
        return True


def install_missing_configfile() -> None:
    """Add ``MissingConfigfile`` to Snakemake's logger, once (cheap: it imports nothing of Snakemake)."""
    logger = logging.getLogger("snakemake.logging")
    if not any(isinstance(f, MissingConfigfile) for f in logger.filters):
        logger.addFilter(MissingConfigfile())
