"""``snakepack plan``: the datapack plan as a JSON header and its table (for the packs and trainers), a CSV
and a Markdown summary, and each pack's spec.

The plan is built in its in-memory form (``planner.make_plan``, then ``add_trainer_settings`` and
``add_training``); the header, table, specs and text are made from it as a ``Plan``. The CSV and the
Markdown summarise per pack, language and domain (and name the most read sources): at 100,000 sources they
stay a few KB, the rows being in the table (``plan_table``).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pandas as pd

from workflow_scripts.core import schedule
from workflow_scripts.core.fsio import atomic_path, read_json, write_json
from workflow_scripts.core.indexed_dataset import IndexedDataset
from workflow_scripts.datapacks import audit, exclude, plan_table, started
from workflow_scripts.datapacks.iterations import NO_ESTIMATE
from workflow_scripts.datapacks.plan import Plan
from workflow_scripts.datapacks.planner import PlanError, Unexcluded, make_plan
from workflow_scripts.datapacks.settings import PlanSettings
from workflow_scripts.datapacks.specs import write_specs

TOP_SOURCES = 10  # the most read sources plan.md names


def plan_rows(plan: Plan) -> pd.DataFrame:
    """One row per pack, language and domain: tokens, documents, sources, the highest epochs read after the
    pack of its sources that the pack reads, shares, iteration math and time estimate."""
    keys = ["pack", "phase", "mixture", "lang", "domain", "train_iters", "iteration_offset", "wall_hours"]
    slices = plan_table.slice_frame(plan)
    packs = pd.DataFrame(
        [(p.name, p.train_iters, p.iteration_offset, p.wall_hours) for p in plan.packs],
        columns=["pack", "train_iters", "iteration_offset", "wall_hours"],
    )
    df = slices.merge(packs, on="pack", how="left", sort=False).reindex(
        columns=[*keys, "tokens", "documents", "source", "epochs_after"]
    )
    df = df.groupby(keys, sort=False, dropna=False, as_index=False).agg(
        tokens=("tokens", "sum"),
        documents=("documents", "sum"),
        sources=("source", "size"),
        max_epochs=("epochs_after", "max"),
    )
    df["share"] = (df["tokens"] / df.groupby("pack")["tokens"].transform("sum")).round(4)
    return df


PACK_COLUMNS = (
    "pack",
    "phase",
    "budget",
    "tokens",
    "train_iters",
    "iteration_offset",
    "trained_tokens",
    "sources",
)


def pack_table(plan: Plan) -> pd.DataFrame:
    """One row per pack: its budget, real tokens, iterations, offset, sources read and upsampled, hours."""
    return pd.DataFrame(
        [
            {
                **{c: getattr(p, c if c != "pack" else "name") for c in PACK_COLUMNS},
                "wall_hours": p.wall_hours,
                "upsampled_sources": p.upsampled_sources,
            }
            for p in plan.packs
        ],
        columns=[*PACK_COLUMNS, "wall_hours", "upsampled_sources"],  # the columns also without a phase
    )


def groups_table(plan: Plan) -> pd.DataFrame:
    """Per language and domain: its sources, tokens available, taken and held out, the sources read more
    than once and the highest epochs read of one of them."""
    sources = plan_table.source_frame(plan)
    return sources.groupby(["lang", "domain"], sort=True, as_index=False).agg(
        sources=("source", "size"),
        available=("available", "sum"),
        taken=("taken", "sum"),
        held_out=("held_out", "sum"),
        upsampled=("epochs", lambda e: int((e > 1).sum())),
        max_epochs=("epochs", "max"),
    )


def most_read(plan: Plan, top: int = TOP_SOURCES) -> pd.DataFrame:
    """The ``top`` sources read the most epochs (then the most tokens): available, taken, epochs, held out."""
    sources = plan_table.source_frame(plan).drop(columns="prefix")
    return sources.sort_values(["epochs", "taken"], ascending=False, kind="stable").head(top)


def add_training(plan: dict[str, Any], config: dict[str, Any]) -> None:
    """Add to the plan (its JSON form) each pack's training cadence (config ``train``): its trainer config,
    ``checkpoint_factor``, ``exit_interval``, Slurm segments, hours at the s/iter guess and the checkpoints
    it saves; and the checkpoint disk of the whole run under the retention policy, refused over
    ``checkpoint_quota_tb``."""
    train = config.get("train") or {}
    if not train.get("base_config"):
        return
    cadence = schedule.Cadence.from_config(train)
    ext = ".yml" if train["trainer"] == "neox" else ".args"
    start = schedule.start_offset(train.get("finetune_from"), train["trainer"])
    saves: list[int] = []
    for pack in plan["packs"]:
        given = (train["phase_overrides"].get(pack["phase"]) or {}).get("checkpoint_factor")
        row = dataclasses.asdict(cadence.pack(start + pack["iteration_offset"], pack["train_iters"], given))
        saves += row.pop("saves")
        pack["training"] = {"config": f"train/{pack['name']}/{pack['name']}{ext}", **row}
    params = (config.get("training") or {}).get("model_params")
    kept = schedule.kept_checkpoints(saves, train["keep_last"], train["milestones"])
    each = schedule.checkpoint_bytes(params, train["bytes_per_param"]) if params else None
    disk = {
        "checkpoints_saved": len(saves),
        "checkpoints_kept": len(kept),
        "tb_each": None if each is None else round(each / 1e12, 6),
        # while a new checkpoint is written, the oldest kept one still exists
        "tb_needed": None if each is None else round(each * (len(kept) + 1) / 1e12, 6),
        "quota_tb": train.get("checkpoint_quota_tb"),
    }
    plan["checkpoint_disk"] = disk
    if (
        disk["quota_tb"] is not None
        and disk["tb_needed"] is not None
        and disk["tb_needed"] > disk["quota_tb"]
    ):
        raise PlanError(
            f"the checkpoints need {disk['tb_needed']:g} TB ({len(kept)} kept + 1 being written, "
            f"{disk['tb_each']:g} TB each), over train.checkpoint_quota_tb {disk['quota_tb']:g}: set "
            "train.keep_last, fewer milestones, or a larger quota"
        )


def has_estimate(plan: Plan) -> bool:
    """Whether the plan estimates wall hours (``training.model_params``, ``gpus`` and ``tflops_per_gpu``)."""
    return any(p.wall_hours is not None for p in plan.packs)


def markdown(plan: Plan) -> str:
    """The human-readable plan (without an estimate, the hours are left out and it says so once)."""
    packs, rows = pack_table(plan), plan_rows(plan)
    sources = plan_table.source_frame(plan)
    upsampled = sources.loc[sources["epochs"] > 1, "source"].tolist()
    estimate: list[str] = []
    if not has_estimate(plan):
        packs, rows = packs.drop(columns="wall_hours"), rows.drop(columns="wall_hours")
        estimate = [f"wall time: {NO_ESTIMATE}", ""]
    if not plan.packs:
        estimate += ["no phases (`datapacks.phases`): the data is counted, no pack is cut", ""]
    lines = [
        "# Datapack plan",
        "",
        f"tokens per iteration: {plan.tokens_per_iter:,} (seq_length {plan.seq_length} x global batch "
        f"{plan.global_batch_size}); epoch rule: {plan.epoch_rule}; max tokens per pack: "
        f"{plan.max_tokens_per_pack:,}; total train_iters: {plan.total_train_iters:,}; "
        f"sources: {len(sources):,}",
        "",
        *estimate,
        "## Packs",
        "",
        packs.to_markdown(index=False),
        "",
        *training_lines(plan),
        "## Tokens by language and domain (sources read, the highest epochs read after the pack)",
        "",
        rows.to_markdown(index=False),
        "",
        "## Sources by language and domain (tokens available, taken, held out; read more than once)",
        "",
        groups_table(plan).to_markdown(index=False),
        "",
        f"## The {min(TOP_SOURCES, len(sources))} most read sources (every source: the plan's table)",
        "",
        most_read(plan).to_markdown(index=False),
        "",
    ]
    if upsampled:
        more = f" and {len(upsampled) - TOP_SOURCES:,} more" if len(upsampled) > TOP_SOURCES else ""
        named = ", ".join(upsampled[:TOP_SOURCES])
        lines += [f"**Upsampled** (read more than once, {len(upsampled):,}): {named}{more}", ""]
    if plan.notes:
        lines += ["## Notes", "", *(f"- {note}" for note in plan.notes), ""]
    return "\n".join(lines)


def training_lines(plan: Plan) -> list[str]:
    """The training section of the Markdown plan (when the config has ``train.base_config``)."""
    disk = plan.checkpoint_disk
    if disk is None or not any(p.training for p in plan.packs):
        return []
    rows = pd.DataFrame([{"pack": p.name, **p.training.to_dict()} for p in plan.packs if p.training])
    rows["extra_save_iters"] = rows["extra_save_iters"].map(len)
    quota = "" if disk.quota_tb is None else f" of a {disk.quota_tb:g} TB quota"
    need = "unknown (set training.model_params)" if disk.tb_needed is None else f"{disk.tb_needed:g} TB"
    return [
        "## Training (trainer config, checkpoint cadence, Slurm segments, hours at the s/iter guess)",
        "",
        rows.to_markdown(index=False),
        "",
        f"checkpoints: {disk.checkpoints_saved} saved, {disk.checkpoints_kept} kept under the "
        f"retention policy; disk needed: {need}{quota}",
        "",
    ]


def add_trainer_settings(plan: dict[str, Any], merged_dir: str) -> None:
    """Give every pack of the plan (its JSON form) its merged prefix and the trainer settings that read it in
    one epoch.

    GPT-NeoX (the Tilde fork's ``iteration_offset``): one path per pack, its own ``train_iters``.
    Megatron-LM: the whole pack as the training split (``--split 100,0,0``; its default split would hold
    back documents for validation).
    """
    for pack in plan["validation"]:
        pack["merged_prefix"] = os.path.abspath(os.path.join(merged_dir, pack["name"], pack["name"]))
    for pack in plan["packs"]:
        prefix = os.path.abspath(os.path.join(merged_dir, pack["name"], pack["name"]))
        pack["merged_prefix"] = prefix
        pack["neox"] = {
            "train_data_paths": [prefix],
            "train_data_weights": [1.0],
            "train_iters": pack["train_iters"],
            "iteration_offset": pack["iteration_offset"],
            "seq_length": plan["seq_length"],
            "train_batch_size": plan["global_batch_size"],
        }
        pack["megatron_data_args"] = ["--data-path", prefix, "--split", "100,0,0"]


def stale_packs(plan: Plan, merged_dir: str) -> list[str]:
    """Merged packs left by an earlier, longer plan."""
    planned = {p.name for p in [*plan.packs, *plan.validation]}
    root = Path(merged_dir)
    return (
        sorted(d.name for d in root.iterdir() if d.is_dir() and d.name not in planned)
        if root.is_dir()
        else []
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--config-json", required=True, help="JSON with seed, training, datapacks, mixtures")
    parser.add_argument("--signature", required=True, help="data signature JSON from the count stage")
    parser.add_argument("--json", required=True, dest="out_json")
    parser.add_argument("--csv", required=True, dest="out_csv")
    parser.add_argument("--md", required=True, dest="out_md")
    parser.add_argument("--merged-dir", required=True, help="where the merged packs go: {dir}/{pack}/{pack}")
    parser.add_argument(
        "--specs-dir", required=True, help="one spec file per pack, rewritten only if changed"
    )
    parser.add_argument("--train-dir", help="the train folder: the packs up to the last started one are kept")
    args = parser.parse_args(argv)
    with no_cycle_collection():
        write_plan(args)


@contextlib.contextmanager
def no_cycle_collection() -> Iterator[None]:
    """Without the cyclic garbage collector: the signature's and the plan's objects live to the end of the
    command and hold no cycles to speak of, so it would walk them again and again (a third of the time at
    100,000 sources, bench/bench_plan.py) and free nothing; the peak memory is the same without it."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def excluded_lines(plan: Plan) -> str:
    """plan.md's note of the documents taken out (``datapacks.exclude``) and the started packs (and so their
    checkpoints) that hold some of them; empty when none is."""
    if not plan.excluded:
        return ""
    documents = sum(len(e.documents) for e in plan.excluded)
    held: dict[str, list[str]] = {}
    for entry in plan.excluded:
        for pack in entry.started_packs:
            held.setdefault(pack, []).append(entry.source)
    where = (
        "; started packs that hold some (they and their checkpoints have seen them): "
        + ", ".join(f"{pack} ({', '.join(names)})" for pack, names in held.items())
        if held
        else "; no started pack holds one"
    )
    valid = documents - sum(len(e.places) for e in plan.excluded)
    where += f"; {valid} held out for validation stay in their validation packs" if valid else ""
    return (
        f"\n**Excluded**: {documents} documents of {len(plan.excluded)} sources (datapacks.exclude), read by "
        f"no training pack planned now{where}. `snakepack lineage --hash` gives the steps that read them.\n"
    )


def write_plan(args: argparse.Namespace) -> None:
    """The plan of ``main``'s arguments: its header and table, CSV, Markdown and specs."""
    config = orjson.loads(args.config_json)
    signature = read_json(args.signature)["prefixes"]
    settings = PlanSettings.from_config(config)
    train = config.get("train") or {}
    trainer = train.get("trainer", "neox")
    kept = []
    if args.train_dir and not settings.datapacks.replan_started:
        kept = started.kept_packs(args.specs_dir, args.train_dir)
    excluded = exclude.resolve(settings.datapacks.exclude, signature)
    try:
        raw = make_plan(settings, signature, lambda prefix: IndexedDataset(prefix).lengths, kept, excluded)
    except Unexcluded as refused:  # named as the entries were: raw file and line, hash
        raise refused.named({s: exclude.names(signature, s, d) for s, d in refused.skipped.items()}) from None
    add_trainer_settings(raw, args.merged_dir)
    add_training(raw, config)
    plan = Plan.from_dict(raw)
    first_step = schedule.start_offset(train.get("finetune_from"), trainer)
    started.check(plan, kept, signature, args.specs_dir, args.train_dir or "", first_step)
    accounted = audit.check(plan)  # before anything is written: every document read as the epochs say
    write_specs(plan, signature, args.specs_dir, keep={k.name for k in kept})
    stale = stale_packs(plan, args.merged_dir)
    plan_table.write(plan_table.tables(plan), args.out_json)
    write_json(args.out_json, plan.to_dict())
    with atomic_path(args.out_csv) as tmp:
        plan_rows(plan).to_csv(tmp, index=False)
    text = markdown(plan)
    if stale:
        print(
            f"warning: merged packs not in this plan (do not train on them): {', '.join(stale)}",
            file=sys.stderr,
        )
        text += (
            f"\n**Stale packs** in {args.merged_dir} (not in this plan; delete them): {', '.join(stale)}\n"
        )
    read = ", ".join(
        f"{n} read {k}x" if k != "0" else f"{n} not reached" for k, n in accounted["read"].items()
    )
    if kept:
        names = ", ".join(k.name for k in kept)
        text += (
            f"\n**Started packs kept as they are** (planned after them): {names}; the last: {kept[-1].why}\n"
        )
    text += excluded_lines(plan)
    text += (
        f"\n**Audit**: the {accounted['documents']} documents of {accounted['sources']} sources: {read}; "
        f"{accounted['held_out']} held out for validation"
        + (f", {accounted['excluded']} excluded" if plan.excluded else "")
        + " (`snakepack audit-packs`).\n"
    )
    with atomic_path(args.out_md) as tmp:
        tmp.write_text(text)
    sys.stdout.write(text)
