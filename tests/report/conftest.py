"""Fixtures of the report tests: the finished sample with training records, and its HTML report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.utils import Workflow
from workflow_scripts.core.fsio import write_json
from workflow_scripts.train.reference.config import load_config

RUN = ("--profile", "profiles/local", "--cores", "2")


def write_training_records(train_dir: Path, plan: dict[str, Any]) -> None:
    """What the trainers leave after training the first two packs: Slurm segment records (the second pack
    in two segments, its second one retried after a killed run), every run's attempt record, their curve
    (the second pack's losses, one evaluation and one skipped), and the reference trainer's loss curve and
    evaluations (the first pack)."""
    first, second = plan["packs"][:2]
    segments = [
        (first, 0, first["train_iters"], "1001", 0),
        (second, 0, second["train_iters"] // 2, "1002", 0),
        (second, second["train_iters"] // 2, second["train_iters"], "1004", 1),
    ]
    for i, (pack, a, b, job, retries) in enumerate(segments):
        start, end = pack["iteration_offset"] + a, pack["iteration_offset"] + b
        record = {
            "pack": pack["name"],
            "segment": i,
            "first_step": start,
            "last_step": end,
            "iterations": end - start,
            "slurm_job_id": job,
            "slurm_nodelist": "nid[001-002]",
            "wall_seconds": 600.0 + 60 * i,
            "s_per_iter": 1.5 + 0.25 * i,
            "train_loss": 7.0 - i,
            "valid_loss": 7.2 - i,
            "exit": "done",
            "attempt": 1 + retries,
        }
        write_json(train_dir / pack["name"] / "segments" / f"{i}.json", record)
        write_json(train_dir / pack["name"] / "segments" / "attempts" / f"{i}.{job}.json", record)
    killed = record | {"last_step": start + 1, "iterations": 1, "slurm_job_id": "1003", "wall_seconds": 300.0}
    killed |= {"exit": "the trainer exited with 143", "attempt": 1}
    write_json(train_dir / second["name"] / "segments" / "attempts" / "2.1003.json", killed)
    offset, end = second["iteration_offset"], second["iteration_offset"] + second["train_iters"]
    curve = [f"{it},{second['name']},1,6.5\n" for it in range(offset + 1, end + 1)]
    (train_dir / "loss.csv").write_text("iteration,pack,segment,loss\n" + "".join(curve))
    (train_dir / "evals.csv").write_text(
        "pack,segment,checkpoint,iteration,valid_loss,valid_ppl,samples,skipped\n"
        f"{second['name']},1,global_step{end},{end},6.9,992.3,8,\n"
        f"{second['name']},2,global_step{end},{end},,,,no new checkpoint\n"
    )
    reference = train_dir / "reference" / first["name"]
    reference.mkdir(parents=True)
    lines = ["iteration,loss,lr,tokens_per_s"]
    lines += [f"{it},{9.0 - 0.1 * it!r},0.001,5000.0" for it in range(1, first["train_iters"] + 1)]
    (reference / "loss.csv").write_text("\n".join(lines) + "\n")
    evals = [{"iteration": first["train_iters"], "valid_loss": 8.5, "valid_ppl": 4914.8, "samples": 8}]
    (reference / "eval.jsonl").write_text("".join(json.dumps(e) + "\n" for e in evals))


@pytest.fixture(scope="session")
def trained(sample_run: Workflow, tmp_path_factory: pytest.TempPathFactory) -> Workflow:
    """A copy of the finished sample after training records appeared, rerun (it draws the training charts).

    The copy is brought up to date first: another test may have rerun the sample with a config of its own.
    """
    wf = sample_run.clone(tmp_path_factory.mktemp("trained") / "wf")
    wf.ok(*RUN)
    plan = orjson.loads((wf.root / "results" / "plan.json").read_bytes())
    write_training_records(wf.root / "results" / "train", plan)
    for pack in plan["packs"][:2]:  # the checkpoints the records name, for the consumption chart
        cfg = load_config([str(wf.root / "results" / "train" / pack["name"] / f"{pack['name']}.yml")])
        end = pack["iteration_offset"] + pack["train_iters"]
        (wf.root / cfg.save / f"global_step{end}").mkdir(parents=True)
    planned = wf.ok(*RUN, "-n")
    assert "report_training" in planned and "report_plan" not in planned, planned
    wf.ok(*RUN)
    return wf


@pytest.fixture(scope="session")
def report_html(trained: Workflow) -> Path:
    """`snakemake --report report.html` of the finished sample with training."""
    trained.ok("--report", "report.html")
    return trained.root / "report.html"
