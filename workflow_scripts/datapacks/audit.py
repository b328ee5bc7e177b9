"""``snakepack audit-packs``: every document of every source accounted for by the plan's packs.

Usage::

    snakepack audit-packs --plan results/plan.json [--csv audit.csv]

From the plan's rows alone (``plan_table``: a pack's slices are ranges ``(epoch, first, stop)`` of each
source's reading order), per source, in pack order:

- the training packs walk the source without a gap or an overlap: each slice starts at the cursor the one
  before it left (the first at epoch 0, document 0), its ranges follow one another, wrapping to the next
  epoch at the end of the documents training may read, and it ends at the cursor it states;
- the documents held out for validation (the last ones of the reading order, in epoch 0) are read by no
  training pack, and by their validation pack once;
- documents taken out (the plan's ``excluded``: their places) may be skipped: a gap of them between ranges
  or slices is no gap (the started packs before the exclusion read them);
- so with the source's last cursor at epoch ``E``, document ``D``, its documents before ``D`` were read
  ``E + 1`` times and the others ``E`` times (0: not reached yet), the excluded ones counted apart; the
  tokens the slices took add up to the source's ``taken``, the held-out ones to its ``held_out``, and its
  ``epochs`` is ``E + D / documents``.

A source's documents are the sources' table's (the signature's count). The answer (JSON on standard
output) sums the documents by how often they are read, lists every problem, and exits 2 when there is
one; ``--csv`` writes a row per source. The plan runs it on every plan it writes.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import orjson
import pandas as pd

from workflow_scripts.core.cli import UserError
from workflow_scripts.core.fsio import atomic_path
from workflow_scripts.datapacks import plan_table
from workflow_scripts.datapacks.plan import Plan


class AuditError(UserError, ValueError):
    """The plan's packs lose or repeat a document."""


@dataclass
class SourceAudit:
    """One source's documents: read how many times, held out, not reached yet."""

    source: str
    documents: int
    held_out: int = 0
    excluded: int = 0
    reads: dict[int, int] = field(default_factory=dict)  # times read -> documents
    problems: list[str] = field(default_factory=list)

    @property
    def not_reached(self) -> int:
        return self.reads.get(0, 0)


def audit_source(
    source: dict[str, Any],
    training: list[dict[str, Any]],
    held: list[dict[str, Any]],
    excluded: Sequence[int] = (),
) -> SourceAudit:
    """Check one source's rows (``training`` in pack order) against its row of the sources' table;
    ``excluded``: the places taken out."""
    name = source["source"]
    result = SourceAudit(name, source["documents"])
    problems = result.problems
    readable = result.documents  # the documents training may read: all but the held-out tail
    held_tokens = 0
    for row in held:
        ((epoch, first, stop),) = row["ranges"]
        if epoch != 0 or stop != result.documents or row["documents"] != stop - first:
            problems.append(
                f"{row['pack']}: held-out range {[epoch, first, stop]} is not the source's last documents"
            )
        readable, result.held_out, held_tokens = first, stop - first, held_tokens + row["tokens"]
    if held_tokens != (source["held_out"] or 0):
        problems.append(f"held out {held_tokens} tokens, the sources' table says {source['held_out']}")
    out = set(excluded)

    def skip(epoch: int, doc: int) -> tuple[int, int]:
        """The first place from ``epoch:doc`` on that is not excluded."""
        for _ in range(len(out) + 1):
            if doc not in out:
                break
            epoch, doc = (epoch + 1, 0) if doc + 1 == readable else (epoch, doc + 1)
        return epoch, doc

    epoch, doc, taken = 0, 0, 0
    for row in training:
        where = row["pack"]
        if skip(row["start_epoch"], row["start_doc"]) != skip(epoch, doc):
            problems.append(
                f"{where}: starts at {row['start_epoch']}:{row['start_doc']}, the cursor is at {epoch}:{doc}"
            )
            epoch, doc = row["start_epoch"], row["start_doc"]
        documents = 0
        for e, first, stop in row["ranges"]:
            if skip(e, first) != skip(epoch, doc) or not first < stop <= readable:
                problems.append(
                    f"{where}: range {[e, first, stop]} does not go on from {epoch}:{doc} within {readable}"
                )
            documents += stop - first
            epoch, doc = (e + 1, 0) if stop == readable else (e, stop)
        if skip(row["end_epoch"], row["end_doc"]) != skip(epoch, doc):
            problems.append(
                f"{where}: ends at {row['end_epoch']}:{row['end_doc']}, its ranges at {epoch}:{doc}"
            )
        epoch, doc = row["end_epoch"], row["end_doc"]
        if documents != row["documents"]:
            problems.append(f"{where}: its ranges hold {documents} documents, it says {row['documents']}")
        taken += row["tokens"]
    if taken != source["taken"]:
        problems.append(f"the packs take {taken} tokens, the sources' table says {source['taken']}")
    if readable and not math.isclose(epoch + doc / readable, source["epochs"], abs_tol=1e-6):
        problems.append(
            f"read {epoch + doc / readable:.6f} epochs, the sources' table says {source['epochs']}"
        )
    below = sum(p < doc for p in out)
    result.excluded = len(out)
    counts = ((epoch + 1, doc - below), (epoch, readable - doc - len(out) + below))
    result.reads = {k: n for k, n in counts if n}
    return result


