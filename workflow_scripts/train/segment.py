"""``snakepack train-segment``: one training segment of a pack (one Slurm job), and its record.

Usage (the train_segment rule's command)::

    snakepack train-segment --keys KEYS --segment 1 --segments 3 --record RECORD \\
        --launch "python -m workflow_scripts train-reference --config {config}" [--margin-minutes 10] \\
        [--finetune-from CKPT]      # KEYS, RECORD: the pack's and the segment's files (core/train_layout.py)

It runs the trainer's launch command (``{config}``: the pack's config, or once a fine-tuning run has saved
its own checkpoint a copy of it with ``finetune`` off: one file, as GPT-NeoX refuses a key repeated across
its files; ``{pack}``; Megatron-LM's ``{args}``: that file expanded into argv), with the pack's
environment (the SFT switches), passing on SIGTERM and SIGUSR1. The
trainer resumes from its tracker (``latest``; checkpoint_dirs gives each trainer's layout) and stops at its
``exit_interval`` boundary, at the pack's end, or on the signal, saving first. Inside Slurm, a watchdog
sends SIGUSR1 ``--margin-minutes`` before the job's time limit (asked from squeue), so a segment uses its
whole time whatever the s/iter. It is the only notice: Slurm's ``--signal`` would also reach Snakemake's
own job step, which SIGUSR1 kills.

The record (JSON) says what the segment did, from the checkpoint folder and the trainer's output: global steps
before and after, the checkpoint tag, the folders above the tracker removed before the trainer started (saves
cut short, ``removed_partial``: checkpoint_dirs), whether the pack is finished, Slurm job id and nodes, wall
time, measured s/iter, the losses it printed. A segment fails (no record; Snakemake retries it and the retry
resumes from ``latest``) when the trainer fails (not when it dies of the segment's own SIGUSR1 after saving:
the save stands), when it made no progress on an unfinished pack, or when it is the pack's last segment and
the pack is not finished. Every run, failed or not, also leaves its record as an
attempt beside the records (``train_layout.attempt``; ``exit``: why it failed): the loss curve takes the
iterations of a killed attempt from there. A segment that finds the pack finished runs the trainer anyway (it
loads and verifies the checkpoint) and records zero iterations; Megatron-LM is not started then (at the pack's
end, a phase transition, it would train the next phase on this pack's data).
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from workflow_scripts.core import train_layout
from workflow_scripts.core.cli import UserError
from workflow_scripts.core.fsio import read_json, write_json
from workflow_scripts.core.indexed_dataset import check_complete
from workflow_scripts.train import checkpoint_dirs, finetune, progress_lines, slurm
from workflow_scripts.train.configs import megatron

DATA_KEYS = ("train_data_paths", "valid_data_paths", "test_data_paths")  # in the keys file (GPT-NeoX's names)


class SegmentError(UserError, RuntimeError):
    """A segment that must be run again: the message says why and where the run stands."""


@dataclass(frozen=True)
class PackKeys:
    """What a segment needs from a pack's keys file (written with its trainer config)."""

    pack: str
    config: str
    offset: int
    train_iters: int
    exit_interval: int
    checkpoints: str
    environment: dict[str, str]
    trainer: str = "neox"
    data: tuple[str, ...] = ()  # the prefixes of the packs the trainer reads (train, valid, test)

    @property
    def end(self) -> int:
        return self.offset + self.train_iters

    @classmethod
    def read(cls, path: str) -> PackKeys:
        keys = read_json(path)
        values = {k: v["value"] for k, v in keys["set"].items()}
        return cls(
            pack=keys["summary"]["pack"],
            config=keys["config"],
            offset=int(values["iteration_offset"]),
            train_iters=int(values["train_iters"]),
            exit_interval=int(values["exit_interval"]),
            checkpoints=values["save"],
            environment=dict(keys.get("environment") or {}),
            trainer=keys.get("trainer", "neox"),
            data=tuple(dict.fromkeys(p for k in DATA_KEYS for p in values.get(k) or [])),
        )

    @property
    def layout(self) -> checkpoint_dirs.CheckpointLayout:
        return checkpoint_dirs.of(self.trainer)

    def latest(self) -> int | None:
        """The global step the checkpoint folder's tracker names (None without one)."""
        return self.layout.latest(self.checkpoints)

    def tag(self, step: int | None) -> str:
        return "none" if step is None else self.layout.tag(step)

    def boundary(self, segment: int) -> int:
        """The global step segment ``segment`` trains to when nothing stops it early."""
        if self.trainer == "megatron":  # exits at global multiples of exit_interval
            return min(self.end, (self.offset // self.exit_interval + segment + 1) * self.exit_interval)
        return self.offset + min(self.train_iters, (segment + 1) * self.exit_interval)


def sha256(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


class Launch:
    """The trainer as a child process group: output passed through and parsed; signals passed on."""

    def __init__(self, command: str, env: dict[str, str]) -> None:
        self.command = command
        self.env = env
        self.losses: list[tuple[int, float]] = []
        self.valid: list[tuple[int, float]] = []
        self.times: list[float] = []
        self.signalled: str | None = None
        self.proc: subprocess.Popen[str] | None = None

    def signal(self, signum: int, why: str) -> None:
        if self.proc is not None and self.proc.poll() is None and self.signalled is None:
            self.signalled = why
            print(f"train-segment: {why}: SIGUSR1/SIGTERM passed to the trainer", flush=True)
            os.killpg(self.proc.pid, signum)

    def run(self, deadline: float | None) -> int:
        # The trainer's process group gets the signal; the shell around it waits for the trainer (a trap,
        # not an ignore: children of a shell get a trapped signal's default back) and exits with its status.
        self.proc = subprocess.Popen(
            ["bash", "-c", f"trap : USR1 TERM; {self.command}"],
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
            start_new_session=True,
        )
        if deadline is not None:
            delay = max(0.0, deadline - time.time())
            timer = threading.Timer(delay, self.signal, (signal.SIGUSR1, "time limit margin reached"))
            timer.daemon = True
            timer.start()
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
            if (parsed := progress_lines.iteration_loss(line)) is not None:
                self.losses.append(parsed)
                self.times.append(time.perf_counter())
            elif (parsed := progress_lines.validation_loss(line)) is not None:
                self.valid.append(parsed)
        return self.proc.wait()

    def seconds_per_iter(self) -> float | None:
        """Between the first and the last iteration line (start-up and loading excluded)."""
        if len(self.times) < 2:
            return None
        return round((self.times[-1] - self.times[0]) / (len(self.times) - 1), 4)


def config_arguments(keys: PackKeys, record: Path, segment: int, start: str | None) -> str:
    """The ``{config}`` of the launch: the pack's config, or once ``latest`` is the run's own checkpoint a
    copy of it with ``finetune`` off (seed 003's rule: the optimizer is reset only once). Always one file:
    GPT-NeoX's ``NeoXArgs.from_ymls`` refuses a key given in two files."""
    if start is None or finetune.finetune_flag(keys.checkpoints, start, keys.trainer):
        return shlex.quote(keys.config)
    with open(keys.config, encoding="utf-8") as f:
        text = f.read()
    if keys.trainer == "neox":
        config = yaml.safe_load(text)
        if not config.get("finetune"):
            return shlex.quote(keys.config)
        text = yaml.safe_dump({**config, "finetune": False}, sort_keys=False, width=120)
    else:
        lines = text.splitlines(True)
        if not any(line.strip() == "--finetune" for line in lines):
            return shlex.quote(keys.config)
        text = "".join(line for line in lines if line.strip() != "--finetune")
    off = Path(train_layout.finetune_off(str(record), segment, Path(keys.config).suffix))
    off.write_text(text, encoding="utf-8")
    return shlex.quote(str(off))


def launch_command(template: str, keys: PackKeys, config: str) -> str:
    """The trainer's command: ``{config}`` (the file, quoted, as ``config_arguments`` gives it), ``{pack}``,
    and for Megatron-LM ``{args}``: the arguments file expanded into argv, one quoted word a flag or value
    (``pretrain_gpt.py`` reads no arguments file)."""
    fields = {"config": config, "pack": keys.pack}
    if keys.trainer == "megatron":
        fields["args"] = shlex.join(megatron.argv(*shlex.split(config)))
    return template.format(**fields)


def position(keys: PackKeys, start: str | None) -> int | None:
    """The run's global step: the tracker's, or None while it still names the fine-tuning start (the
    run has none of its own; Megatron-LM's ``--finetune`` restarts at iteration 0)."""
    if start is not None and finetune.finetune_flag(keys.checkpoints, start, keys.trainer):
        return None
    return keys.latest()


def died_of_notice(launch: Launch, rc: int) -> bool:
    """The trainer (or the shell or srun around it) ended of the SIGUSR1 this segment sent it: the time
    limit's notice, not a cancellation."""
    usr1 = int(signal.SIGUSR1)
    notice = launch.signalled is not None and launch.signalled != f"signal {int(signal.SIGTERM)}"
    return notice and rc in (128 + usr1, -usr1)


def deadline_of(margin_minutes: float) -> float | None:
    """When to ask the trainer to stop: the Slurm job's end minus the margin (None outside Slurm)."""
    job = os.environ.get("SLURM_JOB_ID")
    end = slurm.end_time(job) if job else None
    return None if end is None else end.timestamp() - margin_minutes * 60


def run_segment(args: argparse.Namespace) -> dict[str, Any]:
    keys = PackKeys.read(args.keys)
    for prefix in keys.data:  # a missing or truncated pack is named before any GPU time is spent
        check_complete(prefix)
    record_path = Path(args.record)
    record_path.parent.mkdir(parents=True, exist_ok=True)
    removed = keys.layout.remove_partial(keys.checkpoints)
    for tag in removed:
        print(f"train-segment: {keys.pack}: removed {tag} from {keys.checkpoints}: a save cut short above "
              f"latest ({keys.tag(keys.latest())})", flush=True)  # fmt: skip
    before = position(keys, args.finetune_from)
    if before is not None and before > keys.end:
        raise SegmentError(
            f"{keys.pack}: latest in {keys.checkpoints} is {keys.tag(before)}, past this pack's end "
            f"{keys.end}: a later pack has trained already (its config changed?)"
        )
    target = keys.boundary(args.segment)
    config = config_arguments(keys, record_path, args.segment, args.finetune_from)
    command = launch_command(args.launch, keys, config)
    started, wall0 = dt.datetime.now(dt.UTC), time.perf_counter()
    print(
        f"train-segment: {keys.pack} segment {args.segment + 1} of {args.segments}: latest "
        f"{keys.tag(before)}, trains to {keys.tag(target)} "
        f"(pack end {keys.end})\n  $ {command}",
        flush=True,
    )
    launch = Launch(command, {**os.environ, **keys.environment})
    if keys.trainer == "megatron" and before == keys.end:
        rc = 0  # its tracker is this pack's end, a phase transition: Megatron-LM would train the next
        # phase on this pack's data (or, past the run's last transition, find no phase and fail)
        print(f"train-segment: {keys.pack} is finished: Megatron-LM is not started", flush=True)
    else:
        forward = {
            s: signal.signal(s, lambda signum, _: launch.signal(signum, f"signal {signum}"))
            for s in (signal.SIGTERM, signal.SIGUSR1)
        }
        try:
            rc = launch.run(deadline_of(args.margin_minutes))
        finally:
            for s, handler in forward.items():
                signal.signal(s, handler)
    wall = time.perf_counter() - wall0
    after = position(keys, args.finetune_from)
    first = keys.offset if before is None or before < keys.offset else before
    last = first if after is None else after
    record = {
        "pack": keys.pack,
        "segment": args.segment,
        "segments": args.segments,
        "attempt": args.attempt,
        "first_step": first,
        "last_step": last,
        "target_step": target,
        "end_step": keys.end,
        "iterations": last - first,
        "finished": last == keys.end,
        "checkpoint": None if after is None else keys.tag(after),
        "removed_partial": removed,
        "trainer": keys.trainer,
        "checkpoints": keys.checkpoints,
        "config": keys.config,
        **slurm.this_job(),
        "host": os.uname().nodename,
        "started": started.isoformat(timespec="seconds"),
        "wall_seconds": round(wall, 3),
        "s_per_iter": launch.seconds_per_iter(),
        "train_loss": launch.losses[-1][1] if launch.losses else None,
        "valid_loss": launch.valid[-1][1] if launch.valid else None,
        "losses": launch.losses,
        "valid_losses": launch.valid,
        "exit": launch.signalled or ("pack finished" if after == keys.end else "segment boundary"),
        "config_sha256": sha256(keys.config),
    }
    where = f"latest is {keys.tag(after)} of {keys.end}"
    failure = None
    if rc != 0 and died_of_notice(launch, rc) and after is not None and (before is None or after > before):
        # the notice came after the trainer's last save (Megatron-LM restores SIGUSR1's default once its
        # loop ends: during its last evaluation or its exit): what it saved stands
        print(f"train-segment: {keys.pack}: the trainer died of the notice ({launch.signalled}) after saving "
              f"{keys.tag(after)}: taken as the segment's end", flush=True)  # fmt: skip
    elif rc != 0:
        failure = f"{keys.pack} segment {args.segment}: the trainer exited with {rc}; {where}"
    elif launch.signalled == f"signal {int(signal.SIGTERM)}":  # a time limit's notice is SIGUSR1
        failure = f"{keys.pack} segment {args.segment}: stopped by SIGTERM (cancelled or preempted; {where})"
    elif after is None or (after < keys.end and (before is not None and after <= before)):
        failure = f"{keys.pack} segment {args.segment}: no progress ({where}); a retry resumes"
    elif args.segment == args.segments - 1 and after < keys.end:
        failure = (
            f"{keys.pack}: its last segment ({args.segments}) ended before the pack's end ({where}): a retry "
            "resumes from latest; for good, raise train.spare_segments or train.time_limit_minutes"
        )
    attempt = record | ({"exit": failure} if failure else {})
    stamp = started.strftime("%Y%m%dT%H%M%S")
    write_json(train_layout.attempt(str(record_path), args.segment, stamp, os.getpid()), attempt)
    if failure:
        raise SegmentError(failure)
    return record


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", required=True, help="the pack's keys file (written with its config)")
    parser.add_argument("--segment", type=int, required=True, help="this segment's number, from 0")
    parser.add_argument("--segments", type=int, required=True, help="the pack's segments, spares included")
    parser.add_argument("--record", required=True, help="the segment record to write (JSON)")
    parser.add_argument("--launch", required=True, help="the trainer's command; {config} and {pack} filled")
    parser.add_argument("--margin-minutes", type=float, default=10, help="stop this long before the limit")
    parser.add_argument("--finetune-from", help="the run's starting checkpoint (train.finetune_from)")
    parser.add_argument("--attempt", type=int, default=1, help="Snakemake's attempt number (retries)")
    args = parser.parse_args(argv)
    record = run_segment(args)
    write_json(args.record, record)
    print(
        f"train-segment: {record['pack']} segment {args.segment + 1}/{args.segments}: step "
        f"{record['first_step']} -> {record['last_step']} ({record['iterations']} iterations, "
        f"{record['wall_seconds']:.1f} s, {record['s_per_iter'] or '-'} s/iter); exit: {record['exit']}",
        flush=True,
    )
    return 0
