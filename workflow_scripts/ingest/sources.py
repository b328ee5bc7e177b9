"""Configured sources to ingest groups, at Snakefile parse time (file names only; no data is read)."""

from __future__ import annotations

import glob
import shlex
from dataclasses import dataclass
from typing import Any

from workflow_scripts.ingest.shards import group_files


class SourceError(ValueError):
    """A source configuration that cannot be resolved into groups."""


@dataclass(frozen=True)
class Group:
    """One ingest group ``{lang}_{domain}_{subdomain}``: its raw files and its source's ingest options."""

    name: str
    source: str
    files: tuple[str, ...]
    args: str


def source_args(source: dict[str, Any], ingest: dict[str, Any]) -> str:
    """The ingest CLI options for one source (the group's files and output dir are added by the rule)."""
    args = ["--shard-size", str(ingest["shard_size"]), "--id-key", source["id_key"]]
    if source.get("format", "auto") != "auto":
        args += ["--format", source["format"]]
    args += ["--text-key", *source["text_key"]]
    if ingest["min_chars"]:
        args += ["--min-chars", str(ingest["min_chars"])]
    if ingest["min_words"]:
        args += ["--min-words", str(ingest["min_words"])]
    if not ingest["nfc"]:
        args.append("--no-nfc")
    if ingest["compress"]:
        args += ["--compress", "zst"]
    if ingest["strict"]:
        args.append("--strict")
    return shlex.join(args)


def resolve_groups(sources: list[dict[str, Any]], ingest: dict[str, Any]) -> dict[str, Group]:
    """Group every source's files by language, domain and subdomain; a group must come from one source."""
    groups: dict[str, Group] = {}
    for source in sources:
        files = sorted(
            {p for pattern in source["paths"] for p in glob.glob(pattern)} | set(source.get("files", []))
        )
        if not files:
            raise SourceError(f"source {source['name']}: no file matches {source['paths']}")
        if source.get("name_regex"):
            by_group = group_files(files, source["name_regex"])
        else:
            missing = [k for k in ("lang", "domain", "subdomain") if not source.get(k)]
            if missing:
                raise SourceError(f"source {source['name']}: give name_regex, or {', '.join(missing)}")
            by_group = {f"{source['lang']}_{source['domain']}_{source['subdomain']}": files}
        base = source_args(source, ingest)
        for name, paths in by_group.items():
            if name in groups:
                raise SourceError(
                    f"group {name} comes from sources {groups[name].source} and {source['name']}: "
                    "give one of them another subdomain"
                )
            lang, domain, subdomain = name.split("_")
            extra = shlex.join(["--lang", lang, "--domain", domain, "--subdomain", subdomain])
            groups[name] = Group(name, source["name"], tuple(paths), f"{base} {extra}")
    return groups
