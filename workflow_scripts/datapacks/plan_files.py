"""``snakepack plan``: the datapack plan as JSON (for the slicer and trainers), CSV and a Markdown table.

The plan is built in its JSON form (``planner.make_plan``, then ``add_trainer_settings`` and
``add_training``); the specs, tables and text are made from it as a ``Plan``."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path
from typing import Any

import orjson
import pandas as pd

from workflow_scripts.core import schedule
from workflow_scripts.core.fsio import atomic_path, dumps_json, read_json, write_if_changed, write_json
from workflow_scripts.core.indexed_dataset import IndexedDataset
from workflow_scripts.datapacks import pack_index
from workflow_scripts.datapacks.iterations import NO_ESTIMATE
from workflow_scripts.datapacks.plan import Plan
from workflow_scripts.datapacks.planner import PlanError, make_plan
from workflow_scripts.datapacks.settings import PlanSettings
from workflow_scripts.datapacks.slicer import pack_spec


def plan_rows(plan: Plan) -> pd.DataFrame:
    """One row per pack, language and domain: tokens, shares, iteration math and time estimate."""
    rows = []
    for pack in plan.packs:
        for s in pack.slices:
            rows.append(
                {
                    "pack": pack.name,
                    "phase": pack.phase,
                    "mixture": pack.mixture,
                    "lang": s.lang,
                    "domain": s.domain,
                    "tokens": s.tokens,
                    "documents": s.documents,
                    "train_iters": pack.train_iters,
                    "iteration_offset": pack.iteration_offset,
                    "wall_hours": pack.wall_hours,
                }
            )
    keys = ["pack", "phase", "mixture", "lang", "domain", "train_iters", "iteration_offset", "wall_hours"]
    df = pd.DataFrame(rows, columns=[*keys, "tokens", "documents"])  # the columns also without a phase
    df = df.groupby(keys, sort=False, dropna=False, as_index=False)[["tokens", "documents"]].sum()
    df["share"] = (df["tokens"] / df.groupby("pack")["tokens"].transform("sum")).round(4)
    return df


PACK_COLUMNS = ("pack", "phase", "budget", "tokens", "train_iters", "iteration_offset", "trained_tokens")


def pack_table(plan: Plan) -> pd.DataFrame:
    """One row per pack: its budget, real tokens, iterations, offset, upsampled sources and hours."""
    return pd.DataFrame(
        [
            {
                **{c: getattr(p, c if c != "pack" else "name") for c in PACK_COLUMNS},
                "wall_hours": p.wall_hours,
                "upsampled_sources": sum(s.upsampled for s in p.slices),
            }
            for p in plan.packs
        ],
        columns=[*PACK_COLUMNS, "wall_hours", "upsampled_sources"],  # the columns also without a phase
    )


def epochs_table(plan: Plan) -> pd.DataFrame:
    """Epochs read of every source after each pack (values above 1 mean upsampling)."""
    return (
        pd.DataFrame({p.name: {s.source: s.epochs_after for s in p.slices} for p in plan.packs})
        .ffill(axis=1)
        .fillna(0.0)
    )


def sources_table(plan: Plan) -> pd.DataFrame:
    """Token conservation per source: available, taken over all packs, epochs read."""
    return pd.DataFrame(
        [
            {"source": n, **{k: v for k, v in t.to_dict().items() if k != "by_pack"}}
            for n, t in plan.conservation.items()
        ]
    )


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
    epochs = epochs_table(plan)
    upsampled = sorted(n for n, e in plan.final_epochs.items() if e > 1)
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
        f"{plan.max_tokens_per_pack:,}; total train_iters: {plan.total_train_iters:,}",
        "",
        *estimate,
        "## Packs",
        "",
        packs.to_markdown(index=False),
        "",
        *training_lines(plan),
        "## Tokens by language and domain",
        "",
        rows.to_markdown(index=False),
        "",
        "## Tokens per source (available, taken, epochs read)",
        "",
        sources_table(plan).to_markdown(index=False),
        "",
        "## Epochs per source after each pack",
        "",
        epochs.to_markdown(),
        "",
    ]
    if upsampled:
        lines += [f"**Upsampled** (read more than once): {', '.join(upsampled)}", ""]
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


def write_specs(plan: Plan, signature: list[dict[str, Any]], specs_dir: str) -> None:
    """``{specs_dir}/{pack}.json`` for every pack, and the pack index, each written only when it changed;
    specs of packs that are no longer planned are removed."""
    pack_index.write(plan, specs_dir)
    identities = {e["prefix"]: e.get("identity") for e in signature}
    for index, pack in enumerate(plan.packs):
        write_if_changed(
            Path(specs_dir) / f"{pack.name}.json", dumps_json(pack_spec(plan, index, identities))
        )
    for valid in plan.validation:
        spec = pack_spec(plan, None, identities, valid.name)
        write_if_changed(Path(specs_dir) / f"{valid.name}.json", dumps_json(spec))
    planned = {f"{p.name}.json" for p in [*plan.packs, *plan.validation]}
    for old in Path(specs_dir).glob("*.json"):
        if old.name not in planned:
            old.unlink()


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
    args = parser.parse_args(argv)
    config = orjson.loads(args.config_json)
    signature = read_json(args.signature)["prefixes"]
    settings = PlanSettings.from_config(config)
    raw = make_plan(settings, signature, lambda prefix: IndexedDataset(prefix).lengths)
    add_trainer_settings(raw, args.merged_dir)
    add_training(raw, config)
    plan = Plan.from_dict(raw)
    write_specs(plan, signature, args.specs_dir)
    stale = stale_packs(plan, args.merged_dir)
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
    with atomic_path(args.out_md) as tmp:
        tmp.write_text(text)
    sys.stdout.write(text)
