"""The workflow through a real Slurm, and the Slurm profiles.

Tests marked ``slurm`` need the single-node test cluster (``sudo tests/slurm/local-cluster.sh start``)
and skip with a reason when ``sinfo`` is missing or the node ``localhost`` is not up. They run the whole
workflow, in a temporary copy of the repository, with ``--profile profiles/slurm-local``, check that
its jobs went through Slurm, and compare its packs with a local run's. The other tests only parse the
profiles (no Slurm needed).

Every Snakemake run here is wrapped in ``timeout -s KILL``: with the wrong status command the Slurm plugin
waits forever and ignores SIGTERM (see profiles/slurm-local/profile.yaml).
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import math
import os
import re
import shutil
import subprocess
import threading
import time
from pathlib import Path

import orjson
import psutil
import pytest

from tests.utils import Workflow, snakemake_env, tail

pytestmark = pytest.mark.workflow  # the test tiers: tests/conftest.py

REPO = Path(__file__).resolve().parents[2]

SNAKEMAKE_TIMEOUT_S = 1800
TARGET = "sample"  # a target rule without wildcards, for the dry runs of the profiles
JOBCOMP_LOG = Path("/var/log/slurm/jobcomp.log")
# node states (sinfo %t) in which the cluster takes jobs; anything else (down, drain, no answer ...) skips
UP_STATES = {"idle", "mix", "alloc", "comp"}


def _node_state() -> str | None:
    """The state of the test cluster's node, or None when there is no Slurm to ask."""
    if shutil.which("sinfo") is None:
        return None
    try:
        out = subprocess.run(
            ["sinfo", "-h", "-N", "-n", "localhost", "-o", "%t"],
            capture_output=True,
            text=True,
            timeout=15,
        )
    except subprocess.TimeoutExpired:
        return "no answer from slurmctld (sinfo timed out)"
    if out.returncode != 0:
        return f"no answer from slurmctld: {out.stderr.strip()}"
    return out.stdout.strip().splitlines()[0] if out.stdout.strip() else "node localhost unknown"


@pytest.fixture(scope="module")
def slurm_cluster():
    state = _node_state()
    if state is None:
        pytest.skip(
            "no Slurm here: `sinfo` is not on PATH (start it: sudo tests/slurm/local-cluster.sh start)"
        )
    if state not in UP_STATES:
        pytest.skip(f"local Slurm node not usable (state: {state}); run: tests/slurm/local-cluster.sh start")
    return state


