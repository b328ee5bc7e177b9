"""``snakepack train-detach``: the training chain as sbatch jobs that need no process on the login node.

Usage (``snakemake train`` with ``train.detach: true`` runs it)::

    snakepack train-detach --train-json '{...}' --train-dir results/train --logs-dir logs \\
        --state results/train/detach/chain.json [--requests-json '{...}'] KEYS...   # each pack's keys file

For months-long runs (seed 000's ``schedule.sh``): every segment of a pack is one sbatch job that
depends ``afterany`` on the one before (a failed segment does not stop the pack: the next one resumes
from ``latest``), each followed by a job (``afterok``) that evaluates its checkpoint and applies the
retention policy. After a pack's last segment (``afterany``) a job checks the pack (``train-finished``),
and the next pack's first segment waits ``afterok`` for that check: a pack that did not reach its last
step stops the chain. A last job gathers the curve. The commands are the ones the Snakemake rules run,
with the same files, so a later ``snakemake train`` without ``detach`` finds the finished segments done.

Each job asks for what it runs on (``requests``): a segment for the train settings' nodes and GPUs, an
evaluation for one node of them (as the train_eval rule), retention, a pack's check and the curve for one
CPU; and each for the account, partition and time that the Snakemake Slurm executor would give its rule
(``--requests-json``: the profile's default-resources and set-resources, which rules/train.smk reads).

The job ids are kept in ``--state``. A rerun asks Slurm (squeue, then sacct) about them: a unit whose
output exists is done, one whose job is still pending or running is kept (its id is what later jobs wait
for), and only the rest is submitted again, so a queued chain is never duplicated.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workflow_scripts.core.cli import UserError
from workflow_scripts.core.fsio import read_json, write_json
from workflow_scripts.core.train_layout import LOSS_CSV, TrainLayout
from workflow_scripts.train import job_request, slurm
from workflow_scripts.train.chain import Chain, Pack, Segment
from workflow_scripts.train.settings import TrainSettings

# The Slurm executor's resources that the detached jobs take too, and sbatch's flag for each.
EXECUTOR_FLAGS = {"slurm_account": "--account", "slurm_partition": "--partition", "runtime": "--time"}
# Each kind of job of the chain and the rule whose resources the executor would give it.
REQUEST_RULES = {"segment": "train_segment", "eval": "train_eval", "cpu": "train_prune"}


@dataclass
class Unit:
    """One sbatch job of the chain: its name, command, output (done when it exists), predecessors and the
    kind of request (``REQUEST_RULES``)."""

    name: str
    command: str
    output: str
    log: str
    after_any: list[str] = field(default_factory=list)
    after_ok: list[str] = field(default_factory=list)
    request: str = "cpu"


def cli(command: str, *args: str, **options: str | int | float | Sequence[str | int] | None) -> str:
    """``python -m workflow_scripts COMMAND ARGS --option value ...`` as one shell word list (None: left out;
    a list: the option's values)."""
    words = [sys.executable, "-m", "workflow_scripts", command]
    for name, value in options.items():
        if value is None:
            continue
        values = [str(v) for v in value] if isinstance(value, list | tuple) else [str(value)]
        words += [f"--{name.replace('_', '-')}", *values]
    return shlex.join([*words, *args])


def chain(
    keys_files: Sequence[str], train: TrainSettings, train_dir: str, logs_dir: str, sft: bool
) -> list[Unit]:
    """Every job of the run, in submission order (the chain of train/chain.py)."""
    layout = TrainLayout(train_dir, logs_dir)
    run = Chain.build([Pack.from_summary(k, read_json(k)["summary"]) for k in keys_files], train, sft, layout)
    units: list[Unit] = []
    for pack in run.packs:
        segments = [s for s in run.segments if s.pack == pack]
        for s in segments:
            units += segment_units(s, run, train)
        # the pack's check: after its last segment, whatever its exit (a pack with none: the pack before)
        before = run.before(pack.name)
        after_any = [unit_name(segments[-1], "segment")] if segments else []
        after_ok = [f"{before.name}/finished"] if before and not segments else []
        finished = cli("train-finished", *run.records(pack.name), keys=pack.keys, out=layout.done(pack.name))
        log = layout.step_log(pack.name, "done")
        units.append(
            Unit(f"{pack.name}/finished", finished, layout.done(pack.name), log, after_any, after_ok)
        )
    curve = cli("train-curve", out_dir=train_dir, segments=run.records(), evals=run.evaluations())
    posts = [u.name for u in units if "/after/" in u.name]
    units.append(Unit("curve", curve, layout.file(LOSS_CSV), layout.log("curve"), posts))
    return units


def segment_units(s: Segment, run: Chain, train: TrainSettings) -> list[Unit]:
    """A segment's job and the job after it (its evaluation and retention)."""
    pack, keys, layout = s.pack.name, s.pack.keys, run.layout
    train_segment = cli(
        "train-segment", keys=keys, segment=s.k, segments=s.pack.segments, record=s.record,
        launch=train.launch, margin_minutes=train.save_minutes, finetune_from=train.finetune_from,
    )  # fmt: skip
    # segment k after segment k - 1 (afterany: it resumes from latest), a pack's first after the pack before
    # it was checked done (afterok)
    before = run.before(pack)
    after_any = [f"{pack}/segment/{s.k - 1}"] if s.k else []
    after_ok = [f"{before.name}/finished"] if before and not s.k else []
    log = layout.step_log(pack, "segment", s.k)
    segment = Unit(unit_name(s, "segment"), train_segment, s.record, log, after_any, after_ok, "segment")
    steps = [
        cli("train-eval", keys=keys, record=s.record, out=s.evaluation, launch=train.eval_launch,
            every=train.eval_every)
        if s.evaluation else "",
        cli("train-prune", record=s.record, keep_last=train.keep_last, milestones=train.milestones,
            protect=run.protected, out=s.retention),
    ]  # fmt: skip
    after = " && ".join(step for step in steps if step)
    # after the previous segment's evaluation and retention too: none of them loads what this deletes
    waits = [unit_name(s.previous, "after")] if s.previous else []
    log = layout.step_log(pack, "after", s.k)
    kind = "eval" if s.evaluation else "cpu"
    return [segment, Unit(unit_name(s, "after"), after, s.retention, log, waits, [segment.name], kind)]


def unit_name(segment: Segment, kind: str) -> str:
    """``{pack}/segment/{k}`` (the training) or ``{pack}/after/{k}`` (its evaluation and retention)."""
    return f"{segment.pack.name}/{kind}/{segment.k}"


def executor_resources(rules: Mapping[str, Any], context: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """By kind of job, the ``EXECUTOR_FLAGS`` resources of its Snakemake rule (``rules``: kind -> rule, whose
    resources hold the profile's default-resources and set-resources over the rule's own), evaluated as the
    executor evaluates them for a job (``context``: wildcards, input, attempt, threads, async_run); the
    unset ones left out."""
    found = {}
    for kind, rule in rules.items():
        given = {
            k: rule.resources.get(k).evaluate(**context, rulename=rule.name).value for k in EXECUTOR_FLAGS
        }
        found[kind] = {k: v for k, v in given.items() if v is not None}
    return found


def requests(train: TrainSettings, resources: dict[str, dict[str, Any]]) -> dict[str, list[str]]:
    """Each kind of job's sbatch flags: the executor's account, partition and time from ``resources`` (by
    kind; the time limit of the train settings where it gives none), then what it runs on."""
    executor = {}
    for kind in REQUEST_RULES:
        given = {"runtime": math.ceil(train.time_limit_minutes), **resources.get(kind, {})}
        executor[kind] = [f"{flag}={given[key]}" for key, flag in EXECUTOR_FLAGS.items() if given.get(key)]
    return {
        "segment": [*executor["segment"], *job_request.sbatch_flags(train)],
        "eval": [*executor["eval"], *job_request.sbatch_flags(train, nodes=1)],
        "cpu": [*executor["cpu"], "--nodes=1", "--ntasks=1"],
    }


def sbatch_command(
    unit: Unit, ids: dict[str, str], requests: dict[str, list[str]], wait_for: Sequence[str]
) -> list[str]:
    """The sbatch line of one unit after its predecessors (and ``wait_for``: segments still queued or
    running), with its kind's request."""
    after_any = [ids[n] for n in unit.after_any if n in ids] + list(wait_for)
    deps = [f"afterany:{j}" for j in dict.fromkeys(after_any)]
    deps += [f"afterok:{ids[n]}" for n in unit.after_ok if n in ids]
    return [
        "sbatch", "--parsable", f"--job-name=snakepack-{unit.name.replace('/', '-')}",
        f"--output={unit.log}.slurm-%j.out", "--open-mode=append", f"--comment=snakepack_{unit.name}",
        *([f"--dependency={','.join(deps)}"] if deps else []), *requests[unit.request],
        f"--wrap={unit.command} >> {shlex.quote(unit.log)} 2>&1",
    ]  # fmt: skip


def sbatch(unit: Unit, ids: dict[str, str], requests: dict[str, list[str]], wait_for: Sequence[str]) -> str:
    """Submit one unit; its job id."""
    Path(unit.log).parent.mkdir(parents=True, exist_ok=True)
    out = subprocess.run(
        sbatch_command(unit, ids, requests, wait_for), capture_output=True, text=True, timeout=60
    )
    if out.returncode != 0:
        raise UserError(f"sbatch of {unit.name} failed: {out.stderr.strip()}")
    return out.stdout.strip().split(";")[0]


def scancel(job: str) -> None:
    subprocess.run(["scancel", job], capture_output=True, timeout=60, check=False)


def submit(units: list[Unit], state_path: str, requests: dict[str, list[str]]) -> dict[str, str]:
    """Submit what is neither done nor queued; record and return every live job id.

    A job still pending whose predecessor is submitted again (it would wait forever on a dependency that
    can no longer be met) is cancelled and submitted again after it. A segment submitted again also waits
    for every segment job still queued or running, so two segments never train at once.
    """
    state = read_json(state_path) if os.path.exists(state_path) else {"jobs": {}}
    known = slurm.states(state["jobs"].values())
    ids: dict[str, str] = {}
    renewed: set[str] = set()
    live_segments = [
        state["jobs"][u.name]
        for u in units
        if "/segment/" in u.name and known.get(state["jobs"].get(u.name, "")) in slurm.ACTIVE
    ]
    counts = {"done": 0, "kept": 0, "submitted": 0}
    for unit in units:
        old = state["jobs"].get(unit.name)
        stale = any(n in renewed for n in (*unit.after_any, *unit.after_ok))
        if unit.name != "curve" and os.path.exists(unit.output):
            counts["done"] += 1
            continue
        if old and known.get(old) in slurm.ACTIVE and not (stale and known.get(old) == "PENDING"):
            ids[unit.name] = old
            counts["kept"] += 1
            continue
        if unit.name == "curve" and os.path.exists(unit.output) and not counts["submitted"]:
            counts["done"] += 1
            continue
        if old and known.get(old) in slurm.ACTIVE:
            scancel(old)
        wait_for = live_segments if "/segment/" in unit.name else ()
        ids[unit.name] = sbatch(unit, ids, requests, wait_for)
        renewed.add(unit.name)
        state["jobs"][unit.name] = ids[unit.name]
        counts["submitted"] += 1
        write_json(state_path, state)  # after every submission: a crash here loses no job id
    write_json(state_path, state)
    print(
        f"train-detach: {len(units)} jobs in the chain: {counts['done']} done, {counts['kept']} still queued "
        f"or running, {counts['submitted']} submitted; ids in {state_path}"
    )
    for name, job in ids.items():
        print(f"  {name}: {job} ({'submitted now' if name in renewed else known.get(job)})")
    return ids


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--train-json", required=True, help="the config's train section (JSON)")
    parser.add_argument("--train-dir", required=True)
    parser.add_argument("--logs-dir", required=True)
    parser.add_argument("--state", required=True, help="the chain's job ids (JSON)")
    parser.add_argument("--sft", action="store_true", help="an SFT run (evaluation per train.evaluate_sft)")
    parser.add_argument(
        "--requests-json", default="{}", help="by kind of job (segment, eval, cpu): the Slurm executor's "
        "slurm_account, slurm_partition and runtime for its rule (JSON; rules/train.smk)"
    )  # fmt: skip
    parser.add_argument("keys", nargs="+", help="every pack's keys file, in training order")
    args = parser.parse_args(argv)
    train = TrainSettings.from_config(json.loads(args.train_json))
    units = chain(args.keys, train, args.train_dir.rstrip("/"), args.logs_dir.rstrip("/"), args.sft)
    submit(units, args.state, requests(train, json.loads(args.requests_json)))
    return 0
