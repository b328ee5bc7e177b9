"""``datapacks.exclude``: the documents to take out, found in the sources' ledgers (``tokens.ledger``).

An entry is a document's content hash (16 hex digits, as ``snakepack lineage`` prints it) or its raw input
line as ``FILE:LINE`` (the raw file's name, or its base name, and the 1-based line); the setting is a list
of them or the path of a file listing them, one a line (blank lines and ``#`` comments skipped). ``resolve``
finds every entry's documents in every source, once, when the plan runs; an entry that matches no document
is an error naming it (a typo would otherwise leave a document in). ``names`` gives documents the entries
that name them, for the refusal of a plan that no longer excludes what a started pack was planned without.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from workflow_scripts.core import naming
from workflow_scripts.core.cli import UserError
from workflow_scripts.tokens.ledger import Ledger

HASH = re.compile(r"[0-9a-fA-F]{16}")
RAW_LINE = re.compile(r"(.+):(\d+)")


def entries(setting: str | Sequence[str] | None) -> list[str]:
    """The setting's entries: the list itself, or the lines of the file it names."""
    if not setting:
        return []
    if isinstance(setting, str):
        try:
            lines = Path(setting).read_text().splitlines()
        except OSError as error:
            raise UserError(f"datapacks.exclude: cannot read {setting}: {error.strerror}") from None
        return [s for line in lines if (s := line.split("#", 1)[0].strip())]
    return [str(entry).strip() for entry in setting]


def resolve(setting: str | Sequence[str] | None, signature: list[dict[str, Any]]) -> dict[str, list[int]]:
    """Source name -> its documents (ascending) that the entries of ``setting`` name; ``UserError`` for an
    entry that is neither form or that matches no document of any source."""
    listed = entries(setting)
    if not listed:
        return {}
    hashes: dict[int, str] = {}
    lines: dict[str, tuple[str, int]] = {}
    for entry in listed:
        if HASH.fullmatch(entry):
            hashes[int(entry, 16)] = entry
        elif (found := RAW_LINE.fullmatch(entry)) is not None:
            lines[entry] = (found[1], int(found[2]))
        else:
            raise UserError(
                f"datapacks.exclude: {entry!r} is neither a content hash (16 hex digits) nor a raw FILE:LINE"
            )
    wanted = np.fromiter(hashes, np.uint64, len(hashes))
    matched: set[str] = set()
    out: dict[str, list[int]] = {}
    for source in signature:
        ledger = Ledger.read(source["prefix"])
        docs: set[int] = set()
        if len(wanted) and len(ledger.hashes):
            hit = np.flatnonzero(np.isin(ledger.hashes, wanted))
            docs.update(hit.tolist())
            matched.update(hashes[int(h)] for h in np.unique(ledger.hashes[hit]))
        for entry, (file, line) in lines.items():
            at = ledger.at_line(file, line)
            docs.update(at)
            matched.update([entry] if at else [])
        if docs:
            out[naming.source_name(source["name"])] = sorted(docs)
    unmatched = [e for e in [*hashes.values(), *lines] if e not in matched]
    if unmatched:
        raise UserError(
            f"datapacks.exclude: {', '.join(unmatched)} matches no document of the {len(signature)} sources' "
            "ledgers (snakepack lineage --doc/--hash finds a document's entry)"
        )
    return out


def names(
    signature: list[dict[str, Any]], source: str, documents: Sequence[int], most: int = 10
) -> list[str]:
    """The entries that name ``documents`` of ``source`` (the plan's name), from its ledger: ``FILE:LINE
    (hash H)`` each (what the ledger knows of it), the first ``most`` and how many more."""
    entry = next(e for e in signature if naming.source_name(e["name"]) == source)
    ledger = Ledger.read(entry["prefix"])
    out = []
    for doc in documents[:most]:
        at = ledger.position(doc)
        where = f"{at.file}:{at.line}" if at.file else f"document {doc}"
        out.append(f"{where} (hash {at.hash})" if at.hash else where)
    return out + ([f"{len(documents) - most} more"] if len(documents) > most else [])
