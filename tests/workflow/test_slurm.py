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

import psutil
import pytest

from tests.utils import Workflow, snakemake_env, tail

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
    config = "sample: {scale: 0.3}\ntokenize: {threads: 1}\ningest: {shard_size: 40000}\n"
    local = Workflow(tmp_path / "local")
    for wf in (workflow, local):
        (wf.root / "small.yaml").write_text(config)
    local_output = local.ok("--profile", "profiles/local", "--cores", "2", *small)
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
    expected = ["sample", "ingest", "dedup_bands", "dedup_cluster", "train_tokenizer", "count", "slice_pack"]
    assert {f"rule_{r}" for r in [*expected, "merge_pack"]} <= rule_dirs, sorted(rule_dirs)
    submitted = set(re.findall(r"submitted with SLURM jobid (\d+)", proc.output))
    assert submitted == {j.split("_")[0] for j in job_ids}, (submitted, job_ids)
    # ... the per-shard rules in grouped jobs of up to 4 shards of a group (shards_per_slurm_job in
    # profiles/slurm-local), each log naming its shards
    shards = {p.name.split(".")[0] for p in (wf / "results" / "shards").glob("*/*_split_*.jsonl")}
    batches = {(s.split("_split_")[0], int(s.split("_split_")[1]) // 4) for s in shards}
    assert len(batches) < len(shards)  # some Slurm jobs hold several shards
    member = re.compile(r"^\s*rule (\w+):\n(?:.*\n)*?\s+wildcards: group=(\S+), split=(\d+)$", re.M)
    for rule in ("dedup_signatures", "dedup_filter", "tokenize"):
        grouped = [p for p in logs if p.relative_to(log_root).parts[0].startswith(f"group_{rule}")]
        held = [
            {f"{g}_split_{n}" for r, g, n in member.findall(log.read_text()) if r == rule} for log in grouped
        ]
        assert len(grouped) == len(batches) and set().union(*held) == shards, (rule, held)
    assert len(submitted) < len(re.findall(r"^(?:local)?rule \w+:$", local_output, re.M))
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


TOKENIZE_CMD = re.compile(r"workflow_scripts tokenize --input \S*/(\w+_split_\d+)\.jsonl")


def _kill_second_member(batch: set[str], stop: threading.Event) -> list[str]:
    """Watch the processes until tokenize runs for a second shard of ``batch``; SIGKILL it. Returns the
    shards seen running, in order (the last one killed)."""
    seen: list[str] = []
    while not stop.is_set() and len(seen) < 2:
        for proc in psutil.process_iter(["cmdline"]):
            cmdline = proc.info["cmdline"] or []
            match = TOKENIZE_CMD.search(" ".join(cmdline))
            if match and match[1] in batch and match[1] not in seen and "python" in cmdline[0]:
                seen.append(match[1])
                if len(seen) == 2:
                    proc.kill()
                    break
        time.sleep(0.05)
    return seen


@pytest.mark.slurm
def test_a_member_killed_in_a_grouped_job_costs_only_the_missing_shards(slurm_cluster, workflow):
    """tokenize rerun through Slurm in grouped jobs, one member SIGKILLed while its job runs: the job fails,
    the members that finished keep their outputs (untouched by the rerun), and a plain rerun redoes only
    the shards whose outputs are missing, giving the same bytes as the first, local run."""
    small = ("--configfile", "config/sample.yaml", "small.yaml")
    (workflow.root / "small.yaml").write_text(
        "sample: {scale: 0.3}\ntokenize: {threads: 1}\ningest: {shard_size: 40000}\n"
    )
    target = "results/tokenized/stats.json"
    workflow.ok(target, "--profile", "profiles/local", "--cores", "2", *small)
    tok = workflow.root / "results" / "tokenized"
    outputs = sorted([*tok.glob("*_split_*.bin"), *tok.glob("*_split_*.idx")])
    before = {p.name: p.read_bytes() for p in outputs}
    shards = sorted({p.name.split("_text_document")[0] for p in outputs})
    batches: dict[tuple[str, int], set[str]] = {}  # profiles/slurm-local: 4 shards of a group per Slurm job
    for s in shards:
        group, split = s.rsplit("_split_", 1)
        batches.setdefault((group, int(split) // 4), set()).add(s)
    batch = max(batches.values(), key=len)
    assert len(batch) >= 3, batches

    stop = threading.Event()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        watcher = pool.submit(_kill_second_member, batch, stop)
        failed = workflow.run(target, "--profile", "profiles/slurm-local", "--forcerun", "tokenize", *small)
        stop.set()
        seen = watcher.result()
    assert len(seen) == 2, f"tokenize never ran for two shards of {sorted(batch)}:\n{tail(failed.output)}"
    finished, killed = seen
    assert failed.returncode != 0, tail(failed.output)
    assert re.search(r"Error in group tokenize\.", failed.output), tail(failed.output)

    done = {p.name: p.stat().st_mtime_ns for p in outputs if p.exists()}
    assert f"{finished}_text_document.bin" in done  # the member before the killed one kept its outputs
    assert f"{killed}_text_document.bin" not in done
    missing = {s for s in shards if f"{s}_text_document.bin" not in done}
    plan = workflow.ok(target, "--profile", "profiles/slurm-local", "-n", *small)
    jobs = re.findall(r"rule tokenize:\n(?:.*\n)*?\s+wildcards: group=(\S+), split=(\d+)", plan)
    planned = {f"{g}_split_{n}" for g, n in jobs}
    assert planned == missing, (sorted(planned), sorted(missing))

    workflow.ok(target, "--profile", "profiles/slurm-local", *small, timeout_s=SNAKEMAKE_TIMEOUT_S)
    assert {p.name: p.read_bytes() for p in outputs} == before
    assert {n: t for n, t in ((p.name, p.stat().st_mtime_ns) for p in outputs) if n in done} == done


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


def test_a_lumi_dry_run_shows_the_grouped_slurm_jobs_and_their_sizes(workflow):
    """The shard jobs go to Slurm grouped by `shards_per_slurm_job` shards of a group, and the dry run says
    how: Slurm jobs per rule, shards per job, and a grouped job's request sized for its members running one
    after another (the largest member's CPUs and memory, the sum of their runtimes, 1 + ceil(MB / 300)
    minutes each for signing)."""
    small = ("--configfile", "config/sample.yaml", "small.yaml")
    (workflow.root / "small.yaml").write_text("sample: {scale: 0.3}\ningest: {shard_size: 40000}\n")
    workflow.ok("--cores", "2", "--until", "ingest_stats", *small)
    shards = sorted((workflow.root / "results" / "shards").glob("*/*_split_*.jsonl"))
    env = {**snakemake_env(), "SNAKEPACK_SLURM_ACCOUNT": "project_1"}

    for per_job in (400, 2):  # the schema's default, then the config key
        batches: dict[tuple[str, int], list[int]] = {}
        for p in shards:
            group, split = p.name.removesuffix(".jsonl").split("_split_")
            runtime = 1 + math.ceil(p.stat().st_size / 2**20 / 300)
            batches.setdefault((group, int(split) // per_job), []).append(runtime)
        sizes = [len(b) for b in batches.values()]
        plan = workflow.run(
            "--dry-run",
            "--profile",
            "profiles/lumi",
            *small,
            "--config",
            f"shards_per_slurm_job={per_job}",
            timeout_s=300,
            env=env,
        )
        assert plan.returncode == 0, tail(plan.output)
        table = _slurm_table(plan.output)
        expected = [str(len(batches)), str(len(shards)), f"{min(sizes)}-{max(sizes)}", "1", "4000"]
        assert table["dedup_signatures"] == [*expected, str(max(map(sum, batches.values())))], table
        assert table["dedup_cluster"][:5] == ["1", "1", "1-1", "16", "120000"]  # not grouped: its own request
        assert table["total"][1] == str(sum(int(row[1]) for rule, row in table.items() if rule != "total"))
    assert max(sizes) == 2 < len(shards)


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
