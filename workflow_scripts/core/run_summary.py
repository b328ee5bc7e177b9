"""The lines a run ends with (the Snakefile's ``onsuccess`` and ``onerror``), read from the stages' files.

Done: what was read, kept and rejected (by reason, with the worst files), where the plan, the packs, the
trainer configs and the logs are, and the next command; only the stages whose files exist. Failed: each
failed job's log with its error line, and where every log is.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

WORST = 3  # files named with their rejects
ERROR_CHARS = 400  # of an error shown (it names a file, maybe by a long path)
KEPT_OPTIONS = (
    "--profile",
    "--configfile",
    "--configfiles",
    "--config",
    "-C",
)  # repeated in the next command
REPORT = "snakemake --report report.html"
FAILED_LOG = re.compile(r"^\s+log: (.+?) \(check log file\(s\) for error details\)$", re.M)


@dataclass(frozen=True)
class Places:
    """The run's folders and files, as the rules name them (rules/common.smk)."""

    out: str
    logs: str
    shards: str
    dedup: str
    tokenized: str
    merged: str
    configs_md: str
    report: str


def show(summary: Callable[[], list[str]]) -> None:
    """Print the lines of ``summary()`` to stderr, where Snakemake's own messages go; a summary that fails
    says why in one line and leaves the run's outcome as it was."""
    try:
        lines = summary()
    except Exception as error:  # the run is over: its outcome stands, the summary is extra
        lines = [f"snakepack: no summary of the run ({type(error).__name__}: {error})"]
    if lines:
        print("\n".join(lines), file=sys.stderr, flush=True)


def done(places: Places, argv: Sequence[str], targets: Sequence[str]) -> list[str]:
    """The summary of a run that succeeded; none after `snakemake status`, which is a summary itself."""
    if set(targets) == {"status"}:
        return []
    lines = [f"snakepack: done; outputs under {_shown(places.out)}/"]
    lines += _ingest(places.shards)
    lines += _stage("dedup", Path(places.dedup, "stats.json"), "removed")
    lines += _stage("tokenize", Path(places.tokenized, "stats.json"), "rejected")
    plan = _read(Path(places.out, "plan.json"))
    if plan is not None:
        lines += _plan(places, plan)
    if Path(places.configs_md).is_file():
        lines.append(f"  configs   {_shown(places.configs_md)}: the trainer config of every pack")
    if Path(places.report).is_dir():
        lines.append(f"  report    {REPORT}: its charts are made ({_shown(places.report)}/)")
    lines.append(f"  logs      {_shown(places.logs)}/ (one per job)")
    lines.append(f"  next      {_next(places, plan, argv, targets)}")
    return lines


def failed(places: Places, snakemake_logs: Sequence[str]) -> list[str]:
    """What is known of a run that failed: the failed jobs' logs, each with its error line (from Snakemake's
    log of the run, ``snakemake_logs``: none with ``--logger`` plugins that keep no file)."""
    lines = ["snakepack: the run failed"]
    text = "".join(Path(log).read_text(errors="replace") for log in snakemake_logs)
    for logs in dict.fromkeys(FAILED_LOG.findall(text)):  # each once, in the order the jobs failed
        for name in logs.split(", "):  # a rule with several logs lists them on one line
            lines.append(f"  failed    {_shown(name)}: {_error_line(Path(name))}")
    lines.append(f"  logs      {_shown(places.logs)}/ (one per job)")
    lines += [f"  snakemake {_shown(log)}" for log in snakemake_logs]
    return lines


def _ingest(shards: str) -> list[str]:
    """Read, kept and rejected by reason; the files with the most rejects; where the quarantine is."""
    stage = _read(Path(shards, "stats.json"))
    if stage is None:
        return []
    inputs = [
        entry
        for group in stage.get("parts", {})
        for entry in (_read(Path(shards, group, "stats.json")) or {}).get("inputs", [])
    ]
    rejected = sum(stage["rejected"].values())
    lines = [
        f"  ingest    {len(inputs):,} files, {stage['docs_in']:,} docs read: {stage['docs_out']:,} kept,"
        f" {rejected:,} rejected{_reasons(stage['rejected'])}"
    ]
    worst = sorted(  # files that gave nothing first, then by documents lost
        (e for e in inputs if e["docs_in"] > e["docs_out"]),
        key=lambda e: (e["docs_out"] > 0, e["docs_out"] - e["docs_in"], e["path"]),
    )
    lines += [f"    {_shown(entry['path'])}: {_file(entry)}" for entry in worst[:WORST]]
    if len(worst) > WORST:
        lines.append(f"    and {len(worst) - WORST} more files with rejects")
    if rejected:
        lines.append(f"    quarantined: {_shown(shards)}/<group>/quarantine.jsonl (file, line, reason)")
    return lines


