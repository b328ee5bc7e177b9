"""What a Snakemake run's jobs cost: each rule's jobs and seconds, from the run's log, and each command's
processes, seconds and peak memory, sampled from /proc while it runs. Names no rule: it works whatever the
workflow's rules are called.

``sampled_run(cmd, cwd)`` runs a command (Snakemake), ``rule_times(log)`` reads the log it wrote
(``.snakemake/log/*.snakemake.log``, whose timestamps have one second's resolution).
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

STAMP = re.compile(r"^\[(\w{3} \w{3} +\d+ [\d:]+ \d{4})\]$")
STARTED = re.compile(r"^(?:local)?(?:rule|checkpoint) (\w+):$")
JOBID = re.compile(r"^\s+jobid: (\d+)$")
FINISHED = re.compile(r"^Finished jobid: (\d+) \(Rule: (\w+)\)$")
SAMPLE_S = 0.05
TICKS = os.sysconf("SC_CLK_TCK")


@dataclass
class Process:
    """One process seen under the run: its label, when it was first and last seen, its peak RSS (kB) and
    CPU seconds (user + system, when last seen)."""

    label: str
    first: float
    last: float
    peak_kb: int = 0
    cpu_s: float = 0.0


@dataclass
class SampledRun:
    """Wall seconds of the run, every process seen under it by pid, and the tree's largest total RSS (kB)."""

    wall: float
    processes: dict[int, Process] = field(default_factory=dict)
    tree_peak_kb: int = 0


def label(argv: Sequence[str]) -> str:
    """``snakepack CMD`` (``snakepack report SECTION``) for ``python -m workflow_scripts``, ``snakemake`` for
    Snakemake, else the program's name."""
    for i, arg in enumerate(argv[:-1]):
        if arg == "-m" and argv[i + 1] == "workflow_scripts" and i + 2 < len(argv):
            words = argv[i + 2 : i + 4] if argv[i + 2] == "report" else argv[i + 2 : i + 3]
            return " ".join(["snakepack", *words])
        if arg == "-m" and argv[i + 1] == "snakemake":
            return "snakemake"
    return os.path.basename(argv[0]) if argv else "?"


def _status_kb(pid: int) -> tuple[int, int, list[int]] | None:
    """(VmHWM, VmRSS) in kB and the children of ``pid``; None once it has gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        tasks = list(Path(f"/proc/{pid}/task").iterdir())  # a thread's children are listed under it
        children = [c for t in tasks for c in _read(t / "children").split()]
    except OSError:
        return None
    fields = dict(ln.split(":", 1) for ln in status.splitlines() if ln.startswith(("VmHWM", "VmRSS")))
    kb = [int(fields.get(k, "0 kB").split()[0]) for k in ("VmHWM", "VmRSS")]
    return kb[0], kb[1], [int(c) for c in children]


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:  # a thread that ended meanwhile
        return ""


def _cpu_s(pid: int) -> float | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime


def _argv(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")[:-1]
    except OSError:
        return []


def sampled_run(cmd: Sequence[str], cwd: Path, env: dict[str, str] | None = None) -> SampledRun:
    """Run ``cmd`` (RuntimeError if it fails, with its output's end) and sample its process tree every
    50 ms: a process that lives less than that may go unseen."""
    with open(cwd / ".sampled_run.out", "w+b") as out:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
        run = SampledRun(0.0)
        while proc.poll() is None:
            now, total, todo = time.perf_counter() - start, 0, [proc.pid]
            while todo:
                pid = todo.pop()
                seen = _status_kb(pid)
                if seen is None:
                    continue
                hwm, rss, children = seen
                todo += children
                total += rss
                p = run.processes.setdefault(pid, Process("?", now, now))
                name = label(argv) if (argv := _argv(pid)) else p.label
                if name != p.label:  # seen before its exec: named, timed and measured from it
                    p.label, p.first, p.peak_kb = name, now, 0
                p.last, p.peak_kb = now, max(p.peak_kb, hwm)
                p.cpu_s = cpu if (cpu := _cpu_s(pid)) is not None else p.cpu_s
            run.tree_peak_kb = max(run.tree_peak_kb, total)
            time.sleep(SAMPLE_S)
        run.wall = time.perf_counter() - start
        out.seek(0)
        text = out.read().decode(errors="replace")
    (cwd / ".sampled_run.out").unlink()
    if proc.returncode:
        raise RuntimeError(f"{' '.join(cmd[:4])} ... failed ({proc.returncode}):\n{text[-4000:]}")
    return run


def by_label(run: SampledRun) -> dict[str, dict[str, float]]:
    """Per label: processes, seconds seen alive and CPU seconds (summed), the largest peak RSS (MiB)."""
    rows: dict[str, dict[str, float]] = {}
    for p in run.processes.values():
        row = rows.setdefault(p.label, {"processes": 0, "seconds": 0.0, "cpu_s": 0.0, "peak_mib": 0.0})
        row["processes"] += 1
        row["seconds"] = round(row["seconds"] + p.last - p.first, 2)
        row["cpu_s"] = round(row["cpu_s"] + p.cpu_s, 2)
        row["peak_mib"] = round(max(row["peak_mib"], p.peak_kb / 1024), 1)
    return dict(sorted(rows.items(), key=lambda kv: -kv[1]["seconds"]))


def rule_times(log: Path) -> tuple[dict[str, dict[str, float]], float, float]:
    """From a Snakemake log: per rule, its jobs, their seconds (summed), its first start and last end (seconds
    after the first job's start), in order of first start; the seconds no job was running between the
    first start and the last end (Snakemake's own work: checkpoints' DAG updates, job selection); and the
    first job's start (seconds since the epoch)."""
    stamp, rule, jobs = None, None, {}
    for line in log.read_text().splitlines():
        if m := STAMP.match(line):
            stamp = datetime.strptime(m[1], "%a %b %d %H:%M:%S %Y").timestamp()
        elif m := STARTED.match(line):
            rule = m[1]
        elif (m := JOBID.match(line)) and rule is not None:
            jobs[m[1]] = [rule, stamp, None]
            rule = None
        elif (m := FINISHED.match(line)) and m[1] in jobs:
            jobs[m[1]][2] = stamp
    done = [(r, a, b) for r, a, b in jobs.values() if b is not None]
    if not done:
        return {}, 0.0, 0.0
    t0 = min(a for _, a, _ in done)
    rows: dict[str, dict[str, float]] = {}
    for r, a, b in sorted(done, key=lambda j: j[1]):
        row = rows.setdefault(r, {"jobs": 0, "job_s": 0.0, "from_s": a - t0, "to_s": b - t0})
        row["jobs"] += 1
        row["job_s"] += b - a
        row["to_s"] = max(row["to_s"], b - t0)
    busy, reach = 0.0, t0
    for _, a, b in sorted(done, key=lambda j: j[1]):  # the union of the jobs' intervals
        busy += max(0.0, b - max(a, reach))
        reach = max(reach, b)
    return rows, reach - t0 - busy, t0
