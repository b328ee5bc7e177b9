"""A re-mix after the first two packs trained through the real local Slurm: their bins, configs, checkpoints
and segment records stay as they are, the dry run plans nothing of theirs, the audit is balanced, and
``snakemake train`` resumes at the third pack from the second one's last checkpoint.

Three packs of 4 iterations (the sample at scale 0.3: warmup_0, then main_1 and main_2 of the phase main),
one segment each, no evaluation; the data is built locally, the training runs through
``--profile profiles/slurm-local`` (about 3 minutes on a 2-core machine, 3 segments). Skips without the test
cluster (see test_slurm.py).
"""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from tests.utils import Workflow, snakemake_env
from tests.workflow.test_reruns import mixture_change
from tests.workflow.test_slurm import SNAKEMAKE_TIMEOUT_S, slurm_cluster  # noqa: F401 (a fixture)
from tests.workflow.test_train_slurm import SLURM
from workflow_scripts.core.fsio import read_json
from workflow_scripts.datapacks.plan import Plan

pytestmark = pytest.mark.workflow  # the test tiers: tests/conftest.py

CONFIG = """
sample: {scale: 0.3}
tokenize: {threads: 1}
datapacks:
  max_iters_per_pack: 4
  phases:
    - {name: warmup, iters: 4, mixture: main}
    - {name: main, iters: 8, mixture: main}
train:
  base_config: config/train/neox-sample.yml
  nodes: 1
  gpus_per_node: 1
  seconds_per_iter: 2
  checkpoint_hours: 0.0025
  time_limit_minutes: 0.6
  startup_minutes: 0.05
  save_minutes: 0.05
  spare_segments: 0
  segment_retries: 0
  eval_launch: null
"""
LOCAL = ("--profile", "profiles/local", "--cores", "2")
ARGS = ("--configfile", "config/sample.yaml", "train.yaml")
TRAINED = ("warmup_0", "main_1")


def files(root: Path, *patterns: str) -> dict[str, tuple[int, str]]:
    """Path (relative to ``root``) -> (mtime, sha256) of the files ``patterns`` match under ``root``."""
    return {
        str(p.relative_to(root)): (p.stat().st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
        for pattern in patterns
        for p in sorted(root.glob(pattern))
        if p.is_file()
    }


def trained_files(results: Path) -> dict[str, tuple[int, str]]:
    """What training the first two packs made or read: bins, specs, configs, records, checkpoints."""
    per_pack = [
        f"{kind}/{pack}/**/*"
        for pack in TRAINED
        for kind in ("merged", "datapacks", "train", "train/reference")
    ]
    return files(
        results,
        *per_pack,
        *(f"datapacks/_specs/{p}.json" for p in TRAINED),
        "train/checkpoints/global_step*/**/*",
    )


def jobs(dry_run: str) -> set[tuple[str, str]]:
    """(rule, pack) of every job a dry run lists (its ``rule NAME:`` block and ``wildcards: pack=``)."""
    found, rule = set(), None
    for line in dry_run.splitlines():
        if m := re.match(r"(?:local)?(?:rule|checkpoint) (\w+):", line.strip()):
            rule = m[1]
            found.add((rule, ""))
        elif rule and (m := re.search(r"\bpack=(\w+)", line)):
            found.discard((rule, ""))
            found.add((rule, m[1]))
    return found


@pytest.mark.slurm
def test_a_remix_after_two_packs_trained_through_slurm_keeps_them_and_resumes(slurm_cluster, tmp_path):  # noqa: F811
    wf = Workflow(tmp_path / "wf")
    (wf.root / "train.yaml").write_text(CONFIG)
    wf.ok(*LOCAL, *ARGS, timeout_s=1200)  # the data and the trainer configs, nothing trained
    results = wf.root / "results"
    train = results / "train"
    assert [p.name for p in Plan.read(results / "plan.json").packs] == [*TRAINED, "main_2"]
    # the first two packs, each one segment through Slurm, and their retention
    targets = ("results/train/main_1/done.json", "results/train/main_1/retention/0.json")
    wf.ok(*SLURM, *targets, *ARGS, timeout_s=SNAKEMAKE_TIMEOUT_S)
    assert read_json(train / "main_1" / "done.json")["last_step"] == 8
    assert not (train / "main_2" / "segments").exists()
    before = trained_files(results)
    assert {"train/checkpoints/global_step4/", "train/checkpoints/global_step8/"} <= {
        k[: k.index("/", len("train/checkpoints/")) + 1]
        for k in before
        if k.startswith("train/checkpoints/g")
    }
    main_2 = (results / "merged" / "main_2" / "main_2.bin").read_bytes()

    mix = mixture_change(wf)
    wf.ok(*LOCAL, "plan", *ARGS, mix)  # the re-plan: it keeps the started packs
    data = jobs(wf.ok(*LOCAL, "-n", *ARGS, mix))  # the data's dry run
    assert not {(r, p) for r, p in data if p in TRAINED}, sorted(data)
    assert {("pack", "main_2"), ("train_config", "main_2")} <= data, sorted(data)
    wf.ok(*LOCAL, *ARGS, mix)  # the data again: main_2 only
    planned = jobs(wf.ok(*SLURM, "-n", "train", *ARGS, mix))  # the training's dry run
    assert not {(r, p) for r, p in planned if p in TRAINED}, sorted(planned)
    assert ("train_segment", "main_2") in planned, sorted(planned)
    assert (results / "merged" / "main_2" / "main_2.bin").read_bytes() != main_2, "main_2 has the new mixture"
    assert trained_files(results) == before
    audit = subprocess.run(
        [sys.executable, "-m", "workflow_scripts", "audit-packs", "--plan", "results/plan.json"],
        cwd=wf.root,
        capture_output=True,
        text=True,
        env=snakemake_env(),
    )
    assert audit.returncode == 0 and orjson.loads(audit.stdout)["ok"], audit.stdout[-2000:] + audit.stderr

    wf.ok(*SLURM, "train", *ARGS, mix, timeout_s=SNAKEMAKE_TIMEOUT_S)  # the chain continues
    record = read_json(train / "main_2" / "segments" / "0.json")
    assert (record["first_step"], record["last_step"]) == (8, 12), record
    log = (wf.root / "logs" / "train" / "main_2" / "segment_0.log").read_text()
    assert "resumed from global_step8" in log, log[-3000:]
    after = trained_files(results)
    assert {k: v for k, v in after.items() if k in before} == before, "the trained packs' files unchanged"
    assert "Nothing to be done" in wf.ok(*SLURM, "-n", "train", *ARGS, mix)
