"""``snakepack batch``: run a per-shard command for every shard of one batch of a group, each member in this
process or a worker (no process start per shard), skipping the members whose record says they are current
(``core/batches.py``). Templates name each member's files: ``{shard}`` stands for the shard's name.

    snakepack batch --shards-dir results/shards/en_web_cc --batch 0 --per-batch 400 \\
        --state S --manifest M --input 'results/shards/en_web_cc/{shard}.jsonl' \\
        --output 'results/dedup/_work/sig/{shard}.sig' --member-log 'logs/sig/{shard}.log' --threads 8 \\
        -- dedup-signatures --input 'results/shards/en_web_cc/{shard}.jsonl' --output ...

A member's output goes to its own log; the batch's log says what each member did, and the tail of a failed
member's log. The other members still run; the job fails at the end, and a rerun redoes only the members
without a current record.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import time
import traceback
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path

import orjson

from workflow_scripts.core import batches, naming
from workflow_scripts.core.cli import UserError
from workflow_scripts.core.fsio import atomic_path

PLACEHOLDER = "{shard}"
LOG_TAIL = 20  # lines of a failed member's log shown in the batch's log


@dataclass(frozen=True)
class Member:
    name: str
    argv: list[str]
    inputs: list[str]
    outputs: list[str]
    log: str


def fill(templates: Sequence[str], name: str) -> list[str]:
    return [t.replace(PLACEHOLDER, name) for t in templates]


def run_member(argv: Sequence[str], log: str) -> int:
    """Run one ``snakepack`` command with its output (Python's and the C libraries') in ``log``; its exit
    status."""
    from workflow_scripts import cli

    Path(log).parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with open(log, "w", buffering=1) as out, redirect_stdout(out), redirect_stderr(out):
        os.dup2(out.fileno(), 1)
        os.dup2(out.fileno(), 2)
        try:
            return cli.main(list(argv))
        except SystemExit as exit:  # argparse
            return exit.code if isinstance(exit.code, int) else 2
        except Exception:
            traceback.print_exc()
            return 1
        finally:
            out.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])


def tail(path: str) -> str:
    try:
        lines = Path(path).read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return ""
    return "\n".join(f"    {line}" for line in lines[-LOG_TAIL:])


def parse(argv: Sequence[str] | None) -> tuple[argparse.Namespace, list[str]]:
    args = list(sys.argv[1:] if argv is None else argv)
    cut = args.index("--") if "--" in args else len(args)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog="-- COMMAND ARGS...")
    parser.add_argument("--shards-dir", required=True, help="the group's ingested shards: the members")
    parser.add_argument("--batch", type=int, required=True)
    parser.add_argument("--per-batch", type=int, required=True, help="shards per batch")
    parser.add_argument("--state", required=True, help="the members' records (not a declared output)")
    parser.add_argument(
        "--manifest", required=True, help="written last: each member's outputs, those run now"
    )
    parser.add_argument("--input", action="append", default=[], help="a member's input (template)")
    parser.add_argument("--output", action="append", default=[], help="a member's output (template)")
    parser.add_argument("--member-log", required=True, help="a member's log (template)")
    parser.add_argument("--threads", type=int, default=1, help="members at once (workers)")
    parser.add_argument(
        "--member-threads", action="store_true", help="the command takes --threads: workers share them"
    )
    return parser.parse_args(args[:cut]), args[cut + 1 :]


def main(argv: Sequence[str] | None = None) -> int:
    args, command = parse(argv)
    if not command:
        raise UserError("give the member's command after `--`")
    names = [naming.shard_stem(f) for f in batches.shard_files(args.shards_dir)]
    chosen = batches.members(names, args.batch, args.per_batch)
    if not chosen:
        raise UserError(f"{args.shards_dir}: no shard in batch {args.batch} of {args.per_batch}")
    state = batches.State(args.state, orjson.dumps([command, args.input, args.output]).decode())
    todo = []
    for name in chosen:
        log = args.member_log.replace(PLACEHOLDER, name)
        member = Member(name, fill(command, name), fill(args.input, name), fill(args.output, name), log)
        if state.is_current(name, member.inputs, member.outputs):
            print(f"{name}: up to date", flush=True)
        else:
            todo.append(member)
    workers = max(1, min(args.threads, len(todo)))
    extra = ["--threads", str(max(1, args.threads // workers))] if args.member_threads else []
    failed = run_all(todo, state, workers, extra)
    if failed:
        print(f"{len(failed)} of {len(chosen)} members failed: {', '.join(failed)}", flush=True)
        return 1
    # Each member's outputs' sizes and times: the manifest changes whenever one of them does (Snakemake
    # compares a small input's checksum before it reruns what reads it).
    made = {name: state.done[name]["outputs"] for name in chosen}
    with atomic_path(args.manifest) as tmp:
        tmp.write_bytes(
            orjson.dumps({"members": made, "ran": [m.name for m in todo]}, option=orjson.OPT_INDENT_2)
        )
    print(f"{len(todo)} of {len(chosen)} members run, {len(chosen) - len(todo)} up to date", flush=True)
    return 0


def run_all(todo: list[Member], state: batches.State, workers: int, extra: list[str]) -> list[str]:
    """Run the members (``workers`` at once), recording each that succeeds; the names of those that failed."""
    failed = []

    def finish(member: Member, status: int, started: float) -> None:
        if status == 0:
            state.record(member.name, member.inputs, member.outputs)
            print(f"{member.name}: done in {time.monotonic() - started:.1f} s", flush=True)
        else:
            failed.append(member.name)
            print(
                f"{member.name}: failed (exit {status}); its log {member.log} ends:\n{tail(member.log)}",
                flush=True,
            )

    if workers == 1:
        for member in todo:
            started = time.monotonic()
            finish(member, run_member([*member.argv, *extra], member.log), started)
        return failed
    started = time.monotonic()
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
        futures = {pool.submit(run_member, [*m.argv, *extra], m.log): m for m in todo}
        for future in as_completed(futures):  # each recorded as soon as it ends
            finish(futures[future], future.result(), started)
    return failed