def _file(entry: dict[str, Any]) -> str:
    """What one input lost: its records rejected by reason, and where it became unreadable and why."""
    error = entry.get("unreadable")
    reasons = {
        r: n for r, n in (entry.get("rejected") or {}).items() if not (error and r == "unreadable_rest")
    }
    records = entry["docs_in"] - bool(error)  # the unreadable rest is one unit, not a record
    said = []
    if records and (reasons or not error):
        said.append(f"{records - entry['docs_out']:,} of {records:,} records rejected{_reasons(reasons)}")
    if entry["docs_out"] == 0 and set(reasons) == {"missing_text"}:
        said.append("no record has a text key: is the source's text_key right?")
    if error:
        start = f"line {records + 1:,}" if records else "the start"
        said.append(f"unreadable from {start}: {error[:ERROR_CHARS]}")
    return "; ".join(said)


def _stage(name: str, path: Path, dropped: str) -> list[str]:
    """One stage's documents in, kept and dropped by reason."""
    stats = _read(path)
    if stats is None:
        return []
    reasons = {k: v for k, v in stats[dropped].items() if k != "total"}
    word = "removed" if dropped == "removed" else "rejected"
    return [
        f"  {name:<9} {stats['docs_in']:,} docs in: {stats['docs_out']:,} kept,"
        f" {sum(reasons.values()):,} {word}{_reasons(reasons)}"
    ]


def _plan(places: Places, plan: dict[str, Any]) -> list[str]:
    """Where the plan and the packs are; how many of the packs exist."""
    train, valid = ([p["name"] for p in plan.get(kind, [])] for kind in ("packs", "validation"))
    made = sum(_pack_made(places.merged, p) for p in train + valid)
    notes = len(plan.get("notes") or [])
    lines = [
        f"  plan      {_shown(os.path.join(places.out, 'plan.md'))}: {len(train)} packs,"
        f" {plan.get('total_train_iters', 0):,} iterations" + (f", {notes} notes" if notes else "")
    ]
    if made:
        where = f"  packs     {_shown(places.merged)}/<pack>/<pack>.bin,.idx: "
        count = f"{len(train)} + {len(valid)} validation"
        lines.append(where + (count if made == len(train + valid) else f"{made} of {count} made"))
    return lines


def _next(places: Places, plan: dict[str, Any] | None, argv: Sequence[str], targets: Sequence[str]) -> str:
    """The command that goes on from here: the rest of the run (after a run of some targets), training,
    where training stands (after training), or the report."""
    options = _kept_options(argv)
    if "train" in targets:
        return f"snakemake status {options}".strip() + " (where training stands)"
    packs = [p["name"] for p in (plan or {}).get("packs", [])]
    if targets and (plan is None or not all(_pack_made(places.merged, p) for p in packs)):
        return f"snakemake {options}".strip() + " (the rest of the run)"
    if packs and Path(places.configs_md).is_file():
        return f"snakemake train {options}".strip() + " (training)"
    return f"{REPORT} (the charts)"


def _kept_options(argv: Sequence[str]) -> str:
    """The options of ``argv`` that the next command needs too (profile, config files, config values)."""
    kept: list[str] = []
    taking = False
    for arg in argv[1:]:
        name = arg.partition("=")[0]
        if name in KEPT_OPTIONS:
            kept.append(arg)
            taking = "=" not in arg
        elif arg.startswith("-"):
            taking = False
        elif taking:
            kept.append(arg)
    return " ".join(kept)


def _pack_made(merged: str, pack: str) -> bool:
    return all(Path(merged, pack, f"{pack}.{ext}").is_file() for ext in ("bin", "idx"))


def _reasons(counts: dict[str, int]) -> str:
    """`` (reason n, ...)``, largest first, or nothing."""
    given = sorted(((n, r) for r, n in counts.items() if n), key=lambda item: (-item[0], item[1]))
    return f" ({', '.join(f'{r} {n:,}' for n, r in given)})" if given else ""


def _error_line(log: Path) -> str:
    """The last line of a log that says error (a traceback's last line), else its last line."""
    try:
        lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return "(no log)"
    errors = [line for line in lines if "error" in line.lower()]
    return ((errors or lines or ["(empty)"])[-1])[:ERROR_CHARS]


def _read(path: Path) -> Any:
    try:
        return orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None


def _shown(path: str) -> str:
    """A path relative to the working directory when it lies below it."""
    relative = os.path.relpath(path)
    return path if relative.startswith("..") else relative
