"""The data section: a funnel of every stage (documents in, out and dropped by reason; raw bytes to pack
tokens), dedup cluster sizes and removal rate per group, tokens per document per language, and the
quarantine's top reasons with an example ``file:line``."""

from __future__ import annotations

import glob
import os
from collections import Counter
from typing import Any

import numpy as np
import orjson
import pandas as pd

from workflow_scripts.core.fsio import read_json
from workflow_scripts.core.indexed_dataset import IndexedDataset
from workflow_scripts.datapacks.plan import Plan
from workflow_scripts.report.charts import Chart, colors, figure, message_figure

PREFIXES_PER_LANG = 16  # tokens per document: at most this many tokenized prefixes of each language are read
QUANTILES = (0.05, 0.25, 0.5, 0.75, 0.95)


def funnel_rows(
    ingest: dict[str, Any] | None,
    dedup: dict[str, Any] | None,
    tokenize: dict[str, Any] | None,
    raw_bytes: int | None,
    tokens: int | None,
    plan: Plan | None,
) -> pd.DataFrame:
    """One row per stage that ran: documents in, out, dropped by reason, whether they add up, bytes."""
    rows = []

    def add(stage: str, stats: dict[str, Any], dropped: dict[str, int], **extra: Any) -> None:
        total = sum(dropped.values())
        rows.append(
            {
                "stage": stage,
                "docs_in": stats["docs_in"],
                "docs_out": stats["docs_out"],
                "dropped": total,
                "dropped_by_reason": ", ".join(f"{k}={v}" for k, v in sorted(dropped.items()) if v),
                "adds_up": stats["docs_in"] == stats["docs_out"] + total,
                **extra,
            }
        )

    if ingest:
        add("ingest", ingest, ingest["rejected"], bytes_in=raw_bytes)
    if dedup:
        removed = {k: v for k, v in dedup["removed"].items() if k != "total"}
        add("dedup", dedup, removed, bytes_in=dedup["bytes_in"], bytes_out=dedup["bytes_out"])
    if tokenize:
        add("tokenize", tokenize, tokenize["rejected"], tokens=tokens)
    if plan and plan.packs:
        docs = sum(p.documents for p in plan.packs)
        rows.append({"stage": "packs", "docs_out": docs, "tokens": sum(p.tokens for p in plan.packs)})
    columns = ["stage", "docs_in", "docs_out", "dropped", "dropped_by_reason", "adds_up"]
    return pd.DataFrame(rows, columns=[*columns, "bytes_in", "bytes_out", "tokens"]).astype(
        {c: "Int64" for c in ("docs_in", "docs_out", "dropped", "bytes_in", "bytes_out", "tokens")}
    )


def funnel(table: pd.DataFrame) -> Chart:
    """Documents kept and dropped at each stage; raw bytes, kept bytes, tokens and pack tokens."""
    fig, (left, right) = figure(12, 4, ncols=2)
    stages = table[table["stage"] != "packs"]
    y = np.arange(len(stages))[::-1]
    left.barh(y, stages["docs_out"], color="#2a6", label="kept")
    left.barh(y, stages["dropped"], left=stages["docs_out"], color="#d43", label="dropped")
    for yi, row in zip(y, stages.itertuples(), strict=True):
        note = f" {row.docs_out:,} of {row.docs_in:,}" + (
            f" ({row.dropped_by_reason})" if row.dropped else ""
        )
        left.text(row.docs_in, yi, note, va="center", fontsize=7)
    left.set_yticks(y, stages["stage"])
    left.set_xlim(0, (stages["docs_in"].max() or 1) * 1.6)
    left.set_xlabel("documents")
    left.legend(loc="lower right")
    flows = {
        "raw file bytes": _first(table, "ingest", "bytes_in"),
        "shard bytes": _first(table, "dedup", "bytes_in"),
        "kept bytes": _first(table, "dedup", "bytes_out"),
        "tokens": _first(table, "tokenize", "tokens"),
        "pack tokens": _first(table, "packs", "tokens"),
    }
    flows = {k: v for k, v in flows.items() if v is not None}
    right.bar(list(flows), list(flows.values()), color=colors(len(flows)))
    for x, value in enumerate(flows.values()):
        right.text(x, value, f"{value:,}", ha="center", va="bottom", fontsize=7)
    right.set_yscale("log")
    right.tick_params(axis="x", labelsize=7)
    right.set_title("bytes -> tokens (packs may repeat a source)")
    return Chart("funnel", "Funnel: documents and bytes from the raw files to the packs", fig, table)


