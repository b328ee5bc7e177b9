"""The pack index: what the workflow's input functions read of the plan (the packs' names), beside the pack
specs, in every dry run (a plan made before the index existed is read for them instead). Light: the
Snakefile imports it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from workflow_scripts.core.fsio import dumps_json, read_json, write_if_changed
from workflow_scripts.datapacks.plan import Plan

NAME = "_index/packs.json"  # under the specs directory (a folder: not one of the specs)


def of_plan(plan: Plan) -> dict[str, Any]:
    """The index of a plan."""
    return {"packs": [p.name for p in plan.packs], "validation": [p.name for p in plan.validation]}


def write(plan: Plan, specs_dir: str | os.PathLike[str]) -> None:
    """Write the plan's index, only when it changed."""
    path = Path(specs_dir, NAME)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_if_changed(path, dumps_json(of_plan(plan)))


def read(specs_dir: str | os.PathLike[str], plan_json: str | os.PathLike[str]) -> dict[str, Any]:
    """The index; from the plan itself for a plan made before the index existed."""
    path = Path(specs_dir, NAME)
    return read_json(path) if path.exists() else of_plan(Plan.read(plan_json))
