"""One-line explanations of configuration errors (Snakemake's own dumps the whole schema and config)."""

from __future__ import annotations

import difflib
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