def _first(table: pd.DataFrame, stage: str, column: str) -> int | None:
    values = table.loc[table["stage"] == stage, column].dropna()
    return int(values.iloc[0]) if len(values) else None


def dedup_clusters(report: dict[str, Any]) -> Chart:
    """How many duplicate clusters have each size (a cluster keeps one document)."""
    hist = sorted((int(k), v) for k, v in report["cluster_size_histogram"].items())
    table = pd.DataFrame(hist, columns=["cluster_size", "clusters"])
    if table.empty:
        fig = message_figure("no duplicate clusters")
    else:
        fig, (ax,) = figure(7, 3.5)
        ax.bar(table["cluster_size"].astype(str), table["clusters"], color="#58a")
        ax.set_yscale("log")
        ax.set_xlabel("documents in the cluster")
        ax.set_ylabel("clusters")
    return Chart("dedup_clusters", "Dedup: cluster sizes", fig, table)


def dedup_removal(report: dict[str, Any]) -> Chart:
    """The share of each source group's documents removed as normalised-exact and near duplicates (the
    report's ``reasons`` define them)."""
    table = pd.DataFrame([{"group": g, **c} for g, c in sorted(report["by_group"].items())])
    table["removed_rate"] = ((table["exact"] + table["near"]) / table["in"].clip(lower=1)).round(6)
    fig, (ax,) = figure(9, 4)
    ax.bar(table["group"], table["exact"] / table["in"].clip(lower=1), color="#d43", label="normalised-exact")
    ax.bar(
        table["group"],
        table["near"] / table["in"].clip(lower=1),
        bottom=table["exact"] / table["in"].clip(lower=1),
        color="#e96",
        label="near",
    )
    ax.tick_params(axis="x", rotation=60)
    ax.set_ylabel("share of documents removed")
    ax.set_title(f"{report['removed']['total']:,} of {report['docs_in']:,} documents removed")
    ax.legend()
    return Chart("dedup_removal", "Dedup: removal rate per source group", fig, table)


def document_tokens(signature: dict[str, Any]) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    """Tokens of each document, per language, from up to PREFIXES_PER_LANG evenly spaced prefixes each."""
    by_lang: dict[str, list[dict[str, Any]]] = {}
    for prefix in signature["prefixes"]:
        by_lang.setdefault(prefix["lang"], []).append(prefix)
    lengths, read = {}, {}
    for lang, prefixes in sorted(by_lang.items()):
        picks = np.unique(
            np.linspace(0, len(prefixes) - 1, min(PREFIXES_PER_LANG, len(prefixes))).astype(int)
        )
        parts = []
        for i in picks:
            data = IndexedDataset(prefixes[i]["prefix"])
            ends = np.concatenate([[0], np.cumsum(data.lengths, dtype=np.int64)])
            parts.append(ends[data.doc_idx[1:]] - ends[data.doc_idx[:-1]])
        lengths[lang], read[lang] = np.concatenate(parts), len(picks)
    return lengths, read


def tokens_per_document(signature: dict[str, Any]) -> Chart:
    """The distribution of tokens per document, per language (box: quartiles; whiskers: 5th-95th)."""
    lengths, read = document_tokens(signature)
    table = pd.DataFrame(
        [
            {
                "lang": lang,
                "documents": len(v),
                "prefixes_read": read[lang],
                "mean": round(float(v.mean()), 1) if len(v) else None,
                **{f"p{int(q * 100)}": float(np.quantile(v, q)) if len(v) else None for q in QUANTILES},
            }
            for lang, v in lengths.items()
        ]
    )
    fig, (ax,) = figure(9, 4)
    langs = [lang for lang, v in lengths.items() if len(v)]
    ax.boxplot([lengths[lang] for lang in langs], tick_labels=langs, whis=(5, 95), showfliers=False)
    ax.set_yscale("log")
    ax.set_ylabel("tokens per document")
    return Chart("doc_tokens", "Tokens per document, per language", fig, table)


