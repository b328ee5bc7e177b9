"""The plan section: tokens per pack by language and domain, epochs read per source and phase, the
mixtures' target shares against what the packs got, the iteration schedule, the checkpoint disk, and the
documents taken out (``datapacks.exclude``) with the started packs that hold some."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from workflow_scripts.core import naming
from workflow_scripts.datapacks import plan_table
from workflow_scripts.datapacks.iterations import NO_ESTIMATE
from workflow_scripts.datapacks.plan import Plan
from workflow_scripts.report.charts import Chart, colors, figure, message_figure

# Beyond this many sources the epochs chart's rows are groups (100,000 rows cannot be drawn).
MAX_SOURCE_ROWS = 60


def slices(plan: Plan) -> pd.DataFrame:
    """One row per slice of every training pack (pack, phase, mixture, source, language, domain, tokens,
    epochs read after it), from the plan's table."""
    table = plan_table.slice_frame(plan)
    table["domain"] = table["lang"] + "/" + table["domain"]
    return table[["pack", "phase", "mixture", "source", "lang", "domain", "tokens", "epochs_after"]]


def stacked_tokens(plan: Plan, key: str) -> Chart:
    """Tokens per pack (x: pack and phase), stacked by ``key`` (lang or domain)."""
    table = slices(plan).pivot_table(index="pack", columns=key, values="tokens", aggfunc="sum", sort=False)
    table = table.fillna(0).astype(int)
    fig, (ax,) = figure()
    bottom = np.zeros(len(table))
    labels = [f"{p.name}\n({p.phase})" for p in plan.packs]
    for column, color in zip(table.columns, colors(len(table.columns)), strict=True):
        ax.bar(labels, table[column], bottom=bottom, label=column, color=color)
        bottom += table[column].to_numpy()
    ax.set_ylabel("tokens")
    ax.legend(
        fontsize=7, ncols=2 if len(table.columns) > 8 else 1, bbox_to_anchor=(1.01, 1), loc="upper left"
    )
    table = table.reset_index()
    table.columns.name = None
    title = "language" if key == "lang" else "domain"
    return Chart(f"tokens_by_{title}", f"Tokens per pack, by {title}", fig, table)


def epochs(plan: Plan) -> Chart:
    """Epochs read of every source after each phase (cumulative); above 1 a source is read again (red).
    Beyond ``MAX_SOURCE_ROWS`` sources, a row per group: its sources' highest epochs, and their number."""
    phases = list(dict.fromkeys(p.phase for p in plan.packs))
    read = slices(plan)
    # a source's epochs only grow: after a phase, its last slice's (of that phase or one before)
    last = read.groupby(["source", "phase"], sort=False)["epochs_after"].max().unstack("phase")
    table = last.reindex(columns=phases).ffill(axis=1).fillna(0.0).sort_index()
    sources = None
    if len(table) > MAX_SOURCE_ROWS:
        groups = pd.Index([naming.parse_shard(s)["group"] for s in table.index], name="group")
        sources = table.groupby(groups).size()
        table = table.groupby(groups).max()
    table.index.name = "source" if sources is None else "group"
    table.columns.name = None
    fig, (ax,) = figure(9, max(3.0, 0.28 * len(table) + 1.2))
    values = table.to_numpy()
    rgb = np.where(values[..., None] > 1, [0.86, 0.24, 0.2], [0.35, 0.55, 0.8])
    alpha = np.clip(values / max(values.max(), 1), 0.15, 1)[..., None]
    ax.imshow(np.concatenate([rgb, alpha], axis=-1), aspect="auto")
    ax.set_xticks(range(len(phases)), phases)
    ax.set_yticks(range(len(table)), table.index, fontsize=7)
    ax.grid(False)
    for (i, j), value in np.ndenumerate(values):
        ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=7)
    per = "" if sources is None else ", highest of each group's sources"
    ax.set_title(f"epochs read after each phase{per} (red: more than one)")
    if sources is not None:
        table.insert(0, "sources", sources)
    table = table.reset_index()
    table.columns.name = None
    table["read_again"] = values.max(axis=1) > 1
    what = "source" if sources is None else "group (highest of its sources)"
    return Chart("epochs", f"Epochs read of each {what}, per phase", fig, table)


