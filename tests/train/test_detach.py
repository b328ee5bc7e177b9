"""The detached chain (workflow_scripts.train.detach): its jobs, what each asks Slurm for and waits for.

The sbatch lines are built and read here without a Slurm; tests/workflow/test_train_slurm.py submits a
chain to the local Slurm and lets it run.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from snakemake.cli import parse_set_resources
from snakemake.resources import Resources

from workflow_scripts.train import detach
from workflow_scripts.train.settings import TrainSettings

# The Slurm executor's resources of each kind of job, as rules/train.smk reads them from its rule (the
# profile's default-resources and set-resources): GPU segments and evaluations, CPU bookkeeping.
RESOURCES = {
    "segment": {"slurm_account": "project_1", "slurm_partition": "standard-g"},
    "eval": {"slurm_account": "project_1", "slurm_partition": "standard-g", "runtime": 60},
    "cpu": {"slurm_account": "project_1", "slurm_partition": "small", "runtime": 120},
}
LUMI = {
    "nodes": 2,
    "gpus_per_node": 8,
    "cpus_per_task": 7,
    "gpu_type": "mi250",
    "time_limit_minutes": 2880,
    "sbatch": ["--exclusive"],
    "eval_launch": "python eval.py {config} {tag}",
}


def keys_files(tmp_path: Path, rows: list[tuple[str, int, int, int]]) -> list[str]:
    """A keys file per pack (name, iteration_offset, train_iters, segments): the summary the chain reads."""
    paths = []
    for name, offset, iters, segments in rows:
        summary = {"pack": name, "iteration_offset": offset, "train_iters": iters, "exit_interval": 10}
        path = tmp_path / "train" / name / "keys.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"summary": {**summary, "segments": segments, "hours": 1.0}}))
        paths.append(str(path))
    return paths


def chain(tmp_path: Path, train: dict, rows: list[tuple[str, int, int, int]]) -> dict[str, detach.Unit]:
    settings = TrainSettings.from_config(train)
    units = detach.chain(keys_files(tmp_path, rows), settings, str(tmp_path / "train"), "logs", sft=False)
    return {u.name: u for u in units}


def flags(line: list[str]) -> dict[str, str]:
    """An sbatch line's ``--flag=value`` options (``--wrap``'s command left out)."""
    return dict(f[2:].split("=", 1) for f in line[1:] if "=" in f and not f.startswith("--wrap"))


def test_each_job_asks_for_what_it_runs_on(tmp_path: Path) -> None:
    """Segments take the train settings' nodes and GPUs, an evaluation one node of them, the rest one CPU;
    each takes the account, partition and time the Slurm executor would give its rule."""
    units = chain(tmp_path, LUMI, [("warmup_0", 0, 20, 2)])
    requests = detach.requests(TrainSettings.from_config(LUMI), RESOURCES)
    lines = {name: detach.sbatch_command(u, {}, requests, ()) for name, u in units.items()}
    asked = {name: flags(line) for name, line in lines.items()}
    assert asked["warmup_0/segment/0"] == {
        **asked["warmup_0/segment/0"],
        **{"account": "project_1", "partition": "standard-g", "time": "2880", "nodes": "2"},
        **{"ntasks-per-node": "8", "gpus-per-node": "mi250:8", "cpus-per-task": "7"},
    }
    assert "--exclusive" in lines["warmup_0/segment/0"]
    assert asked["warmup_0/after/0"] == {
        **asked["warmup_0/after/0"],
        **{"account": "project_1", "partition": "standard-g", "time": "60", "nodes": "1"},
        **{"ntasks-per-node": "8", "gpus-per-node": "mi250:8"},
    }
    for name in ("warmup_0/finished", "curve"):
        cpu = {"account": "project_1", "partition": "small", "time": "120", "nodes": "1", "ntasks": "1"}
        assert asked[name] == {**asked[name], **cpu} and "gpus-per-node" not in asked[name], name
        assert "ntasks-per-node" not in asked[name] and "--exclusive" not in lines[name]
    # without an evaluation, the job after a segment is retention alone: a CPU job
    plain = chain(tmp_path, {**LUMI, "eval_launch": None}, [("warmup_0", 0, 20, 2)])["warmup_0/after/1"]
    assert "train-eval" not in plain.command and plain.request == "cpu"
    # without a Slurm profile (no executor resources): the train settings alone, their time limit for all
    bare = detach.requests(TrainSettings.from_config(LUMI), {})
    curve = flags(detach.sbatch_command(units["curve"], {}, bare, ()))
    assert curve["time"] == "2880" and "account" not in curve and "partition" not in curve


def test_a_pack_starts_only_after_the_pack_before_is_checked_done(tmp_path: Path) -> None:
    """The first segment of a pack waits ``afterok`` for the check of the pack before (train-finished), which
    runs after that pack's last segment whatever its exit: a pack that did not finish stops the chain. A
    pack with nothing to train is checked after the pack before it, and the next pack waits for it."""
    rows = [("warmup_0", 0, 20, 2), ("tail_1", 20, 0, 0), ("main_2", 20, 30, 3)]
    units = chain(tmp_path, {}, rows)
    assert units["warmup_0/finished"].after_any == ["warmup_0/segment/1"]
    assert (
        units["warmup_0/finished"].after_ok == [] and "train-finished" in units["warmup_0/finished"].command
    )
    assert (
        units["tail_1/finished"].after_ok == ["warmup_0/finished"]
        and units["tail_1/finished"].after_any == []
    )
    first = units["main_2/segment/0"]
    assert first.after_ok == ["tail_1/finished"] and first.after_any == []
    assert units["main_2/segment/1"].after_any == ["main_2/segment/0"]
    assert not any("train-finished" in u.command for n, u in units.items() if "/after/" in n)
    assert not [n for n in units if n.startswith("tail_1/") and n != "tail_1/finished"]
    ids = {name: str(100 + i) for i, name in enumerate(units)}
    line = detach.sbatch_command(first, ids, detach.requests(TrainSettings(), {}), ())
    assert f"--dependency=afterok:{ids['tail_1/finished']}" in line
    # a segment resubmitted beside segments still queued waits for them too (never two at once)
    line = detach.sbatch_command(units["main_2/segment/1"], ids, detach.requests(TrainSettings(), {}), ["7"])
    assert f"--dependency=afterany:{ids['main_2/segment/0']},afterany:7" in line


def test_an_empty_finetune_from_gives_no_option(tmp_path: Path) -> None:
    units = chain(tmp_path, {"finetune_from": ""}, [("warmup_0", 0, 20, 2)])
    assert "--finetune-from" not in units["warmup_0/segment/0"].command
    started = chain(tmp_path, {"finetune_from": "/c/global_step5"}, [("warmup_0", 5, 20, 2)])
    assert "--finetune-from /c/global_step5" in started["warmup_0/segment/0"].command


def test_the_executor_s_resources_are_read_as_it_reads_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """A rule's resources as Snakemake builds them (workflow.py: the profile's default-resources, the rule's
    own, then set-resources), evaluated as for a job: a profile's ``$VARIABLE`` is expanded, a quoted
    string is a string, what is not given is left out."""
    monkeypatch.setenv("SNAKEPACK_TEST_ACCOUNT", "project_7")
    defaults = ["slurm_account=$SNAKEPACK_TEST_ACCOUNT", "slurm_partition=small", "runtime=120"]
    overrides = ["train_segment:slurm_partition='standard-g'", "train_eval:runtime=60"]

    def rule(name: str, own: dict) -> SimpleNamespace:  # the rule's name and resources (Snakemake's Rule)
        resources = Resources.parser_factory(defaults="full", allow_expressions=True)(defaults)
        resources.update(Resources.from_mapping(own))
        resources.update(parse_set_resources(overrides).get(name, {}))
        return SimpleNamespace(name=name, resources=resources)

    rules = {"segment": rule("train_segment", {"runtime": 2880}), "eval": rule("train_eval", {"nodes": 1})}
    context = {"wildcards": {}, "input": [], "attempt": 1, "threads": 1, "async_run": asyncio.run}
    assert detach.executor_resources(rules, context) == {
        "segment": {"slurm_account": "project_7", "slurm_partition": "standard-g", "runtime": 2880},
        "eval": {"slurm_account": "project_7", "slurm_partition": "small", "runtime": 60},
    }
    bare = SimpleNamespace(name="train_prune", resources=Resources.default("bare"))  # no profile
    assert detach.executor_resources({"cpu": bare}, context) == {"cpu": {}}
