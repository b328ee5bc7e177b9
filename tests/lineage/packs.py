"""Packs the pack writer makes from ``plan_for``'s plan, each with a GPT-NeoX config that trains it: what the
lineage and consumption tests read."""

from __future__ import annotations

from pathlib import Path

from tests.train.reference.conftest import BATCH, SEQ, write_config
from workflow_scripts.core.fsio import write_json
from workflow_scripts.core.indexed_dataset import IndexedDataset
from workflow_scripts.datapacks import packer, plan_table
from workflow_scripts.datapacks.iterations import train_iters
from workflow_scripts.datapacks.plan import Plan
from workflow_scripts.datapacks.specs import pack_spec


def write_plan(plan: Plan, plan_json: Path) -> Path:
    """The plan's JSON and its tables beside it."""
    write_json(plan_json, plan.to_dict())
    plan_table.write(plan_table.tables(plan), plan_json)
    return plan_json


def trained_pack(
    plan: Plan,
    index: int,
    model: Path,
    root: Path,
    offset: int,
    config: Path | None = None,
    save: Path | None = None,
) -> tuple[Path, Path, int]:
    """Pack ``index`` written in ``root/merged``, and its config (``config``, else ``root/{pack}.yml``)
    training it from global step ``offset`` (checkpoints in ``save``): the pack's prefix, the config and
    its iterations."""
    name = plan.packs[index].name
    prefix, config = root / "merged" / name / name, config or root / f"{name}.yml"
    packer.write_pack(pack_spec(plan, index, {}), prefix)
    iters = train_iters(IndexedDataset(prefix).num_tokens, SEQ, BATCH)
    keys = {"save": str(save)} if save else {}
    config.parent.mkdir(parents=True, exist_ok=True)
    write_config(
        config,
        model,
        train_data_paths=[str(prefix)],
        train_data_weights=[1.0],
        train_iters=iters,
        iteration_offset=offset,
        **keys,
    )
    return prefix, config, iters