def _slurm_records(workdir: Path) -> dict[str, dict[str, str]]:
    """Job id -> {state, comment} for the jobs Slurm still knows (squeue: MinJobAge) or logged (jobcomp)."""
    records: dict[str, dict[str, str]] = {}
    out = subprocess.run(
        ["squeue", "--states=all", "--noheader", "--format=%i|%T|%k|%Z"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    for line in out.stdout.splitlines():
        parts = line.strip().split("|")
        if len(parts) == 4 and Path(parts[3]) == workdir:
            records[parts[0]] = {"state": parts[1], "comment": parts[2], "source": "squeue"}
    if JOBCOMP_LOG.is_file() and os.access(JOBCOMP_LOG, os.R_OK):
        # one line per finished job; job ids restart at 1 when slurmctld starts with -c, so match WorkDir too
        for line in JOBCOMP_LOG.read_text(errors="replace").splitlines():
            fields = dict(re.findall(r"(\w+)=(\S*)", line))
            if fields.get("WorkDir") == str(workdir) and fields.get("JobId") not in records:
                records[fields["JobId"]] = {
                    "state": fields.get("JobState", ""),
                    "comment": "",
                    "source": "jobcomp",
                }
    return records


def _digests(results: Path) -> dict[str, str]:
    """sha256 of every merged pack file, the clusters and the plan's table (paths inside plan.json are
    absolute, so they differ between two trees)."""
    files = [*sorted(results.glob("merged/*/*.bin")), *sorted(results.glob("merged/*/*.idx"))]
    files += [results / "dedup" / "clusters.tsv", results / "plan.csv"]
    return {str(f.relative_to(results)): hashlib.sha256(f.read_bytes()).hexdigest() for f in files}


@pytest.mark.slurm
def test_whole_pipeline_through_slurm_matches_a_local_run(slurm_cluster, workflow, tmp_path):
    """Every stage (the sample, ingest checkpoints, dedup's scatter and gather, tokenize, count, the plan,
    slicing and merging) as real Slurm jobs; the packs are byte for byte those of a local run."""
    small = ("--configfile", "config/sample.yaml", "small.yaml")
    config = "sample: {scale: 0.3}\ntokenize: {threads: 1}\ningest: {shard_size: 40000}\nshards_per_job: 4\n"
    local = Workflow(tmp_path / "local")
    for wf in (workflow, local):
        (wf.root / "small.yaml").write_text(config)
    local.ok("--profile", "profiles/local", "--cores", "2", *small)
    wf = workflow.root
    proc = workflow.run("--profile", "profiles/slurm-local", *small, timeout_s=SNAKEMAKE_TIMEOUT_S)
    assert proc.returncode not in (124, 137, -9), (
        f"snakemake killed after {SNAKEMAKE_TIMEOUT_S} s (the Slurm status hang?)\n{tail(proc.output)}"
    )
    assert proc.returncode == 0, f"snakemake failed (rc {proc.returncode}):\n{tail(proc.output)}"
    digests = _digests(wf / "results")
    assert any(k.endswith(".bin") for k in digests)
    assert digests == _digests(local.root / "results")

    # Slurm ran the jobs: the plugin's per-job logs are named by Slurm job id ...
    log_root = wf / ".snakemake" / "slurm_logs"
    logs = sorted(log_root.rglob("*.log"))
    job_ids = {p.stem for p in logs}
    assert all(re.fullmatch(r"\d+(_\d+)?", j) for j in job_ids), job_ids
    rule_dirs = {p.relative_to(log_root).parts[0] for p in logs}
    expected = ["sample", "ingest", "dedup_bands", "dedup_cluster", "train_tokenizer", "count", "pack"]
    assert {f"rule_{r}" for r in expected} <= rule_dirs, sorted(rule_dirs)
    submitted = set(re.findall(r"submitted with SLURM jobid (\d+)", proc.output))
    assert submitted == {j.split("_")[0] for j in job_ids}, (submitted, job_ids)
    # ... the per-shard stages in one Slurm job per batch of up to 4 shards of a group (shards_per_job),
    # each batch's manifest naming its shards
    shards = {p.name.split(".")[0] for p in (wf / "results" / "shards").glob("*/*_split_*.jsonl")}
    assert len(_batches(shards)) < len(shards)  # some Slurm jobs hold several shards
    for rule, folder in BATCH_DIRS.items():
        jobs = [p for p in logs if p.relative_to(log_root).parts[0] == f"rule_{rule}"]
        manifests = sorted((wf / "results" / folder / "_batches").glob("*.json"))
        held = [orjson.loads(m.read_bytes())["members"] for m in manifests]
        assert len(jobs) == len(manifests) == len(_batches(shards)), (rule, jobs, manifests)
        assert sorted(s for members in held for s in members) == sorted(shards), (rule, held)
    # one Slurm job per DAG job that is not a local rule (a batch job is one of them)
    assert len(submitted) == len(re.findall(r"^(?:rule|checkpoint) \w+:$", proc.output, re.M)), tail(
        proc.output
    )
    # ... each log is the job-side Snakemake run of the executor plugin
    for log in logs:
        text = log.read_text(errors="replace")
        assert "slurm-jobstep" in text, f"{log} is not a Slurm job-step log"

    # ... and Slurm itself reports them COMPLETED, run in this working directory
    records = _slurm_records(wf)
    for job_id in sorted(submitted, key=int):
        assert job_id in records, f"Slurm has no record of job {job_id} (workdir {wf}): {records}"
        assert records[job_id]["state"] == "COMPLETED", (job_id, records[job_id])
        if records[job_id]["source"] == "squeue":  # the plugin puts rule and wildcards into --comment
            assert records[job_id]["comment"].startswith("rule_"), (job_id, records[job_id])
    assert "Nothing to be done" in workflow.ok("--profile", "profiles/slurm-local", "-n", *small)


BATCH_DIRS = {"dedup_signatures": "dedup/_work/sig", "dedup_filter": "dedup", "tokenize": "tokenized"}


def _batches(shards: set[str] | list[str], per_job: int = 4) -> dict[tuple[str, int], set[str]]:
    """The shards of each batch job: ``per_job`` shards of a group (4 in these tests)."""
    found: dict[tuple[str, int], set[str]] = {}
    for shard in shards:
        group, split = shard.rsplit("_split_", 1)
        found.setdefault((group, int(split) // per_job), set()).add(shard)
    return found


def _kill_after_a_member(root: Path, state: str, stop: threading.Event) -> list[str]:
    """Wait until the batch job that keeps ``state`` (relative to ``root``) has recorded a finished member;
    SIGKILL the job's process. Returns the members it had recorded."""
    while not stop.is_set():
        path = root / state
        recorded = orjson.loads(path.read_bytes())["members"] if path.exists() else {}
        if recorded:
            for proc in psutil.process_iter(["cmdline"]):
                argv = proc.info["cmdline"] or []  # the batch's Python, not the shell that started it
                python = argv[:1] and "python" in argv[0] and argv[1:4] == ["-m", "workflow_scripts", "batch"]
                if python and f"--state {state}" in " ".join(argv):
                    proc.kill()
                    return sorted(recorded)
        time.sleep(0.005)
    return []


@pytest.mark.slurm
def test_a_batch_job_killed_after_a_member_costs_only_the_rest(slurm_cluster, workflow):
    """tokenize redone through Slurm, batch jobs of 4 shards, one SIGKILLed after its first member: the job
    fails, the member that finished keeps its outputs (untouched by the rerun), and a plain rerun redoes
    only the killed batch's other members, giving the same bytes as the first, local run."""
    small = ("--configfile", "config/sample.yaml", "small.yaml")
    (workflow.root / "small.yaml").write_text(
        "sample: {scale: 0.3}\ntokenize: {threads: 1}\ningest: {shard_size: 40000}\nshards_per_job: 4\n"
    )
    target = "results/tokenized/stats.json"
    workflow.ok(target, "--profile", "profiles/local", "--cores", "2", *small)
    tok = workflow.root / "results" / "tokenized"
    outputs = sorted([*tok.glob("*_split_*.bin"), *tok.glob("*_split_*.idx")])
    before = {p.name: p.read_bytes() for p in outputs}
    shards = sorted({p.name.split("_text_document")[0] for p in outputs})
    (group, number), batch = max(_batches(shards).items(), key=lambda item: len(item[1]))
    assert len(batch) >= 3, _batches(shards)
    for state in (tok / "_batches").glob("*.state"):  # every member redone when the jobs are forced
        state.unlink()
    state = f"results/tokenized/_batches/{group}.{number}.state"

    stop = threading.Event()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        watcher = pool.submit(_kill_after_a_member, workflow.root, state, stop)
        failed = workflow.run(target, "--profile", "profiles/slurm-local", "--forcerun", "tokenize", *small)
        stop.set()
        finished = watcher.result()
    assert finished and len(finished) < len(batch), (finished, tail(failed.output))
    assert failed.returncode != 0, tail(failed.output)
    assert re.search(r"Error in rule tokenize:", failed.output), tail(failed.output)
    kept = {p.name: p.stat().st_mtime_ns for p in outputs if p.name.split("_text_document")[0] in finished}

    plan = workflow.ok(target, "--profile", "profiles/slurm-local", "-n", *small)
    planned = set(re.findall(r"rule tokenize:\n(?:.*\n)*?\s+wildcards: group=(\S+), batch=(\d+)", plan))
    assert (group, str(number)) in planned, plan

    workflow.ok(target, "--profile", "profiles/slurm-local", *small, timeout_s=SNAKEMAKE_TIMEOUT_S)
    assert {p.name: p.read_bytes() for p in outputs} == before
    assert {p.name: p.stat().st_mtime_ns for p in outputs if p.name in kept} == kept
    log = (workflow.root / "logs" / "tokenize" / f"{group}.{number}.log").read_text()
    assert all(f"{m}: up to date" in log for m in finished), log
    assert f"{len(batch) - len(finished)} of {len(batch)} members run" in log, log


# --- the profiles (no Slurm needed) -------------------------------------------------------------------


def _parse_profile(profile: str, monkeypatch, **env):
    from snakemake.cli import parse_args

    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.chdir(REPO)
    _, args = parse_args(["--profile", profile, "--dry-run"])
    return args


def test_slurm_local_profile_avoids_the_status_hang(monkeypatch):
    """Without slurmdbd, `sacct` fails and the plugin hangs: the profile must make it use squeue, and squeue
    mode only holds while the cluster's MinJobAge >= 3 x slurm-init-seconds-before-status-checks."""
    args = _parse_profile("profiles/slurm-local", monkeypatch)
    assert args.executor == "slurm"
    assert args.slurm_status_command == "squeue"
    assert args.slurm_keep_successful_logs is True  # the Slurm test reads the job ids from these logs
    conf = (REPO / "tests" / "slurm" / "local-cluster.sh").read_text()
    min_job_age = int(re.search(r"^MinJobAge=(\d+)$", conf, re.M).group(1))
    assert min_job_age >= 3 * int(args.slurm_init_seconds_before_status_checks)
    assert "debug" in conf and "slurm_partition" in args.default_resources


def test_lumi_profile_needs_the_account_and_defaults_partitions(workflow):
    env = snakemake_env()
    for key in ("SNAKEPACK_SLURM_ACCOUNT", "SNAKEPACK_CPU_PARTITION", "SNAKEPACK_GPU_PARTITION"):
        env.pop(key, None)

    missing = workflow.run("--dry-run", "--profile", "profiles/lumi", TARGET, timeout_s=120, env=env)
    assert missing.returncode != 0
    assert "SNAKEPACK_SLURM_ACCOUNT is not set" in "\n".join(missing.output.splitlines()[:2]), tail(
        missing.output
    )

    env["SNAKEPACK_SLURM_ACCOUNT"] = "project_465000000"
    ok = workflow.run("--dry-run", "--profile", "profiles/lumi", TARGET, timeout_s=120, env=env)
    assert ok.returncode == 0, tail(ok.output)
    assert "slurm_account=project_465000000" in ok.output
    assert "slurm_partition=small" in ok.output

    env["SNAKEPACK_CPU_PARTITION"] = "debug"
    ok = workflow.run("--dry-run", "--profile", "profiles/lumi", TARGET, timeout_s=120, env=env)
    assert ok.returncode == 0, tail(ok.output)
    assert "slurm_partition=debug" in ok.output


def _slurm_table(output: str) -> dict[str, list[str]]:
    """The dry run's closing table of Slurm jobs: rule -> its cells, down to the totals."""
    lines = output[output.index("Slurm jobs this run would submit") :].splitlines()[2:]
    rows = [line.split() for line in lines]
    rows = rows[: next(i for i, row in enumerate(rows) if row[:1] == ["total"]) + 1]
    return {row[0]: row[1:] for row in rows}


def test_a_lumi_dry_run_shows_the_batch_jobs_and_their_sizes(workflow):
    """The shard stages go to Slurm in batches of `shards_per_job` shards of a group, and the dry run says
    how: Slurm jobs per rule and each one's request (the profile's threads; the time limit from the
    batch's size shared by its threads, 1 + ceil(MB / 300 / 16) minutes for signing)."""
    small = ("--configfile", "config/sample.yaml", "small.yaml")
    (workflow.root / "small.yaml").write_text("sample: {scale: 0.3}\ningest: {shard_size: 40000}\n")
    workflow.ok("--cores", "2", "--until", "ingest_stats", *small)
    shards = sorted((workflow.root / "results" / "shards").glob("*/*_split_*.jsonl"))
    env = {**snakemake_env(), "SNAKEPACK_SLURM_ACCOUNT": "project_1"}
    size = {p.name.removesuffix(".jsonl"): p.stat().st_size for p in shards}

    for per_job in (400, 2):  # the schema's default, then the config key
        batches = _batches(list(size), per_job)
        runtime = max(1 + math.ceil(sum(size[s] for s in b) / 2**20 / 300 / 16) for b in batches.values())
        plan = workflow.run(
            "--dry-run",
            "--profile",
            "profiles/lumi",
            *small,
            "--config",
            f"shards_per_job={per_job}",
            timeout_s=300,
            env=env,
        )
        assert plan.returncode == 0, tail(plan.output)
        table = _slurm_table(plan.output)
        assert table["dedup_signatures"] == [str(len(batches)), "16", "32000", str(runtime)], table
        assert table["dedup_cluster"][:3] == ["1", "16", "120000"]
        assert table["total"][0] == str(sum(int(row[0]) for rule, row in table.items() if rule != "total"))
        jobs = re.search(r"(\d+) Slurm jobs and (\d+) local jobs: the plan's (\d+) jobs", plan.output)
        snakemakes = re.search(r"^total\s+(\d+)\s*$", plan.output, re.M)  # its job stats come first
        assert jobs and snakemakes and (jobs[1], jobs[3]) == (table["total"][0], snakemakes[1]), tail(
            plan.output
        )
    assert max(map(len, batches.values())) == 2 < len(shards)


def test_a_site_container_applies_to_every_rule(workflow):
    """`container` in the config puts every rule in that image under `--sdm apptainer` (LUMI's way)."""
    plain = workflow.run(TARGET, "--dry-run", "--sdm", "apptainer", timeout_s=120)
    assert plain.returncode == 0, tail(plain.output)  # no container asked: apptainer is never needed
    image = "docker://debian:12"
    boxed = workflow.run(
        TARGET, "--dry-run", "--sdm", "apptainer", "--config", f"container={image}", timeout_s=120
    )
    if shutil.which("apptainer") or shutil.which("singularity"):
        assert boxed.returncode == 0 and image in boxed.output, tail(boxed.output)
    else:
        assert "apptainer or singularity command has to be available" in boxed.output, tail(boxed.output)