def mixture_shares(plan: Plan, mixtures: dict[str, dict[str, Any]]) -> Chart:
    """Each mixture's target share per language and domain against the share its packs really got."""
    got = slices(plan).groupby(["mixture", "domain"])["tokens"].sum()
    rows = []
    for name in sorted(set(got.index.get_level_values(0))):
        total = got[name].sum()
        targets = mixtures.get(name, {}).get("by_domain", {})
        for domain in sorted(set(targets) | set(got[name].index)):
            rows.append(
                {
                    "mixture": name,
                    "domain": domain,
                    "target": round(targets.get(domain, 0.0), 6),
                    "actual": round(float(got[name].get(domain, 0)) / total, 6),
                }
            )
    table = pd.DataFrame(rows)
    table["difference"] = (table["actual"] - table["target"]).round(6)
    fig, (ax,) = figure(10, 4.5)
    x = np.arange(len(table))
    ax.bar(x - 0.2, table["target"], 0.4, label="target", color="#9ab")
    ax.bar(x + 0.2, table["actual"], 0.4, label="packs", color="#2a6")
    ax.set_xticks(
        x, [f"{m}\n{d}" for m, d in zip(table["mixture"], table["domain"], strict=True)], fontsize=7
    )
    ax.tick_params(axis="x", rotation=90)
    ax.set_ylabel("share of the mixture's tokens")
    ax.legend()
    return Chart("mixture", "Mixture: target shares against what the packs got", fig, table)


def schedule(plan: Plan) -> Chart:
    """Each pack's global iterations (offset to offset + train_iters), with its estimated wall time (without
    an estimate, the title says so and the hours are left out)."""
    table = pd.DataFrame(
        [
            {
                "pack": p.name,
                "phase": p.phase,
                "tokens": p.tokens,
                "train_iters": p.train_iters,
                "iteration_offset": p.iteration_offset,
                "trained_tokens": p.trained_tokens,
                "wall_hours": p.wall_hours,
            }
            for p in plan.packs
        ]
    )
    fig, (ax,) = figure(9, max(2.5, 0.4 * len(table) + 1))
    phases = list(dict.fromkeys(table["phase"]))
    palette = dict(zip(phases, colors(len(phases)), strict=True))
    y = np.arange(len(table))[::-1]
    ax.barh(y, table["train_iters"], left=table["iteration_offset"], color=table["phase"].map(palette))
    estimated = table["wall_hours"].notna().any()
    for yi, row in zip(y, table.itertuples(), strict=True):
        hours = f", {row.wall_hours:.3g} h" if estimated else ""
        label = f" {row.train_iters:,} iters{hours}"
        ax.text(row.iteration_offset + row.train_iters, yi, label, va="center", fontsize=7)
    ax.set_yticks(y, table["pack"])
    ax.set_xlabel("global iteration")
    ax.set_xlim(0, (table["iteration_offset"] + table["train_iters"]).max() * 1.3 or 1)
    title = f"total train_iters {plan.total_train_iters:,}; {plan.tokens_per_iter:,} tokens/iter"
    ax.set_title(title if estimated else f"{title}\n{NO_ESTIMATE}")
    name = (
        "train_iters, offsets and estimated wall time"
        if estimated
        else f"train_iters and offsets ({NO_ESTIMATE})"
    )
    return Chart("schedule", name, fig, table)