def audit(plan: Plan) -> list[SourceAudit]:
    """Every source of the plan, audited."""
    tables = plan_table.tables(plan)
    training_packs = {p.name for p in plan.packs}
    rows: dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]]]] = {}
    for row in tables.slices.to_pylist():
        training, held = rows.setdefault(row["source"], ([], []))
        (training if row["pack"] in training_packs else held).append(row)
    out = {e.source: e.places for e in plan.excluded}
    return [
        audit_source(s, *rows.get(s["source"], ([], [])), out.get(s["source"], ()))
        for s in tables.sources.to_pylist()
    ]


def summary(audits: Sequence[SourceAudit]) -> dict[str, Any]:
    """The documents of all sources by how often they are read, held out, and every problem."""
    reads: Counter[int] = Counter()
    for a in audits:
        reads.update(a.reads)
    problems = [f"{a.source}: {p}" for a in audits for p in a.problems]
    return {
        "ok": not problems,
        "sources": len(audits),
        "documents": sum(a.documents for a in audits),
        "held_out": sum(a.held_out for a in audits),
        "excluded": sum(a.excluded for a in audits),  # taken out (datapacks.exclude): read by no later pack
        "read": {str(k): reads[k] for k in sorted(reads)},  # times read -> documents (0: not reached yet)
        "problems": problems,
    }


def check(plan: Plan) -> dict[str, Any]:
    """The plan's audit summary; ``AuditError`` naming the first problems when there is one."""
    result = summary(audit(plan))
    if result["problems"]:
        more = len(result["problems"]) - 5
        listed = "; ".join(result["problems"][:5]) + (f"; and {more} more" if more > 0 else "")
        raise AuditError(f"{plan.where or 'the plan'}: the packs lose or repeat documents: {listed}")
    return result


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--plan", required=True, help="plan.json, with its table beside it")
    parser.add_argument("--csv", help="write a row per source here")
    args = parser.parse_args(argv)
    audits = audit(Plan.read(args.plan))
    if args.csv:
        frame = pd.DataFrame(
            [
                {
                    **asdict(a),
                    "reads": orjson.dumps({str(k): n for k, n in a.reads.items()}).decode(),
                    "problems": len(a.problems),
                }
                for a in audits
            ]
        )
        with atomic_path(args.csv) as tmp:
            frame.to_csv(tmp, index=False)
    result = summary(audits)
    sys.stdout.buffer.write(orjson.dumps(result, option=orjson.OPT_INDENT_2) + b"\n")
    return 0 if result["ok"] else 2
