"""The one command-line face: `snakepack COMMAND`, one error convention; the Snakefile parses light."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from tests.utils import byte_level_bpe, write_jsonl
from workflow_scripts import cli

REPO = Path(__file__).resolve().parents[1]


def test_help_lists_every_command() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "workflow_scripts", "--help"], capture_output=True, text=True, check=True
    ).stdout
    for name in cli.COMMANDS:
        assert f"    {name}" in out, name


@pytest.mark.parametrize("name", sorted(cli.COMMANDS))
def test_every_command_has_its_own_help(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main([name, "--help"])
    assert info.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: snakepack {name} ")


def test_user_error_is_one_line_and_status_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["info", str(tmp_path / "nothing")]) == 2
    err = capsys.readouterr().err
    assert err == f"snakepack info: error: {tmp_path / 'nothing'}.idx: missing file\n"
    assert (
        cli.main(["mixture", "--signature", "s", "--name", "m", "--mixture-json", "{", "--output", "o"]) == 2
    )
    assert capsys.readouterr().err.startswith("snakepack mixture: error: --mixture-json is not JSON")


def test_a_bug_keeps_its_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    from workflow_scripts.core import indexed_dataset

    def broken(prefix: str) -> None:
        raise KeyError("a bug")

    monkeypatch.setattr(indexed_dataset, "IndexedDataset", broken)
    with pytest.raises(KeyError, match="a bug"):
        cli.main(["info", "x"])


def test_a_quick_exit_command_ends_its_process_with_its_output_written(tmp_path: Path) -> None:
    """``tokenize`` (``quick_exit``) run as the process's command skips the interpreter's teardown: its
    files, its log and its status are there all the same, and a failure exits as usual."""
    model = byte_level_bpe(tmp_path, ["some plain text, and more of it"] * 20)
    shard = write_jsonl(tmp_path / "in.jsonl", [{"text": "some text"}] * 3)
    command = [sys.executable, "-m", "workflow_scripts", "tokenize", "--tokenizer-model", str(model)]
    command += ["--output-prefix", str(tmp_path / "out")]
    done = subprocess.run([*command, "--input", str(shard)], capture_output=True, text=True, cwd=REPO)
    assert cli.COMMANDS["tokenize"].quick_exit and done.returncode == 0, done.stderr
    assert "3 in, 3 out, 0 rejected" in done.stderr
    assert orjson.loads((tmp_path / "out_text_document.stats.json").read_bytes())["docs_out"] == 3
    missing = subprocess.run([*command, "--input", "missing.jsonl"], capture_output=True, text=True, cwd=REPO)
    assert missing.returncode == 2 and "snakepack tokenize: error:" in missing.stderr


def test_unknown_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main(["frobnicate"])
    assert info.value.code == 2
    assert "invalid choice: 'frobnicate'" in capsys.readouterr().err


def test_parsing_the_snakefile_imports_nothing_heavy() -> None:
    rules = [REPO / "Snakefile", *(REPO / "rules").glob("*.smk")]
    modules = set()
    for line in (line for p in rules for line in p.read_text().splitlines()):
        if line.startswith("from workflow_scripts"):  # `from A import B`: module A.B where B is a module
            package, names = line.split()[1], line.split(" import ")[1].split(" as ")[0].split(", ")
            modules |= {
                package,
                *(f"{package}.{n}" for n in names if (REPO / package.replace(".", "/") / f"{n}.py").exists()),
            }
    modules = sorted(modules)
    assert {
        "workflow_scripts.inputs",
        "workflow_scripts.train.chain",
        "workflow_scripts.core.train_layout",
    } <= set(modules)
    code = (
        "import sys, importlib; import snakemake.api  # noqa\n"
        "before = set(sys.modules)\n"
        f"for m in {modules!r}: importlib.import_module(m)\n"
        "heavy = {'torch', 'deepspeed', 'pandas', 'pyarrow', 'sentencepiece', 'datasketch', 'numpy'}\n"
        "print(sorted(heavy & {m.split('.')[0] for m in set(sys.modules) - before}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.strip() == "[]"
