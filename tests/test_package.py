"""The package's shape: imports go downward only, and every package's docstring is a true map of it."""

from __future__ import annotations

import ast
import importlib
import re
import tomllib
from pathlib import Path

import pytest

from workflow_scripts.core import compiled

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "workflow_scripts"
# Pipeline order: a stage imports core and earlier stages only; the report reads every stage's outputs.
LAYERS = ["core", "ingest", "dedup", "tokens", "datapacks", "train", "lineage", "report"]
PACKAGES = sorted(p.parent for p in PACKAGE.rglob("__init__.py"))


def _stage_imports(path: Path) -> set[str]:
    """The top-level subpackages of ``workflow_scripts`` that ``path`` imports (relative imports resolved)."""
    names = set()
    parts = path.relative_to(REPO).with_suffix("").parts
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = parts[: len(parts) - node.level]
                names.add(".".join([*base, *([node.module] if node.module else [])]))
            elif node.module:
                names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
    return {n.split(".")[1] for n in names if n.startswith("workflow_scripts.") and n.count(".") >= 1}


@pytest.mark.parametrize("layer", LAYERS)
def test_a_layer_imports_core_and_earlier_stages_only(layer: str) -> None:
    """Every module of the layer, its subpackages included (``train/reference``, ``tokens/engines``)."""
    allowed = {"core"} if layer == "core" else {"core", *LAYERS[: LAYERS.index(layer) + 1]}
    modules = [p for p in (PACKAGE / layer).rglob("*.py") if p.name != "__main__.py"]
    assert len(modules) > 2  # the layer was found
    for path in modules:
        assert _stage_imports(path) <= allowed, (
            f"{path.relative_to(REPO)} imports {_stage_imports(path) - allowed}"
        )


def test_every_package_is_in_a_layer() -> None:
    top = {p.relative_to(PACKAGE).parts[0] for p in PACKAGES if p != PACKAGE}
    assert top == set(LAYERS)


def _modules(package: Path) -> set[str]:
    """The modules and subpackages directly in ``package`` (not ``__init__``/``__main__``)."""
    files = {p.stem for p in package.glob("*.py") if p.stem not in ("__init__", "__main__")}
    compiled = {p.stem for p in package.glob("*.pyi")}  # the compiled parts, each with its stub
    subpackages = {p.name for p in package.iterdir() if (p / "__init__.py").exists()}
    return files | compiled | subpackages


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_a_package_docstring_names_the_modules_that_exist(package: Path) -> None:
    """The docstring names each module and subpackage in the package (as ``name``, ``name/`` or
    ``name.py``), and every ``name.py`` it names exists (``name/`` may be a folder of the results tree)."""
    name = ".".join(package.relative_to(REPO).parts)
    doc = importlib.import_module(name).__doc__ or ""
    named = {n.split(".")[0] for n in re.findall(r"``([A-Za-z_][\w.]*?)(?:/|\.py)?``", doc)}
    missing = _modules(package) - named
    assert not missing, f"{name}'s docstring does not name {sorted(missing)}"
    for ghost in re.findall(r"``([A-Za-z_]\w*)\.py``", doc):
        assert (package / f"{ghost}.py").exists(), (
            f"{name}'s docstring names {ghost}, which is not in the package"
        )


def test_every_compiled_part_is_built_named_and_stubbed() -> None:
    """pyproject builds exactly the extensions of ``core.compiled``; each has a stub, and README and
    .ci/setup (which installs the compiler they need) name each one."""
    built = {
        m["name"]
        for m in tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["ext-modules"]
    }
    assert built == set(compiled.EXTENSIONS)
    readme, setup = (REPO / "README.md").read_text(), (REPO / ".ci" / "setup").read_text()
    for name in compiled.EXTENSIONS:
        assert (REPO / compiled.source(name)).with_suffix(".pyi").is_file(), name
        stem = name.rsplit(".", 1)[1]
        assert f"`{stem}`" in readme and f"{stem}.c" in setup, name
