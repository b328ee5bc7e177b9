"""A chart: a matplotlib figure and the table behind it, saved with stable bytes (PNG, CSV, and a page)."""

from __future__ import annotations

import base64
import html
import io
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.figure import Figure

from workflow_scripts.core.fsio import atomic_path

DPI = 100
PALETTE = plt.get_cmap("tab20").colors
# Deterministic bytes: no creation date or software version in the PNG, a fixed SVG hash salt.
plt.rcParams.update({"svg.hashsalt": "snakepack", "figure.dpi": DPI, "font.size": 9, "axes.grid": True})
plt.rcParams.update({"grid.alpha": 0.3, "axes.axisbelow": True})
PNG_METADATA = {"Software": None}


@dataclass
class Chart:
    """One chart of a report section: ``name`` names its files, ``table`` holds the numbers drawn."""

    name: str
    title: str
    figure: Figure
    table: pd.DataFrame


def figure(width: float = 9, height: float = 4.5, ncols: int = 1) -> tuple[Figure, list]:
    """A new figure with ``ncols`` axes side by side."""
    fig, axes = plt.subplots(1, ncols, figsize=(width, height), squeeze=False)
    return fig, list(axes[0])


def colors(n: int) -> list:
    """``n`` distinct colours, the same for the same position in every chart."""
    return [PALETTE[i % len(PALETTE)] for i in range(n)]


def png_bytes(fig: Figure) -> bytes:
    """The figure as PNG bytes that do not change from run to run."""
    buffer = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buffer, format="png", dpi=DPI, metadata=PNG_METADATA)
    plt.close(fig)
    return buffer.getvalue()


def message_figure(text: str) -> Figure:
    """A small figure that says why a chart has nothing to show (an empty quarantine, no dedup)."""
    fig, (ax,) = figure(6, 1.5)
    ax.axis("off")
    ax.text(0.5, 0.5, text, ha="center", va="center", fontsize=11)
    return fig


def table_html(table: pd.DataFrame, name: str) -> str:
    """The table as HTML, every number written in full (the test reads them back)."""
    return table.to_html(index=False, table_id=f"table-{name}", na_rep="", float_format=lambda x: f"{x:.6g}")


def write_section(
    out_dir: str | os.PathLike[str], title: str, charts: Sequence[Chart], captions: dict[str, str]
) -> None:
    """Write every chart's ``{name}.png`` and ``{name}.csv`` and the section's ``index.html`` page."""
    out = Path(out_dir)
    parts = [
        "<!DOCTYPE html>",
        '<html><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title>",
        f"<style>{STYLE}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
    ]
    for chart in charts:
        png = png_bytes(chart.figure)
        with atomic_path(out / f"{chart.name}.png") as tmp:
            tmp.write_bytes(png)
        with atomic_path(out / f"{chart.name}.csv") as tmp:
            chart.table.to_csv(tmp, index=False)
        uri = "data:image/png;base64," + base64.b64encode(png).decode("ascii")
        parts += [
            f'<section id="chart-{chart.name}" class="chart">',
            f"<h2>{html.escape(chart.title)}</h2>",
            f'<p class="caption">{html.escape(captions.get(chart.name, ""))}</p>',
            f'<img alt="{html.escape(chart.title)}" src="{uri}">',
            "<details open><summary>table</summary>",
            table_html(chart.table, chart.name),
            "</details></section>",
        ]
    parts.append("</body></html>")
    with atomic_path(out / "index.html") as tmp:
        tmp.write_text("\n".join(parts) + "\n", encoding="utf-8")


STYLE = (
    "body{font-family:sans-serif;margin:1.5em;color:#222}"
    "h1{font-size:1.5em}h2{font-size:1.15em;margin-top:1.8em}"
    ".caption{color:#555;margin:.2em 0 .6em}img{max-width:100%;border:1px solid #eee}"
    "table{border-collapse:collapse;font-size:.8em;margin-top:.4em}"
    "td,th{border:1px solid #ddd;padding:2px 6px;text-align:right}th{background:#f4f4f4}"
    "summary{cursor:pointer;color:#555;font-size:.85em}"
)


def read_captions(paths: Sequence[str]) -> dict[str, str]:
    """The one-line captions of the charts, from the report's caption files (``{name}.rst``)."""
    return {Path(p).stem: " ".join(Path(p).read_text(encoding="utf-8").split()) for p in paths}
