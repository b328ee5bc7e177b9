"""Configured ``tokenized_sources`` to imported prefixes, at parse time (names only, no data read)."""

from __future__ import annotations

import glob
import re
from dataclasses import dataclass
from typing import Any

from workflow_scripts.core import naming
from workflow_scripts.core.cli import UserError

SUFFIXES = (".bin", ".idx")


class TokenizedSourceConfigError(UserError, ValueError):
    """A ``tokenized_sources`` entry that cannot be resolved."""


@dataclass(frozen=True)
class Imported:
    """A user prefix to import: its workflow name (``{group}_split_{source}-{NNNN}``) and how to check it."""

    name: str
    source: str
    prefix: str
    tokenizer_model: str
    eod: str
    bos: str | None

    @property
    def group(self) -> str:
        return naming.shard_group(self.name)


def _prefixes(patterns: list[str]) -> dict[str, list[str]]:
    """Per pattern (given with or without ``.bin``/``.idx``), the prefixes whose ``.idx`` it matches."""
    found = {}
    for pattern in patterns:
        stem = next((pattern[: -len(s)] for s in SUFFIXES if pattern.endswith(s)), pattern)
        found[pattern] = [p[: -len(".idx")] for p in glob.glob(stem + ".idx")]
    return found


def _group(source: dict[str, Any], prefix: str) -> str:
    """The prefix's group: the source's lang/domain/subdomain, else the parts its name_regex finds."""
    fields = {k: source[k] for k in naming.GROUP_FIELDS if source.get(k)}
    if len(fields) < len(naming.GROUP_FIELDS):
        name = prefix.rsplit("/", 1)[-1]
        match = re.search(source["name_regex"], name)
        found = match.groupdict() if match else {}
        fields = {k: fields.get(k) or found.get(k) for k in naming.GROUP_FIELDS}
        missing = [k for k, v in fields.items() if not v]
        if missing:
            raise TokenizedSourceConfigError(
                f"tokenized_sources {source['name']}: {prefix}: name_regex {source['name_regex']!r} finds no "
                f"{', '.join(missing)} in {name!r}; give them in the source"
            )
    return naming.group_name(*(fields[k] for k in naming.GROUP_FIELDS))


def resolve_imports(sources: list[dict[str, Any]], default_model: str | None) -> dict[str, Imported]:
    """Every prefix of every tokenized source by its workflow name; errors name the source and key."""
    imports: dict[str, Imported] = {}
    for source in sources:
        name = source["name"]
        matches = _prefixes(source["prefixes"])
        empty = [pattern for pattern, found in matches.items() if not found]
        if empty:
            raise TokenizedSourceConfigError(
                f"tokenized_sources {name}: no prefix matches {', '.join(map(repr, empty))}"
                " (looked for PATTERN.idx)"
            )
        prefixes = sorted({p for found in matches.values() for p in found})
        model = source.get("tokenizer_model") or default_model
        if not model:
            raise TokenizedSourceConfigError(
                f"tokenized_sources {name}: give tokenizer_model (or tokenizer.model): the tokenizer "
                "the data was made with"
            )
        counters: dict[str, int] = {}
        for prefix in prefixes:
            group = _group(source, prefix)
            index = counters[group] = counters.get(group, -1) + 1
            entry = Imported(
                naming.imported_name(group, name, index),
                name,
                prefix,
                model,
                source.get("eod", "auto"),
                source.get("bos"),
            )
            if entry.name in imports:
                raise TokenizedSourceConfigError(f"tokenized_sources: two sources are named {name}")
            imports[entry.name] = entry
    return imports
