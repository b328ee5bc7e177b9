"""The rule environments (envs/*.yaml) pin the same version ranges as pyproject.toml."""

import tomllib
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

ROOT = Path(__file__).resolve().parents[2]


CONDA_NAMES = {"pytorch": "torch"}  # conda-forge's name -> PyPI's


def pyproject_specs() -> dict[str, SpecifierSet]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = [*project["dependencies"], *project["optional-dependencies"]["train"]]
    return {Requirement(r).name.lower(): Requirement(r).specifier for r in requirements}


@pytest.mark.parametrize("env", sorted((ROOT / "envs").glob("*.yaml")), ids=lambda p: p.name)
def test_env_matches_pyproject(env: Path) -> None:
    specs = pyproject_specs()
    deps = yaml.safe_load(env.read_text())["dependencies"]
    assert deps, f"{env.name} lists no dependencies"
    pip = [Requirement(r) for d in deps if isinstance(d, dict) for r in d["pip"]]  # PyPI-only packages
    assert not pip or "pip" in deps, f"{env.name}: a pip section needs pip"
    for dep in [d for d in deps if not isinstance(d, dict)] + [f"{r.name} {r.specifier}" for r in pip]:
        name, _, spec = str(dep).partition(" ")
        if name in ("python", "pip"):
            continue
        name = CONDA_NAMES.get(name, name)
        assert name in specs, f"{env.name}: {name} is not a dependency in pyproject.toml"
        assert SpecifierSet(spec.replace(" ", "")) == specs[name], (
            f"{env.name}: {name} {spec} differs from pyproject.toml {specs[name]}"
        )