def quarantine_records(
    shards_dir: str | None, tokenized_dir: str | None, tokenize: dict[str, Any] | None
) -> list[tuple[str, str, str]]:
    """(stage, reason, example) of every quarantined record, ingest's and tokenize's (only the prefixes
    whose stats reject something are read)."""
    found = []
    if shards_dir:
        for path in sorted(glob.glob(os.path.join(glob.escape(shards_dir), "*", "quarantine.jsonl"))):
            with open(path, "rb") as f:
                found += [("ingest", r["reason"], f"{r['file']}:{r['line']}") for r in map(orjson.loads, f)]
    for name, part in sorted((tokenize or {}).get("parts", {}).items()):
        if sum(part["rejected"].values()) and tokenized_dir:
            path = os.path.join(tokenized_dir, name.removesuffix(".stats.json") + ".quarantine.jsonl")
            source = name.removesuffix("_text_document.stats.json")
            with open(path, "rb") as f:
                found += [("tokenize", r["reason"], f"{source}:{r['line']}") for r in map(orjson.loads, f)]
    return found


def quarantine(records: list[tuple[str, str, str]], top: int = 10) -> Chart:
    """The most frequent reasons records were set aside, each with its first example ``file:line``."""
    counts = Counter((stage, reason) for stage, reason, _ in records)
    first: dict[tuple[str, str], str] = {}
    for stage, reason, where in records:
        first.setdefault((stage, reason), where)
    table = pd.DataFrame(
        [
            {"stage": s, "reason": r, "records": n, "example": first[(s, r)]}
            for (s, r), n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:top]
        ],
        columns=["stage", "reason", "records", "example"],
    )
    if table.empty:
        fig = message_figure("nothing quarantined")
    else:
        fig, (ax,) = figure(9, 0.4 * len(table) + 1.2)
        y = np.arange(len(table))[::-1]
        ax.barh(y, table["records"], color="#d43")
        for yi, row in zip(y, table.itertuples(), strict=True):
            ax.text(row.records, yi, f" {row.records}  e.g. {row.example}", va="center", fontsize=7)
        ax.set_yticks(y, [f"{s}: {r}" for s, r in zip(table["stage"], table["reason"], strict=True)])
        ax.set_xlim(0, table["records"].max() * 2.2)
        ax.set_xlabel("records")
    return Chart("quarantine", "Quarantine: top reasons, with an example", fig, table)


def raw_bytes(shards_dir: str) -> int:
    """The raw bytes ingest read, from every group's stats."""
    paths = glob.glob(os.path.join(glob.escape(shards_dir), "*", "stats.json"))
    return sum(read_json(p)["bytes_in"] for p in paths)


def charts(
    ingest: str | None,
    dedup: str | None,
    dedup_report: str | None,
    tokenize: str | None,
    signature: str | None,
    plan: str | None,
) -> list[Chart]:
    """Every chart of the data section, from the stage stats given (a stage not given is left out)."""
    paths = {"ingest": ingest, "dedup": dedup, "dedup_report": dedup_report, "tokenize": tokenize}
    load = {k: read_json(v) if v else None for k, v in {**paths, "signature": signature}.items()}
    sig = load["signature"]
    tokens = sum(p["tokens"] for p in sig["prefixes"]) if sig else None
    shards_dir = os.path.dirname(ingest) if ingest else None
    tokenized_dir = os.path.dirname(tokenize) if tokenize else None
    table = funnel_rows(
        load["ingest"],
        load["dedup"],
        load["tokenize"],
        raw_bytes(shards_dir) if shards_dir else None,
        tokens,
        Plan.read(plan) if plan else None,
    )
    made = [funnel(table)]
    if load["dedup_report"]:
        made += [dedup_clusters(load["dedup_report"]), dedup_removal(load["dedup_report"])]
    if sig:
        made.append(tokens_per_document(sig))
    made.append(quarantine(quarantine_records(shards_dir, tokenized_dir, load["tokenize"])))
    return made
