"""A target after ``--configfile`` (argparse reads it as a second config file): Snakemake fails before it
reads the Snakefile, with a traceback; ``config_errors.install_missing_configfile``, in place before its
command line is read, makes that one line."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.utils import REPO, snakemake_env
from workflow_scripts.core.config_errors import configfile_not_found

TARGET_HINT = (
    "config file 'plan' not found: a target after --configfile is read as a config file; put targets before "
    "--configfile or use --configfile F --"
)


def snakemake(*args: str, hook: bool) -> subprocess.CompletedProcess:
    """Snakemake's own command line in this checkout, with the hook installed first or not."""
    code = "import logging, sys\n"
    if hook:
        code += "from workflow_scripts.core.config_errors import install_missing_configfile\n"
        code += "install_missing_configfile()\n"
    else:  # .ci/setup's .pth file installed it at this interpreter's start: taken off again
        code += "logging.getLogger('snakemake.logging').filters.clear()\n"
    code += "from snakemake.cli import main\nmain(sys.argv[1:])\n"
    return subprocess.run(
        [sys.executable, "-c", code, *args], cwd=REPO, env=snakemake_env(), capture_output=True, text=True
    )


def test_the_messages() -> None:
    assert configfile_not_found("plan") == TARGET_HINT
    assert configfile_not_found("mine.yaml") == "config file 'mine.yaml' not found"


@pytest.mark.workflow  # Snakemake's command line (it fails before it reads the workflow)
@pytest.mark.parametrize("hook", [False, True])
def test_a_target_after_configfile(hook: bool) -> None:
    proc = snakemake("--configfile", "config/sample.yaml", "plan", "-n", hook=hook)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1
    if not hook:  # what Snakemake alone says: the traceback this fixes (a change in Snakemake shows here)
        assert "Traceback" in out and "FileNotFoundError" in out
        return
    assert out.strip().splitlines()[-1] == TARGET_HINT and "Traceback" not in out, out


@pytest.mark.workflow
def test_the_set_up_snakemake_says_it_in_one_line() -> None:
    """The venv .ci/setup made: its .pth file installs the hook whenever --configfile is given."""
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "--configfile", "config/sample.yaml", "plan", "-n"],
        cwd=REPO, env=snakemake_env(), capture_output=True, text=True,
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and "Traceback" not in out, out
    assert out.strip().splitlines()[-1] == TARGET_HINT, out
