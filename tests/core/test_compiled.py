"""The compiled extensions (core/compiled): one table, one loader, a clear error for a missing one, a stub
beside each, and the install building every one."""

from __future__ import annotations

import importlib
import sys
import tomllib
from pathlib import Path

import pytest

from workflow_scripts import cli
from workflow_scripts.core import compiled
from workflow_scripts.core.cli import UserError

REPO = Path(__file__).resolve().parents[2]


def test_every_extension_loads_and_has_its_source_and_stub() -> None:
    for name in compiled.EXTENSIONS:
        module = compiled.load(name)
        assert module.__name__ == name
        source = REPO / compiled.source(name)
        assert source.is_file() and source.with_suffix(".pyi").is_file(), name


def test_the_install_builds_exactly_the_tables_extensions() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    built = {e["name"]: e["sources"] for e in config["tool"]["setuptools"]["ext-modules"]}
    assert built == {name: [compiled.source(name)] for name in compiled.EXTENSIONS}


def test_a_missing_extension_names_itself_and_the_install_step(monkeypatch: pytest.MonkeyPatch) -> None:
    name = "workflow_scripts.tokens._ids"
    monkeypatch.setitem(sys.modules, name, None)  # what an unbuilt extension's import gives
    with pytest.raises(compiled.ExtensionMissing) as missing:
        compiled.load(name)
    message = str(missing.value)
    assert "workflow_scripts/tokens/_ids.c" in message and "is not built for this Python" in message
    assert "bash .ci/setup" in message and "pip install -e ." in message
    assert isinstance(missing.value, ImportError) and isinstance(missing.value, UserError)


def test_a_missing_extension_stops_the_module_that_needs_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """No fallback: a module that loads a missing extension does not import."""
    monkeypatch.setitem(sys.modules, "workflow_scripts.tokens._jsonl", None)
    monkeypatch.delitem(sys.modules, "workflow_scripts.tokens.reader", raising=False)
    with pytest.raises(compiled.ExtensionMissing, match=r"tokens/_jsonl\.c"):
        importlib.import_module("workflow_scripts.tokens.reader")


def test_a_command_without_its_extension_says_so_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "workflow_scripts.tokens._jsonl", None)
    for module in ("workflow_scripts.tokens.reader", "workflow_scripts.tokens.encode"):
        monkeypatch.delitem(sys.modules, module, raising=False)
    assert cli.main(["tokenize", "--help"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("snakepack tokenize: error: workflow_scripts/tokens/_jsonl.c")
    assert err.count("\n") == 1


def test_only_the_tables_extensions_load() -> None:
    with pytest.raises(KeyError, match="not one of the compiled extensions"):
        compiled.load("workflow_scripts.tokens.reader")