def checkpoints(plan: Plan, configs: pd.DataFrame) -> Chart:
    """Per pack: Slurm segments and hours at the s/iter guess; the run's checkpoint disk against its quota."""
    disk = plan.checkpoint_disk
    fig, (ax, right) = figure(10, 4, ncols=2)
    ax.bar(configs["pack"], configs["hours"], color="#58a")
    for x, row in enumerate(configs.itertuples()):
        ax.text(x, row.hours, f"{row.segments} seg.", ha="center", va="bottom", fontsize=7)
    ax.set_ylabel("hours at the s/iter guess")
    ax.tick_params(axis="x", rotation=45)
    bars = {"needed": (disk.tb_needed if disk else None) or 0.0}
    if disk and disk.quota_tb is not None:
        bars["quota"] = disk.quota_tb
    right.bar(list(bars), list(bars.values()), color=["#58a", "#bbb"][: len(bars)])
    right.set_ylabel("checkpoint disk (TB)")
    kept = f"{disk.checkpoints_saved if disk else 0} saved, {disk.checkpoints_kept if disk else 0} kept"
    if disk and disk.tb_needed is None:
        kept += "\ndisk needed unknown (set training.model_params)"
    right.set_title(kept)
    table = configs.copy()
    values = disk.to_dict() if disk else {}
    for key in ("checkpoints_saved", "checkpoints_kept", "tb_each", "tb_needed", "quota_tb"):
        table[key] = values.get(key)
    return Chart("checkpoints", "Slurm segments, hours and checkpoint disk", fig, table)


NONE_EXCLUDED = "no documents taken out: datapacks.exclude lists none"


def excluded(plan: Plan) -> Chart:
    """The documents taken out (``datapacks.exclude``) per source: how many, how many of them are held out
    for validation (they stay there), and the started packs that hold some (their checkpoints saw them)."""
    rows = [
        (e.source, len(e.documents), len(e.documents) - len(e.places), ", ".join(e.started_packs))
        for e in plan.excluded
    ]
    table = pd.DataFrame(rows, columns=["source", "documents", "held_out", "started_packs"])
    held = sorted({pack for e in plan.excluded for pack in e.started_packs})
    text = (
        f"{int(table['documents'].sum())} documents of {len(table)} sources taken out of the packs"
        " planned now\n"
        f"started packs that hold some (their checkpoints saw them): {', '.join(held) or 'none'}"
        if rows
        else NONE_EXCLUDED
    )
    return Chart("excluded", "Documents taken out (datapacks.exclude)", message_figure(text), table)


NO_PACKS = "no packs: datapacks.phases is empty (a data-only run)"
TITLES = {  # each chart's title, for a plan without packs
    "schedule": "train_iters and offsets",
    "tokens_by_language": "Tokens per pack, by language",
    "tokens_by_domain": "Tokens per pack, by domain",
    "epochs": "Epochs read of each source, per phase",
    "mixture": "Mixture: target shares against what the packs got",
    "checkpoints": "Slurm segments, hours and checkpoint disk",
}


def charts(
    plan: Plan,
    mixtures: dict[str, dict[str, Any]],
    configs: pd.DataFrame | None,
    excluded_chart: bool = False,
) -> list[Chart]:
    """Every chart of the plan section (the checkpoint chart only with the trainer configs, the excluded
    chart only with ``excluded_chart``: ``datapacks.exclude`` is set); a plan without packs gets each other
    chart as a line that says so."""
    more = [excluded(plan)] if excluded_chart else []
    if not plan.packs:
        names = list(TITLES) if configs is not None else list(TITLES)[:-1]
        return [
            Chart(n, TITLES[n], message_figure(NO_PACKS), pd.DataFrame({"note": [NO_PACKS]})) for n in names
        ] + more
    made = [
        schedule(plan),
        stacked_tokens(plan, "lang"),
        stacked_tokens(plan, "domain"),
        epochs(plan),
        mixture_shares(plan, mixtures),
    ]
    if configs is not None:
        made.append(checkpoints(plan, configs))
    return made + more
