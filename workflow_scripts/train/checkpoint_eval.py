"""``snakepack train-eval``: evaluate the checkpoints a training segment saved (one job per segment).

Usage (the train_eval rule's command)::

    snakepack train-eval --keys KEYS --record RECORD --out EVAL [--every checkpoint] \\   # train_layout
        --launch "python -m workflow_scripts train-reference --config {config} --eval-only --tag {tag} \\
        --eval-out {out}"

``--every segment`` (``train.eval_every``, the default) evaluates the segment's last checkpoint; ``--every
checkpoint`` every checkpoint it saved (seed 000 saves every 450 iterations and exits every 8,550: 19
checkpoints a segment), oldest first, each one row of ``evaluations``. ``{config}``, ``{tag}``
(``global_stepN`` or ``iter_NNNNNNN``), ``{step}`` (its global step), ``{checkpoint}`` (its folder),
``{out}``, ``{pack}``, for Megatron-LM ``{args}`` (the arguments expanded into argv) and for GPT-NeoX
``{architecture}`` (``llama`` or ``neox``: the model's, for the LUMI fork's converter) are filled in. The
launch writes the evaluation JSON to ``{out}`` (the reference trainer's ``--eval-out``), or prints a
validation line that ``progress_lines`` reads (GPT-NeoX, Megatron-LM), which is then written; an evaluation
that keeps its own results (seed 000's perplexity tester and its CSV) is recorded as run. A segment that
saved no new checkpoint (a spare finding its pack finished) is recorded as skipped, without running
anything. ``train-curve`` gathers every evaluation into one table, a row per global step.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

import yaml

from workflow_scripts.core.cli import UserError
from workflow_scripts.core.fsio import read_json, write_json
from workflow_scripts.train import checkpoint_dirs, progress_lines
from workflow_scripts.train.configs import megatron
from workflow_scripts.train.hf import config as hf_config
from workflow_scripts.train.segment import PackKeys

EVERY = ("segment", "checkpoint")


def saved_steps(keys: PackKeys, record: dict[str, Any], every: str) -> list[int]:
    """The steps to evaluate: the segment's last checkpoint, or every one it saved that is still there."""
    if every == "segment":
        return [record["last_step"]]
    first, last = record["first_step"], record["last_step"]
    return [s for s in keys.layout.steps(record["checkpoints"]) if first < s <= last]


def evaluation_command(launch: str, keys: PackKeys, checkpoints: str, step: int, out: str) -> str:
    """The evaluation of the checkpoint of global step ``step``: ``{config}``, ``{tag}``, ``{step}``,
    ``{checkpoint}`` (its folder), ``{out}``, ``{pack}``, and for Megatron-LM ``{args}``: the arguments file
    expanded into argv for a run's own checkpoint (``megatron.argv``: no ``--finetune``, no phases, no
    training data), and for step 0 a ``--load`` whose tracker names it (``step_zero_load``)."""
    tag = keys.layout.tag(step)
    fields = {
        "config": shlex.quote(keys.config),
        "tag": tag,
        "step": step,
        "checkpoint": shlex.quote(os.path.join(checkpoints, tag)),
        "out": shlex.quote(out),
        "pack": keys.pack,
    }
    if keys.trainer == "megatron":
        words = megatron.argv(keys.config, evaluation=True)
        if step == 0:  # --ckpt-step 0 is Megatron-LM's "latest": a --load whose tracker names step 0
            words = with_load(words, step_zero_load(checkpoints, out))
        fields["args"] = shlex.join(words)
    elif "{architecture}" in launch:  # seed 000's pp_tester_single.py converts as neox unless told
        fields["architecture"] = architecture(keys.config)
    return launch.format(**fields)


