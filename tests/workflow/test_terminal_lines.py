"""Snakemake's terminal lines on real runs, through the Snakefile's filters (core/snakemake_lines.py): the
progress percentage never goes down as checkpoints add steps, and a read-only pack is one line, not a
traceback."""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from tests.utils import Workflow, tail

RUN = ("--profile", "profiles/local", "--cores", "2")


def test_the_progress_percentage_never_goes_down(workflow: Workflow) -> None:
    """A data-only run (its checkpoints add steps as they finish)."""
    (workflow.root / "config" / "data_only.yaml").write_text(
        "datapacks: {phases: []}\ntrain: {base_config: null}\n"
    )
    out = workflow.ok(*RUN, "--configfile", "config/sample.yaml", "config/data_only.yaml")
    lines = re.findall(r"^(\d+) of (\d+) steps.*$", out, re.M)
    totals = [int(total) for _, total in lines]
    assert len(set(totals)) > 1, tail(out)  # checkpoints added steps: the case that matters
    shown = [float(p) for p in re.findall(r"^\d+ of \d+ steps \((\d+(?:\.\d+)?)%\) done$", out, re.M)]
    assert shown == sorted(shown) and shown[-1] == 100, tail(out)
    assert re.search(r"^\d+ of \d+ steps done \(\d+ more from a checkpoint\)$", out, re.M), tail(out)


def test_a_read_only_pack_is_named_in_one_line(sample_run: Workflow, tmp_path) -> None:
    wf = sample_run.clone(tmp_path / "wf")
    folder = wf.root / "results" / "merged" / "main_1"
    if os.geteuid() == 0:  # root writes anywhere: an immutable folder stands in for a read-only one
        if subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode:
            pytest.skip("chattr +i is not supported here (root ignores file modes)")
    else:
        folder.chmod(0o555)
    try:
        proc = wf.run(*RUN, "--forcerun", "pack")
    finally:
        if os.geteuid() == 0:
            subprocess.run(["chattr", "-i", str(folder)], check=True)
        else:
            folder.chmod(0o755)
    assert proc.returncode != 0
    assert "Traceback" not in proc.output and "job_scheduler.py" not in proc.output, tail(proc.output)
    assert re.search(
        r"^results/merged/main_1/main_1\.(bin|idx): (operation not permitted|permission denied): "
        r"Snakemake cannot replace it \(a read-only file or folder\?\); make both writable",
        proc.output,
        re.M,
    ), tail(proc.output)
