"""The tokens package's shape: no import circle, and the stage loop talks to the encoders only through the
``Encoder`` protocol (``engines.base``) and ``choose``."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
TOKENS = REPO / "workflow_scripts" / "tokens"


def imports(path: Path) -> set[str]:
    """The workflow_scripts modules ``path`` imports (a name imported from a package counted as its module),
    those only a type checker reads included."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("workflow_scripts"):
            names |= {node.module, *(f"{node.module}.{a.name}" for a in node.names)}
        elif isinstance(node, ast.Import):
            names |= {a.name for a in node.names if a.name.startswith("workflow_scripts")}
    return names


def module(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_no_import_circle() -> None:
    graph = {module(p): imports(p) for p in TOKENS.rglob("*.py")}
    graph = {name: {d for d in deps if d in graph and d != name} for name, deps in graph.items()}
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> None:
        assert name not in path, " -> ".join([*path[path.index(name) :], name])
        if name not in done:
            for dep in sorted(graph[name]):
                visit(dep, [*path, name])
            done.add(name)

    for name in sorted(graph):
        visit(name, [])


def test_the_stage_loop_talks_to_the_protocol_only() -> None:
    engines = {m for m in imports(TOKENS / "encode.py") if m.startswith("workflow_scripts.tokens.engines")}
    allowed = {"workflow_scripts.tokens.engines", "workflow_scripts.tokens.engines.choose"}
    allowed |= {
        f"workflow_scripts.tokens.engines.base{n}" for n in ("", ".Encoded", ".Encoder", ".Tokenizer")
    }
    assert engines <= allowed, engines - allowed
