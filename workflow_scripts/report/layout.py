"""The report's charts and files, for the rules (standard library only: the Snakefile imports it).

Each section (``plan``, ``data``, ``training``) is a folder of ``{chart}.png`` and ``{chart}.csv`` and one
``index.html``; each chart's one-line caption is ``report/{section}/{chart}.rst`` in the workflow.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any


def chart_names(trainer_configs: bool, dedup: bool, excluded: bool = False) -> dict[str, list[str]]:
    """The charts of each section: the checkpoints chart with trainer configs, the dedup charts with dedup,
    the excluded chart with documents taken out (``datapacks.exclude`` set)."""
    return {
        "plan": ["schedule", "tokens_by_language", "tokens_by_domain", "epochs", "mixture"]
        + (["checkpoints"] if trainer_configs else [])
        + (["excluded"] if excluded else []),
        "data": [
            "funnel",
            *(["dedup_clusters", "dedup_removal"] if dedup else []),
            "doc_tokens",
            "quarantine",
        ],
        "training": ["loss", "speed", "timeline", "consumption"],
    }


def rule_files(
    basedir: str, root: str, report: Callable[..., Any], config: dict[str, Any]
) -> tuple[dict[str, list[str]], dict[str, dict[str, Any]]]:
    """Each section's caption files (its rule's inputs) and named outputs (``report``: Snakemake's
    ``report()``, see :func:`marker`), for the charts of :func:`chart_names` that ``config`` asks for."""
    charts = chart_names(
        bool(config["train"]["base_config"]),
        config["dedup"]["enabled"],
        bool(config["datapacks"].get("exclude")),  # a list, or a file listing them (known at parse time)
    )
    found = {s: captions(basedir, s, c) for s, c in charts.items()}
    return found, {s: outputs(root, s, c, marker(report, s)) for s, c in charts.items()}


def captions(basedir: str, section: str, charts: list[str]) -> list[str]:
    """The caption file of each chart, relative to the working directory (a moved tree reruns nothing)."""
    folder = os.path.relpath(os.path.join(basedir, "report", section))
    return [os.path.join(folder, f"{c}.rst") for c in charts]


def marker(report: Callable[..., Any], section: str) -> Callable[..., Any]:
    """``mark`` for :func:`outputs`: Snakemake's ``report()`` of a path once it exists (the report of a
    partial tree leaves out what has not run yet instead of failing), else the path."""

    def mark(path: str, caption: str | None, labels: dict[str, str]) -> Any:
        if not os.path.exists(path):
            return path
        return report(path, caption=caption, category=section.capitalize(), labels=labels)

    return mark


def outputs(root: str, section: str, charts: list[str], mark: Callable[..., Any]) -> dict[str, Any]:
    """A section's named outputs: the page, then each chart's PNG and CSV. ``mark(path, caption, labels)``
    gives what the rule declares (Snakemake's ``report()`` of the path, once it exists)."""
    found = {"page": mark(f"{root}/{section}/index.html", None, {"chart": "overview", "file": "page"})}
    for chart in charts:
        caption = f"../report/{section}/{chart}.rst"
        for ext, kind in ((".png", "chart"), (".csv", "table")):
            found[f"{chart}_{kind}"] = mark(
                f"{root}/{section}/{chart}{ext}", caption, {"chart": chart, "file": kind}
            )
    return found