def step_zero_load(checkpoints: str, out: str) -> str:
    """A folder for Megatron-LM to ``--load`` step 0 from: its ``iter_0000000``, a link to the run's, and a
    tracker naming 0. Megatron-LM reads ``--ckpt-step`` only when it is true (``if args.ckpt_step:``), so
    ``--ckpt-step 0`` loads the step the tracker names, the latest checkpoint, not step 0 (an import of
    ``train.init_from.hf``, or a start of ``train.finetune_from`` named ``iter_0000000``)."""
    layout = checkpoint_dirs.of("megatron")
    source = os.path.join(checkpoints, layout.tag(0))
    if not os.path.isdir(source):
        raise UserError(f"no {layout.tag(0)} in {checkpoints}: there is no checkpoint of step 0 to evaluate")
    folder = os.path.join(os.path.dirname(os.path.abspath(out)), ".step0-load")
    os.makedirs(folder, exist_ok=True)
    link = os.path.join(folder, layout.tag(0))
    if os.path.lexists(link) and os.path.realpath(link) != os.path.realpath(source):
        os.remove(link)
    if not os.path.lexists(link):
        os.symlink(os.path.abspath(source), link)
    layout.set_latest(folder, 0)
    return folder


def with_load(words: list[str], folder: str) -> list[str]:
    """``pretrain_gpt.py``'s argv with ``--load`` set to ``folder`` (in place, or added)."""
    words = list(words)
    if "--load" in words:
        words[words.index("--load") + 1] = folder
        return words
    return [*words, "--load", folder]


def architecture(config: str) -> str:
    """The Hugging Face architecture of a GPT-NeoX config's model (``hf_config.neox_architecture``)."""
    with open(config, encoding="utf-8") as f:
        try:
            return hf_config.neox_architecture(yaml.safe_load(f))
        except hf_config.UnsupportedModel as error:
            raise UserError(f"{config}: {error}") from None


def evaluate(keys: PackKeys, record: dict[str, Any], step: int, launch: str, out: str) -> dict[str, Any]:
    """Run the evaluation of one checkpoint; its result (``iteration``, ``valid_loss``...)."""
    tag = keys.layout.tag(step)
    tmp = f"{out}.part"
    if os.path.exists(tmp):
        os.remove(tmp)
    command = evaluation_command(launch, keys, record["checkpoints"], step, tmp)
    print(f"train-eval: {keys.pack} {tag}\n  $ {command}", flush=True)
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
        raise UserError(f"evaluation of {tag} failed (exit {proc.returncode})")
    if os.path.exists(tmp):
        result = read_json(tmp)
        os.remove(tmp)
    else:
        found = [v for line in proc.stdout.splitlines() if (v := progress_lines.validation_loss(line))]
        result = {"iteration": step, "valid_loss": None, "note": "no validation line printed"}
        if found:
            result = {"iteration": found[-1][0], "valid_loss": found[-1][1]}
    print(f"train-eval: {keys.pack} {tag}: valid_loss {result['valid_loss']}", flush=True)
    return {"pack": keys.pack, "segment": record["segment"], **result, "checkpoint": tag}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", required=True, help="the pack's keys file")
    parser.add_argument("--record", required=True, help="the segment's record")
    parser.add_argument("--out", required=True, help="the evaluation (JSON)")
    parser.add_argument(
        "--launch",
        required=True,
        help="the evaluation; {config} {tag} {step} {checkpoint} {out} {pack} {args} {architecture}",
    )
    parser.add_argument("--every", choices=EVERY, default="segment", help="train.eval_every")
    args = parser.parse_args(argv)
    keys, record = PackKeys.read(args.keys), read_json(args.record)
    base = {"pack": keys.pack, "segment": record["segment"], "checkpoint": record["checkpoint"]}
    if record["iterations"] == 0:
        write_json(args.out, {**base, "iteration": record["last_step"], "skipped": "no new checkpoint"})
        print(f"train-eval: {keys.pack} segment {record['segment']} saved no new checkpoint: nothing to do")
        return 0
    rows = [
        evaluate(keys, record, step, args.launch, args.out) for step in saved_steps(keys, record, args.every)
    ]
    write_json(args.out, {**base, **rows[-1], "evaluations": rows})
    return 0
