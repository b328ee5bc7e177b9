"""Helpers shared by the tests: a temporary copy of the workflow, Snakemake runs, small data builders."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WORKFLOW_FILES = ["Snakefile", "rules", "config", "workflow_scripts", "profiles", "envs"]


def snakemake_env() -> dict[str, str]:
    """The environment for a Snakemake subprocess: this interpreter first, no profile or Slurm job vars."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env.pop("SNAKEMAKE_PROFILE", None)
    for key in [k for k in env if k.startswith("SLURM_")]:
        del env[key]
    return env


def tail(text: str, n: int = 60) -> str:
    return "\n".join(text.splitlines()[-n:])


class Workflow:
    """A copy of the workflow in a temporary directory."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True)
        ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".snakemake")
        for name in WORKFLOW_FILES:
            src = REPO / name
            if src.is_dir():
                shutil.copytree(src, root / name, ignore=ignore)
            else:
                shutil.copy2(src, root / name)

    def run(
        self, *args: str, timeout_s: int = 600, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess:
        """Run ``snakemake ARGS`` here; SIGKILL after timeout_s (the Slurm status hang ignores TERM)."""
        cmd = ["timeout", "-s", "KILL", str(timeout_s), sys.executable, "-m", "snakemake", *args]
        proc = subprocess.run(
            cmd,
            cwd=self.root,
            env=env or snakemake_env(),
            capture_output=True,
            text=True,
            timeout=timeout_s + 30,
        )
        proc.output = proc.stdout + proc.stderr
        return proc

    def ok(self, *args: str, timeout_s: int = 600) -> str:
        """Run and assert success; return the output."""
        proc = self.run(*args, timeout_s=timeout_s)
        assert proc.returncode == 0, (
            f"snakemake {' '.join(args)} failed (rc {proc.returncode}):\n{tail(proc.output)}"
        )
        return proc.output
