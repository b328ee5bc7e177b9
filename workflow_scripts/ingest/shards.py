"""INGEST stage: raw vendor files of one source group -> size-targeted jsonl shards, quarantine and stats.

Usage::

    snakepack ingest --input FILE... --output-dir D --shard-size BYTES
        (--lang L --domain X --subdomain Y | --name-regex R) [--format F] [--text-key K ...] [--id-key K]
        [--min-chars N] [--min-words N] [--no-nfc] [--compress zst] [--strict]

Output in ``D``: ``{lang}_{domain}_{subdomain}_split_{NNNN}.jsonl[.zst]`` shards, ``quarantine.jsonl`` and
``stats.json``. Contract:

- Inputs: ``jsonl``, ``jsonl.gz``, ``jsonl.zst``, ``txt[.gz|.zst]`` (one document per line), ``parquet`` (read
  in record batches), all streamed; the format comes from the extension unless ``--format`` is given. The
  group comes from the options or from ``--name-regex`` (``re.search`` on each base name, named groups
  lang/domain/subdomain); all files of one call must give the same group (see :func:`group_files`).
- Record (compact JSON, this key order): ``id, text, lang, domain, subdomain, source, line, meta``;
  ``source`` is the input file name, ``line`` the 1-based line (parquet: row) number, ``id`` the vendor id
  (``--id-key``; ints become strings) or ``"{source}:{line}"`` when absent/null/empty, ``meta`` the vendor
  record's other keys (``{}`` for txt). Several ``--text-key``: present values joined with "\\n\\n".
- Text is kept as is apart from optional NFC; emptiness and ``min_chars`` look at the stripped text,
  ``min_words`` counts whitespace-separated tokens.
- Inputs are processed in sorted path order; same inputs and options -> same bytes. A new shard starts when
  the next record would push the shard past ``shard_size`` uncompressed bytes, unless the shard is empty.
- Rejects go to ``quarantine.jsonl`` as ``{file, line, reason, raw}`` (file: the input file name, raw: its
  first 1000 bytes); reasons are :data:`REJECT_REASONS`. ``strict`` turns the first reject into
  :class:`RejectedRecordError` (message ``{path}:{line}: rejected record ({reason})``).
- Damaged input (a truncated or corrupt ``.gz``/``.zst`` stream, a 0-byte ``.gz``/``.zst``, a text file
  whose first bytes hold a NUL byte (binary data), an unreadable parquet file or row group):
  every complete record before the damage is kept, the rest of the file (a partial last line included) is
  one reject ``unreadable_rest`` with ``raw`` empty and ``offset`` (the byte of the file, compressed, where
  reading failed), ``data_offset`` (where the rest starts in the decompressed data; null for parquet) and
  ``error``; ``line`` is the first line (row) of the rest. ``strict`` fails instead, naming file and offset.
- Crash safety: shards and quarantine are written to temporary names and renamed only when every input was
  read and the counts check passed; older shards of the same group in ``D`` are then removed and
  ``stats.json`` is written last.
- ``stats.json``: group, lang, domain, subdomain, files, bytes_in (on disk), docs_in, docs_out, rejected
  (every reason -> count), shards ``[{name, docs, bytes (uncompressed)}]``, inputs ``[{path, format, bytes,
  docs_in, docs_out, rejected (its reasons -> count), unreadable (the error of its unreadable rest, or
  null)}]``, options. ``docs_in == docs_out + sum(rejected)`` is always checked.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import os
import re
import sys
import unicodedata
from collections.abc import Iterable, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import IO, Any

import orjson

from workflow_scripts.core import naming, settings
from workflow_scripts.core.fsio import atomic_path, open_binary_writer, write_json
from workflow_scripts.core.progress import Progress
from workflow_scripts.core.stage_stats import UnbalancedStats, check_balance
from workflow_scripts.ingest.readers import (
    SCAN,
    IngestError,
    Reject,
    Unreadable,
    iter_units,
    make_decoder,
    resolve_format,
)
from workflow_scripts.ingest.settings import IngestSettings

__all__ = [
    "IngestError",
    "IngestSettings",
    "RejectedRecordError",
    "check_counts",
    "clean_text",
    "group_files",
    "ingest",
    "main",
    "parse_name",
]

GROUP_FIELDS = naming.GROUP_FIELDS
REJECT_REASONS = (
    "blank_line",
    "malformed_json",
    "invalid_utf8",
    "not_object",
    "missing_text",
    "non_string_text",
    "invalid_id",
    "empty_text",
    "too_short",
    "unreadable_rest",
)
QUARANTINE_NAME = "quarantine.jsonl"
STATS_NAME = "stats.json"
RAW_PREVIEW_BYTES = 1000
_LINE = orjson.OPT_APPEND_NEWLINE


class RejectedRecordError(IngestError):
    """A rejected record in strict mode."""

    def __init__(self, file: str, line: int, reason: str) -> None:
        super().__init__(f"{file}:{line}: rejected record ({reason})")
        self.file, self.line, self.reason = file, line, reason


def _check_group(values: Sequence[str | None], where: str) -> tuple[str, str, str]:
    try:
        return tuple(naming.check_part(f, v, where) for f, v in zip(GROUP_FIELDS, values, strict=True))
    except naming.BadName as err:
        raise IngestError(str(err)) from None


def _compile_name_regex(name_regex: str) -> re.Pattern[str]:
    try:
        pattern = re.compile(name_regex)
    except re.error as exc:
        raise IngestError(f"invalid --name-regex {name_regex!r}: {exc}") from None
    missing = [g for g in GROUP_FIELDS if g not in pattern.groupindex]
    if missing:
        raise IngestError(f"--name-regex {name_regex!r} lacks the named group(s) {', '.join(missing)}")
    return pattern


def parse_name(path: str | os.PathLike[str], name_regex: str | re.Pattern[str]) -> tuple[str, str, str]:
    """(lang, domain, subdomain) from the file name (``re.search`` on the base name) of ``path``."""
    pattern = name_regex if isinstance(name_regex, re.Pattern) else _compile_name_regex(name_regex)
    name = os.path.basename(path)
    match = pattern.search(name)
    if match is None:
        raise IngestError(f"{path}: file name {name!r} does not match --name-regex {pattern.pattern!r}")
    return _check_group([match[g] for g in GROUP_FIELDS], str(path))


def group_files(paths: Iterable[str | os.PathLike[str]], name_regex: str) -> dict[str, list[str]]:
    """Group raw files by ``{lang}_{domain}_{subdomain}`` parsed from their names (no file is read).

    Keys and the paths of each group are sorted; a name that does not match raises :class:`IngestError`.
    """
    pattern = _compile_name_regex(name_regex)
    groups: dict[str, list[str]] = {}
    for path in sorted(map(str, paths)):
        groups.setdefault("_".join(parse_name(path, pattern)), []).append(path)
    return dict(sorted(groups.items()))


def _resolve_group(paths: Sequence[str], opts: IngestSettings) -> tuple[str, str, str]:
    if opts.name_regex is None:
        return _check_group([opts.lang, opts.domain, opts.subdomain], "options")
    pattern = _compile_name_regex(opts.name_regex)
    first = parse_name(paths[0], pattern)
    for path in paths[1:]:
        group = parse_name(path, pattern)
        if group != first:
            raise IngestError(
                f"{path}: group {'_'.join(group)} differs from {'_'.join(first)} of {paths[0]};"
                " ingest one group per call"
            )
    return first


def clean_text(text: str, nfc: bool = True, min_chars: int = 0, min_words: int = 0) -> str:
    """NFC-normalize (when asked and needed) and filter a text; raises :class:`Reject`."""
    if nfc and not unicodedata.is_normalized("NFC", text):
        text = unicodedata.normalize("NFC", text)
    if not text or text.isspace():
        raise Reject("empty_text")
    if (min_chars and stripped_len(text) < min_chars) or (min_words and not has_words(text, min_words)):
        raise Reject("too_short")
    return text


def stripped_len(text: str) -> int:
    """``len(text.strip())``, without copying a long text (its ends are examined in slices)."""
    if len(text) <= SCAN:
        return len(text.strip())
    start, end = 0, len(text)
    while start < end:
        part = text[start : start + SCAN]
        lead = len(part) - len(part.lstrip())
        start += lead
        if lead < len(part):
            break
    while end > start:
        part = text[max(start, end - SCAN) : end]
        trail = len(part) - len(part.rstrip())
        end -= trail
        if trail < len(part):
            break
    return end - start


def has_words(text: str, n: int) -> bool:
    """``len(text.split()) >= n``, without a list of every word of a long text (counted in slices)."""
    if len(text) <= SCAN:
        return len(text.split()) >= n
    count, inside = 0, False  # inside: the previous slice ended inside a word
    for start in range(0, len(text), SCAN):
        part = text[start : start + SCAN]
        count += len(part.split()) - (inside and not part[0].isspace())
        if count >= n:
            return True
        inside = not part[-1].isspace()
    return False


def check_counts(stats: dict[str, Any]) -> None:
    """Raise ``UnbalancedStats`` unless docs_in == docs_out + rejected and the shards hold docs_out."""
    check_balance(stats, "ingest")
    in_shards = sum(shard["docs"] for shard in stats["shards"])
    if in_shards != stats["docs_out"]:
        raise UnbalancedStats(f"ingest: {in_shards} docs in shards != docs_out {stats['docs_out']}")


class _ShardWriter:
    """Writes lines to ``{prefix}_split_{NNNN}{suffix}`` shards of about ``target`` uncompressed bytes.

    Each shard goes to a temporary path registered on ``stack``: renamed when the stack closes cleanly.
    """

    def __init__(self, stack: ExitStack, out_dir: Path, prefix: str, target: int, suffix: str) -> None:
        self._stack, self._dir, self._prefix = stack, out_dir, prefix
        self._target, self._suffix = target, suffix
        self.shards: list[dict[str, Any]] = []
        self._fh: IO[bytes] | None = None
        self._docs = self._bytes = 0

    def write(self, line: bytes) -> None:
        if self._fh is None or self._bytes + len(line) > self._target:
            self._next_shard()
        self._fh.write(line)  # type: ignore[union-attr]
        self._bytes += len(line)
        self._docs += 1

    def _next_shard(self) -> None:
        self.finish()
        name = naming.shard_name(self._prefix, len(self.shards)) + self._suffix
        self.shards.append({"name": name, "docs": 0, "bytes": 0})
        self._fh = _open_on_stack(self._stack, self._dir / name)
        self._docs = self._bytes = 0

    def finish(self) -> None:
        """Close the current shard and record its counts."""
        if self._fh is not None:
            self._fh.close()
            self._fh = None
            self.shards[-1].update(docs=self._docs, bytes=self._bytes)


def _open_on_stack(stack: ExitStack, path: Path) -> IO[bytes]:
    """Open a temporary file for ``path`` that ``stack`` closes, then renames (or deletes on error)."""
    fh = open_binary_writer(stack.enter_context(atomic_path(path)))
    stack.callback(fh.close)
    return fh


def _quarantine_entry(
    source: str, line: int, reason: str, raw: bytes | dict[str, Any], **extra: Any
) -> bytes:
    data = raw if isinstance(raw, bytes) else orjson.dumps(raw, default=str)
    preview = data[:RAW_PREVIEW_BYTES].decode("utf-8", "backslashreplace")
    entry = {"file": source, "line": line, "reason": reason, "raw": preview, **extra}
    return orjson.dumps(entry, option=_LINE)


def _ingest_file(
    path: str,
    fmt: str,
    group: tuple[str, str, str],
    opts: IngestSettings,
    writer: _ShardWriter,
    quarantine: IO[bytes],
    rejected: dict[str, int],
    progress: Progress,
) -> dict[str, Any]:
    """Stream one input into ``writer``/``quarantine``; returns its entry of ``stats["inputs"]``."""
    source = os.path.basename(path)
    lang, domain, subdomain = group
    decode = make_decoder(fmt, opts.text_key, opts.id_key)
    mine: collections.Counter[str] = collections.Counter()  # this file's rejects, by reason
    unreadable: str | None = None

    def one(unit: list[Any]) -> int:
        """Write the record of one unit, or quarantine it; return the documents written (0 or 1).

        The unit is emptied: a long line is let go of once decoded (only its quarantine preview is kept)."""
        nonlocal unreadable
        line, raw = unit
        unit.clear()
        if isinstance(raw, Unreadable):
            if opts.strict:
                raise raw.failure(path, fmt, line)
            mine["unreadable_rest"] += 1
            unreadable = raw.error
            entry = _quarantine_entry(source, line, "unreadable_rest", b"", **dataclasses.asdict(raw))
            quarantine.write(entry)
            return 0
        try:
            text, vid, meta = decode(raw)
            if isinstance(raw, bytes):
                raw = raw[:RAW_PREVIEW_BYTES]
            text = clean_text(text, opts.nfc, opts.min_chars, opts.min_words)
        except Reject as rej:
            if opts.strict:
                raise RejectedRecordError(path, line, rej.reason) from None
            mine[rej.reason] += 1
            quarantine.write(_quarantine_entry(source, line, rej.reason, raw))
            return 0
        record = {
            "id": vid or f"{source}:{line}",
            "text": text,
            "lang": lang,
            "domain": domain,
            "subdomain": subdomain,
            "source": source,
            "line": line,
            "meta": meta,
        }
        writer.write(orjson.dumps(record, default=str, option=_LINE))
        return 1

    docs_in = docs_out = 0
    for unit in iter_units(path, fmt):
        docs_in += 1
        docs_out += one(unit)
        progress.advance(0, 1)
    size = os.path.getsize(path)
    progress.advance(size)
    for reason, count in mine.items():
        rejected[reason] += count
    return {
        "path": path,
        "format": fmt,
        "bytes": size,
        "docs_in": docs_in,
        "docs_out": docs_out,
        "rejected": dict(sorted(mine.items())),
        "unreadable": unreadable,
    }


def _remove_stale_shards(out_dir: Path, prefix: str, keep: set[str]) -> None:
    pattern = naming.shard_file_pattern(prefix)
    for path in out_dir.iterdir():
        if pattern.fullmatch(path.name) and path.name not in keep:
            path.unlink()


def ingest(
    inputs: Iterable[str | os.PathLike[str]], output_dir: str | os.PathLike[str], opts: IngestSettings
) -> dict[str, Any]:
    """Ingest the raw files of one group into ``output_dir``; returns the stats also written to stats.json."""
    paths = sorted(map(str, inputs))
    if not paths:
        raise IngestError("no input files")
    missing = [p for p in paths if not os.path.isfile(p)]
    if missing:
        raise IngestError(f"input file(s) not found: {', '.join(missing)}")
    names = collections.Counter(os.path.basename(p) for p in paths)
    duplicates = sorted(n for n, count in names.items() if count > 1)
    if duplicates:
        raise IngestError(f"input file names must be unique (ids use them): {', '.join(duplicates)}")
    formats = [resolve_format(p, opts.format) for p in paths]
    group = _resolve_group(paths, opts)
    prefix = naming.group_name(*group)
    out = Path(output_dir)
    rejected = dict.fromkeys(REJECT_REASONS, 0)
    with ExitStack() as stack:
        progress = stack.enter_context(Progress(f"ingest {prefix}", sum(map(os.path.getsize, paths))))
        suffix = naming.shard_suffix(opts.compress)
        writer = _ShardWriter(stack, out, prefix, opts.shard_size, suffix)
        quarantine = _open_on_stack(stack, out / QUARANTINE_NAME)
        inputs_stats = [
            _ingest_file(path, fmt, group, opts, writer, quarantine, rejected, progress)
            for path, fmt in zip(paths, formats, strict=True)
        ]
        writer.finish()
        stats = {
            "group": prefix,
            **dict(zip(GROUP_FIELDS, group, strict=True)),
            "files": len(paths),
            "bytes_in": sum(s["bytes"] for s in inputs_stats),
            "docs_in": sum(s["docs_in"] for s in inputs_stats),
            "docs_out": sum(s["docs_out"] for s in inputs_stats),
            "rejected": rejected,
            "shards": writer.shards,
            "inputs": inputs_stats,
            "options": dataclasses.asdict(opts),
        }
        check_counts(stats)
        stats["run"] = progress.summary(stats["docs_in"], stats["docs_out"], sum(rejected.values()))
    _remove_stale_shards(out, prefix, {shard["name"] for shard in writer.shards})
    write_json(out / STATS_NAME, stats)
    return stats


def build_parser() -> argparse.ArgumentParser:
    """The CLI argument parser: inputs and output, then one option per setting."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], fromfile_prefix_chars="@")
    p.add_argument(
        "--input", nargs="+", required=True, metavar="FILE", help="raw files of one group, or @LIST"
    )
    p.add_argument("--output-dir", required=True, type=Path, help="shards, stats.json, quarantine.jsonl")
    settings.add_arguments(p, IngestSettings, "ingest and source settings")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point; returns the exit status."""
    args = build_parser().parse_args(argv)
    output_dir = args.output_dir
    stats = ingest(args.input, output_dir, settings.from_args(IngestSettings, args))
    rejected = sum(stats["rejected"].values())
    print(
        f"ingest {stats['group']}: {stats['files']} files, {stats['docs_in']} docs in,"
        f" {stats['docs_out']} out, {rejected} rejected, {len(stats['shards'])} shards -> {output_dir}",
        file=sys.stderr,
    )
    return 0
