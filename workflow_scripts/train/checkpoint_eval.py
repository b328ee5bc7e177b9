"""``snakepack train-eval``: evaluate the checkpoint a training segment saved (one job per segment).

Usage (the train_eval rule's command)::

    snakepack train-eval --keys KEYS --record RECORD --out EVAL \\   # core/train_layout.py's files
        --launch "python -m workflow_scripts train-reference --config {config} --eval-only --tag {tag} \\
        --eval-out {out}"

``{config}``, ``{tag}`` (``global_stepN``), ``{checkpoint}`` (its folder), ``{out}`` and ``{pack}`` are
filled in. The launch writes the evaluation JSON to ``{out}`` (the reference trainer's ``--eval-out``), or
prints a validation line that ``progress_lines`` reads (GPT-NeoX, Megatron-LM), which is then written; an
evaluation that keeps its own results (seed 000's perplexity tester and its CSV) is recorded as run. A
segment that saved no new checkpoint (a spare finding its pack finished) is recorded as skipped, without
running anything. Seed 000
submitted its ``launch_pp_tester.sh`` after every training job and kept one CSV per ``global_step``: here
each evaluation is a file, and ``train-curve`` gathers them into one table.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
from collections.abc import Sequence

from workflow_scripts.core.cli import UserError
from workflow_scripts.core.fsio import read_json, write_json
from workflow_scripts.train import progress_lines
from workflow_scripts.train.segment import PackKeys


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", required=True, help="the pack's keys file")
    parser.add_argument("--record", required=True, help="the segment's record")
    parser.add_argument("--out", required=True, help="the evaluation (JSON)")
    parser.add_argument(
        "--launch", required=True, help="the evaluation; {config} {tag} {checkpoint} {out} {pack}"
    )
    args = parser.parse_args(argv)
    keys, record = PackKeys.read(args.keys), read_json(args.record)
    base = {"pack": keys.pack, "segment": record["segment"], "checkpoint": record["checkpoint"]}
    if record["iterations"] == 0:
        write_json(args.out, {**base, "iteration": record["last_step"], "skipped": "no new checkpoint"})
        print(f"train-eval: {keys.pack} segment {record['segment']} saved no new checkpoint: nothing to do")
        return 0
    tmp = f"{args.out}.part"
    if os.path.exists(tmp):
        os.remove(tmp)
    checkpoint = shlex.quote(os.path.join(record["checkpoints"], record["checkpoint"]))
    command = args.launch.format(
        config=shlex.quote(keys.config),
        tag=record["checkpoint"],
        checkpoint=checkpoint,
        out=shlex.quote(tmp),
        pack=keys.pack,
    )
    print(f"train-eval: {keys.pack} {record['checkpoint']}\n  $ {command}", flush=True)
    proc = subprocess.run(
        command,
        shell=True,
        env={**os.environ, **keys.environment},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    sys.stdout.write(proc.stdout)
    if proc.returncode != 0:
        raise UserError(f"evaluation of {record['checkpoint']} failed (exit {proc.returncode})")
    if os.path.exists(tmp):
        result = read_json(tmp)
        os.remove(tmp)
    else:
        found = [v for line in proc.stdout.splitlines() if (v := progress_lines.validation_loss(line))]
        result = {"iteration": record["last_step"], "valid_loss": None, "note": "no validation line printed"}
        if found:
            result = {"iteration": found[-1][0], "valid_loss": found[-1][1]}
    write_json(args.out, {**base, **result})
    print(f"train-eval: {keys.pack} {record['checkpoint']}: valid_loss {result['valid_loss']}")
    return 0
