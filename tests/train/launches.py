"""The segments the chain makes for a pack, on the workflow's real files: every state of the checkpoint
folder a segment can find (first, resume, spare, a pack change, a fine-tune's start) and the ``{config}``
``train-segment`` hands the launch for it. Shared by the trainer-compatibility and trainer-in-the-loop tests
(the ``variants`` fixture that builds the files is in conftest.py)."""

from __future__ import annotations

import contextlib
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import yaml

from tests.utils import Workflow
from workflow_scripts.core import train_layout
from workflow_scripts.core.fsio import read_json
from workflow_scripts.train import checkpoint_dirs, finetune, segment

START = 100  # the fine-tuning runs' starting checkpoint
CONFIG = ("--configfile", "config/sample.yaml", "variant.yaml")  # the sample, its train section changed


@dataclass(frozen=True)
class Segment:
    """One segment: its kind, the tracker it finds (None: no checkpoint; ``START``: the fine-tune's start,
    a link), the pack's keys and the files of its ``{config}``."""

    kind: str  # first, finetune start, pack change, resume, spare
    tracker: int | None
    keys: segment.PackKeys
    files: list[str]


def segments(wf: Workflow) -> Iterator[Segment]:
    """Every segment state of every pack; while a segment is yielded its tracker is in the pack's checkpoint
    folder (``finetune_from``'s link and tracker for a fine-tune's start), removed after."""
    train = wf.root / "results" / "train"
    start = yaml.safe_load((wf.root / "variant.yaml").read_text())["train"].get("finetune_from")
    first = read_json(wf.root / "results" / "plan.json")["packs"][0]["name"]
    for keys_file in sorted(train.glob(f"*/{train_layout.KEYS}")):
        keys = segment.PackKeys.read(str(keys_file))
        record = train / keys.pack / "segments" / "0.json"
        record.parent.mkdir(parents=True, exist_ok=True)
        checkpoints = Path(keys.checkpoints)
        layout = checkpoint_dirs.of(keys.trainer)
        opening = ("first", None) if keys.pack == first else ("pack change", keys.offset)
        states = [opening, ("resume", keys.offset + 1), ("spare", keys.end)]
        if start and keys.pack == first:
            states.insert(0, ("finetune start", START))
        for kind, state in states:
            (checkpoints / layout.tracker).unlink(missing_ok=True)
            if kind == "finetune start":
                finetune.prepare(str(checkpoints), start, keys.trainer)
            elif state is not None:
                checkpoints.mkdir(parents=True, exist_ok=True)
                layout.set_latest(str(checkpoints), state)
            with contextlib.chdir(wf.root):  # the segments run there: the keys' paths are relative to it
                words = shlex.split(segment.config_arguments(keys, record, 0, start))
            yield Segment(kind, state, keys, [str(wf.root / f) for f in words])
        (checkpoints / layout.tracker).unlink(missing_ok=True)


def launch_files(wf: Workflow) -> list[list[str]]:
    """Every distinct ``{config}`` train-segment hands the launch, over the checkpoint folder's states."""
    seen = {" ".join(s.files): s.files for s in segments(wf)}
    return list(seen.values())
