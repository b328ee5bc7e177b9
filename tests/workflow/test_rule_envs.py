"""Every rule's environment provides what its command imports (conda channels are not reachable here, so
this is checked statically): the third-party imports reachable from the command's module, within the
package, must be listed in the rule's env file and in pyproject.toml."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from functools import cache
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement

from workflow_scripts.cli import COMMANDS

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "workflow_scripts"
# import name -> distribution name, where they differ
DISTRIBUTIONS = {"yaml": "pyyaml"}
CONDA_NAMES = {"pytorch": "torch"}  # conda-forge's name -> PyPI's
EXTRAS = {"train.yaml": "train"}  # the pyproject extra an env file mirrors besides the dependencies
# what a module needs at run time without importing it by name
RUNTIME = {"to_markdown(": "tabulate"}  # pandas' DataFrame.to_markdown imports tabulate


def module_file(module: str) -> Path:
    path = REPO / Path(*module.split("."))
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


@cache
def third_party(module: str) -> frozenset[str]:
    """Distributions imported by ``module`` and, transitively, by the package modules it imports (an import
    cycle, such as one through a ``TYPE_CHECKING`` import, is followed once)."""
    found: set[str] = set()
    seen, todo = {module}, [module]
    while todo:
        source = module_file(todo.pop()).read_text()
        found |= {dist for marker, dist in RUNTIME.items() if marker in source}
        for node in ast.walk(ast.parse(source)):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            for name in names:
                top = name.split(".")[0]
                if top == "workflow_scripts":
                    if name not in seen and module_file(name).is_file():
                        seen.add(name)
                        todo.append(name)
                elif top not in sys.stdlib_module_names and top != "__future__":
                    found.add(DISTRIBUTIONS.get(top, top))
    return frozenset(found)


def rules() -> list[tuple[str, str, str]]:
    """(rule, command, env file) of every rule that runs a snakepack command."""
    found = []
    for smk in sorted((REPO / "rules").glob("*.smk")):
        for block in re.split(r"\n(?=(?:rule|checkpoint) )", smk.read_text())[1:]:
            name = block.split()[1].rstrip(":")
            env = re.search(r'conda:\s*"([^"]+)"', block)
            for command in re.findall(r"python -m workflow_scripts ([a-z-]+)", block):
                found.append((name, command, env.group(1) if env else ""))
    return found


def env_packages(env: str) -> set[str]:
    deps = yaml.safe_load((REPO / "rules" / env).resolve().read_text())["dependencies"]
    names = {str(d).split()[0].lower() for d in deps if not isinstance(d, dict)}
    names |= {Requirement(r).name.lower() for d in deps if isinstance(d, dict) for r in d["pip"]}
    return {CONDA_NAMES.get(name, name) for name in names}


def project_packages(env: str) -> set[str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extra = project["optional-dependencies"].get(EXTRAS.get(Path(env).name, ""), [])
    return {Requirement(r).name.lower() for r in [*project["dependencies"], *extra]}


def test_every_command_rule_is_found() -> None:
    names = {name for name, _, _ in rules()}
    assert {"ingest", "dedup_signatures", "tokenize", "count", "plan", "pack"} <= names


@pytest.mark.parametrize(("rule", "command", "env"), rules(), ids=lambda v: str(v))
def test_rule_env_provides_its_commands_imports(rule: str, command: str, env: str) -> None:
    assert env, f"rule {rule} has no conda env"
    needed = third_party(COMMANDS[command].module)
    assert needed <= env_packages(env), f"{rule} ({env}) lacks {sorted(needed - env_packages(env))}"
    project = project_packages(env)
    assert needed <= project, f"pyproject.toml lacks {sorted(needed - project)}"


def test_the_scan_sees_through_the_package() -> None:
    assert {"pandas", "tabulate", "pyyaml", "numpy"} <= third_party("workflow_scripts.datapacks.plan_files")
    assert "sentencepiece" in third_party("workflow_scripts.tokens.encode")


@pytest.mark.parametrize("command", ["train-config", "status"])
def test_light_train_commands_need_no_torch(command: str) -> None:
    """The train config and status run for every plan and on login nodes: no torch, DeepSpeed or HF."""
    assert not third_party(COMMANDS[command].module) & {"torch", "deepspeed", "transformers"}
