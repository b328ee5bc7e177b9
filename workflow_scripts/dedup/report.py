"""Dedup step 5, one job: merge per-shard statistics and the cluster summary; check that the counts add up.

Writes the statistics (totals and per shard) and the report (docs in/out per language, source and source
group, cluster-size histogram, example clusters, candidate/verified pair counts, the LSH S-curve). Fails if
any count does not add up: docs_in == docs_out + removed exact + removed near, per shard and in total, and the
removals equal those the cluster step decided, and docs_in equals the documents that were signed.
"""

from __future__ import annotations

import argparse
import os
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from workflow_scripts.core.fsio import read_json, write_json
from workflow_scripts.core.stage_stats import UnbalancedStats, check_balance
from workflow_scripts.dedup.settings import DedupSettings
from workflow_scripts.dedup.shards import stem

FIELDS = ("in", "out", "exact", "near")


def _check(ok: bool, what: str) -> None:
    if not ok:
        raise UnbalancedStats(f"dedup counts do not add up: {what}")


def check_counts(shards: list[dict[str, Any]], summary: dict[str, Any]) -> None:
    """Raise ValueError unless every count adds up."""
    for s in shards:
        check_balance(s, f"dedup counts do not add up: shard {s['shard']}", dropped_key="removed")
        _check(s["bytes_in"] == s["bytes_out"] + s["bytes_removed"], f"bytes of shard {s['shard']}")
        for key in ("by_lang", "by_source"):
            _check(s["docs_in"] == sum(c["in"] for c in s[key].values()), f"{key} of shard {s['shard']}")
    _check(len(shards) == summary["shards"], f"{len(shards)} shard statistics for {summary['shards']} shards")
    _check(sum(s["docs_in"] for s in shards) == summary["docs"], "docs_in differs from the documents signed")
    for reason in ("exact", "near"):
        removed = sum(s["removed"][reason] for s in shards)
        _check(
            removed == summary["removed"][reason],
            f"{removed} {reason} removed, cluster step decided {summary['removed'][reason]}",
        )


def _merge(rows: Iterable[tuple[str, dict[str, int]]]) -> dict[str, dict[str, int]]:
    """Sum the counts of rows with the same name."""
    total: dict[str, Counter[str]] = {}
    for name, counts in rows:
        total.setdefault(name, Counter()).update(counts)
    return {name: {f: c[f] for f in FIELDS} for name, c in sorted(total.items())}


def _row(s: dict[str, Any]) -> dict[str, int]:
    return {"in": s["docs_in"], "out": s["docs_out"], **s["removed"]}


def s_curve(params: DedupSettings) -> dict[str, float]:
    """Probability that a pair of Jaccard s becomes an LSH candidate, 1 - (1 - s^r)^b."""
    return {
        f"{s / 100:.2f}": round(1 - (1 - (s / 100) ** params.rows) ** params.bands, 4)
        for s in range(50, 101, 5)
    }


def reasons(params: DedupSettings) -> dict[str, str]:
    """The one-line meaning of each removal reason (the stats' keys) under ``params``."""
    steps = [
        step
        for on, step in (
            (params.nfkc, "NFKC"),
            (params.lowercase, "lowercase"),
            (params.digits, "every number as 0"),
            (params.punctuation, "punctuation and symbols as spaces"),
        )
        if on
    ]
    normalised = ", ".join(steps) or "no normalisation"
    return {
        "exact": f"normalised-exact: the same words after {normalised} (dedup.nfkc, lowercase, digits, "
        "punctuation), so texts that differ only there are copies",
        "near": f"near: word {params.ngram}-grams (character {params.char_ngram}-grams for "
        f"{', '.join(params.char_langs) or 'no language'}) at least {params.threshold} alike "
        "(Jaccard, MinHash LSH)",
    }


def summary_line(stats: dict[str, Any]) -> str:
    """The counts in the report's words."""
    removed = stats["removed"]
    return (
        f"{stats['docs_in']} in, {stats['docs_out']} out, removed {removed['exact']} normalised-exact, "
        f"{removed['near']} near"
    )


def build(shards: list[dict[str, Any]], summary: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(statistics, report) from the per-shard statistics and the cluster summary, after checking them."""
    check_counts(shards, summary)
    shards = sorted(shards, key=lambda s: s["shard"])
    totals = {
        k: sum(s[k] for s in shards)
        for k in ("docs_in", "docs_out", "bytes_in", "bytes_out", "bytes_removed")
    }
    removed = {r: sum(s["removed"][r] for s in shards) for r in ("exact", "near")}
    stats = {
        **totals,
        "removed": {**removed, "total": sum(removed.values())},
        "shards": {s["shard"]: _row(s) for s in shards},
    }
    band_files = [f for f in summary["pair_files"] if f["source"] == "bands"]
    hist: Counter[str] = Counter()
    for f in band_files:
        hist.update(f["candidate_jaccard_histogram"])
    params = DedupSettings.from_json(summary["params"])
    report = {
        "params": summary["params"],
        "lsh": {"bands": params.bands, "rows": params.rows, "candidate_probability": s_curve(params)},
        "docs_in": totals["docs_in"],
        "docs_out": totals["docs_out"],
        "removed": stats["removed"],
        "reasons": reasons(params),
        "removed_fraction": round(stats["removed"]["total"] / max(1, totals["docs_in"]), 6),
        "by_lang": _merge((k, c) for s in shards for k, c in s["by_lang"].items()),
        "by_source": _merge((k, c) for s in shards for k, c in s["by_source"].items()),
        "by_group": _merge((s["group"], _row(s)) for s in shards),
        "clusters": summary["clusters"],
        "docs_in_clusters": summary["docs_in_clusters"],
        "cluster_size_histogram": summary["cluster_size_histogram"],
        "examples": summary["examples"],
        "pairs": {
            **{k: sum(f[k] for f in band_files) for k in ("candidates", "verified", "rejected")},
            "exact_edges": summary["edges"]["exact"],
            "near_edges": summary["edges"]["near"],
            "candidate_jaccard_histogram": dict(sorted(hist.items())),
        },
    }
    return stats, report


def write_report(
    stats_files: Sequence[str | os.PathLike[str]],
    summary: str | os.PathLike[str],
    stats_out: str | os.PathLike[str],
    report_out: str | os.PathLike[str],
) -> dict[str, Any]:
    stats, report = build([read_json(p) for p in stats_files], read_json(summary))
    write_json(stats_out, stats)
    write_json(report_out, report)
    return stats


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], fromfile_prefix_chars="@")
    given = parser.add_mutually_exclusive_group(required=True)
    given.add_argument("--stats", nargs="+", help="all per-shard statistics (or @list.txt)")
    given.add_argument("--shards", nargs="+", help="all filtered shards (or @list.txt), with --stats-dir")
    parser.add_argument("--stats-dir", help="the filter step's {shard stem}.stats.json files are here")
    parser.add_argument("--summary", required=True, help="cluster summary JSON of the cluster step")
    parser.add_argument("--output-stats", required=True, help="statistics JSON to write")
    parser.add_argument("--report", required=True, help="report JSON to write")
    args = parser.parse_args(argv)
    if args.shards and not args.stats_dir:
        parser.error("--shards needs --stats-dir")
    stats = args.stats or [os.path.join(args.stats_dir, f"{stem(s)}.stats.json") for s in args.shards]
    s = write_report(stats, args.summary, args.output_stats, args.report)
    params = DedupSettings.from_json(read_json(args.summary)["params"])
    print(f"dedup report: {summary_line(s)} ({reasons(params)['exact']})")
