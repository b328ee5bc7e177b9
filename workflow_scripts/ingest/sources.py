"""Configured sources to ingest groups, at Snakefile parse time (file names only; no data is read)."""

from __future__ import annotations

import glob
import shlex
from dataclasses import dataclass
from typing import Any

from workflow_scripts.core import naming, settings
from workflow_scripts.core.cli import UserError
from workflow_scripts.ingest.settings import IngestSettings
from workflow_scripts.ingest.shards import group_files


class SourceError(UserError, ValueError):
    """A source configuration that cannot be resolved into groups."""


@dataclass(frozen=True)
class Group:
    """One ingest group ``{lang}_{domain}_{subdomain}``: its raw files and its source's ingest options."""

    name: str
    source: str
    files: tuple[str, ...]
    args: str


def group_options(source: dict[str, Any], ingest: dict[str, Any], group: str) -> IngestSettings:
    """The ingest settings of one group: the stage's, the source's reading options, the group's name parts."""
    reading = {k: source[k] for k in ("format", "text_key", "id_key") if k in source}
    return settings.from_config(IngestSettings, {**ingest, **reading, **naming.parse_group(group)})


def resolve_groups(sources: list[dict[str, Any]], ingest: dict[str, Any]) -> dict[str, Group]:
    """Group every source's files by language, domain and subdomain; a group must come from one source."""
    groups: dict[str, Group] = {}
    for source in sources:
        matches = {pattern: glob.glob(pattern) for pattern in source["paths"]}
        empty = [pattern for pattern, found in matches.items() if not found]
        if empty:
            raise SourceError(f"source {source['name']}: no file matches {', '.join(map(repr, empty))}")
        files = sorted({p for found in matches.values() for p in found} | set(source.get("files", [])))
        if not files:
            raise SourceError(f"source {source['name']}: no files")
        if source.get("name_regex"):
            by_group = group_files(files, source["name_regex"])
        else:
            missing = [k for k in ("lang", "domain", "subdomain") if not source.get(k)]
            if missing:
                raise SourceError(f"source {source['name']}: give name_regex, or {', '.join(missing)}")
            by_group = {naming.group_name(source["lang"], source["domain"], source["subdomain"]): files}
        for name, paths in by_group.items():
            if name in groups:
                raise SourceError(
                    f"group {name} comes from sources {groups[name].source} and {source['name']}: "
                    "give one of them another subdomain"
                )
            args = shlex.join(settings.to_args(group_options(source, ingest, name)))
            groups[name] = Group(name, source["name"], tuple(paths), args)
    return groups
