"""Every name in the training's part of the results tree (``{output_root}/train``) and of its logs, built and
parsed here and nowhere else (the rest of the tree is ``core/naming.py``'s). Standard library only: the
Snakefile imports it while it is parsed.

================================  ==============================================================
path (under the train folder)     what
================================  ==============================================================
``{pack}/{pack}.yml`` / ``.args``  the pack's trainer config (GPT-NeoX / Megatron-LM)
``{pack}/keys.json``               every key the workflow set and why, and the pack's summary
``{pack}/segments/{k}.json``       segment k's record (written when it trained its share)
``{pack}/segments/attempts/``      every run of a segment, failed or not: ``{k}.{stamp}.{pid}.json``
``{pack}/eval/{k}.json``           the evaluation of segment k's checkpoint
``{pack}/retention/{k}.json``      what the retention policy kept and deleted after segment k
``{pack}/done.json``               the pack reached its last step (the next pack starts after it)
``{pack}/data_cache.json``         the Megatron-LM index caches built for the pack's first segment
``data_cache/``                    Megatron-LM's ``--data-cache-path`` (``train.data_cache_dir``'s default)
``configs.csv`` / ``.md``          every pack's iterations, cadence and segments
``loss.csv``, ``loss.png``,        the run's curve across segments and packs, its evaluations,
``evals.csv``, ``segments.csv``,   its segments and their statistics
``stats.json``
``detach/chain.json``              the job ids of a detached chain
``reference/{run}/``               the reference trainer's own ``loss.csv``, ``eval.jsonl``, ``segments/``
``import/global_step0/``           ``train.init_from.hf`` as the trainer's start: GPT-NeoX's folder, or
``import/iter_0000000/``           Megatron-LM's (``torch_dist``); ``import/import.json``: its check
``export/{name}/``                 a checkpoint as a Hugging Face folder: ``{pack}`` (its last step) or
                                   ``step{N}`` (a milestone); ``export/{name}.json``: its logit check
================================  ==============================================================

Logs go to ``{logs}/train/``: ``{pack}_config.log``, ``{pack}/segment_{k}.log`` (and ``eval_``,
``retention_``, ``after_``), ``{pack}/done.log``, ``configs.log``, ``curve.log``, ``detach.log``,
``status.log``. ``{pack}`` and ``{k}`` may be Snakemake wildcards (``"{pack}"``, ``"{segment}"``).
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass

SEGMENTS = "segments"
ATTEMPTS = "attempts"
REFERENCE = "reference"
KEYS = "keys.json"
DONE = "done.json"
LOSS_CSV = "loss.csv"
LOSS_PNG = "loss.png"
EVALS_CSV = "evals.csv"
SEGMENTS_CSV = "segments.csv"
STATS = "stats.json"
CONFIGS_CSV = "configs.csv"
CONFIGS_MD = "configs.md"
EVAL_JSONL = "eval.jsonl"
FINETUNE_START = "finetune_start.json"
DATA_CACHE = "data_cache"  # Megatron-LM's --data-cache-path unless train.data_cache_dir names another
IMPORT_FOLDERS = {"neox": "global_step0", "megatron": "iter_0000000"}  # each trainer's step-0 checkpoint
# The records trainers leave, relative to the train folder: the Slurm segments, every run of them, their
# curve (train_curve's loss.csv and evals.csv); and relative to the folder that holds the run's checkpoint
# folder (reference_run), the reference trainer's curves and segments.
RECORD_PATTERNS = (
    f"*/{SEGMENTS}/*.json",
    f"*/{SEGMENTS}/{ATTEMPTS}/*.json",
    LOSS_CSV,
    EVALS_CSV,
)
REFERENCE_PATTERNS = (
    f"{REFERENCE}/*/{LOSS_CSV}",
    f"{REFERENCE}/*/{EVAL_JSONL}",
    f"{REFERENCE}/*/{SEGMENTS}/*.json",
)


@dataclass(frozen=True)
class TrainLayout:
    """The paths under the train folder ``root`` and the training logs under ``logs`` (no trailing ``/``)."""

    root: str
    logs: str = "logs"

    def config(self, pack: str, ext: str) -> str:
        return f"{self.root}/{pack}/{pack}{ext}"

    def keys(self, pack: str) -> str:
        return f"{self.root}/{pack}/{KEYS}"

    def started(self, pack: str) -> str | None:
        """What shows that ``pack`` has started training: its first segment record or run attempt (every
        run of a segment leaves one, failed or not); None before. A checkpoint folder is no evidence: it may
        hold another run's checkpoints (a fine-tune's source, a shared folder)."""
        folder = os.path.join(glob.escape(self.root), pack, SEGMENTS)
        found = sorted(glob.glob(f"{folder}/*.json") + glob.glob(f"{folder}/{ATTEMPTS}/*.json"))
        return found[0] if found else None

    def record(self, pack: str, k: int | str) -> str:
        return f"{self.root}/{pack}/{SEGMENTS}/{k}.json"

    def records_of(self, pack: str) -> list[str]:
        """The segment records a pack has on disk, sorted by name."""
        return sorted(glob.glob(os.path.join(glob.escape(f"{self.root}/{pack}/{SEGMENTS}"), "*.json")))

    def evaluation(self, pack: str, k: int | str) -> str:
        return f"{self.root}/{pack}/eval/{k}.json"

    def retention(self, pack: str, k: int | str) -> str:
        return f"{self.root}/{pack}/retention/{k}.json"

    def done(self, pack: str) -> str:
        return f"{self.root}/{pack}/{DONE}"

    def data_cache(self, pack: str) -> str:
        """The record of ``pack``'s Megatron-LM index caches, built before its first segment."""
        return f"{self.root}/{pack}/{DATA_CACHE}.json"

    def file(self, name: str) -> str:
        """A file of the whole run (``CONFIGS_CSV``, ``LOSS_CSV``, ...)."""
        return f"{self.root}/{name}"

    def import_checkpoint(self, trainer: str) -> str:
        """Where ``train.init_from.hf`` is converted to for ``trainer`` (``neox`` or ``megatron``): the run's
        ``finetune_from``, a step-0 checkpoint folder as that trainer names it."""
        return f"{self.root}/import/{IMPORT_FOLDERS[trainer]}"

    @property
    def import_check(self) -> str:
        return f"{self.root}/import/import.json"

    def export(self, name: str) -> str:
        """The Hugging Face folder of export ``name`` (a pack's name, or ``step{N}``)."""
        return f"{self.root}/export/{name}"

    def export_check(self, name: str) -> str:
        return f"{self.root}/export/{name}.json"

    @property
    def detach_state(self) -> str:
        return f"{self.root}/detach/chain.json"

    @property
    def detach_flag(self) -> str:
        """Snakemake's mark that the detached chain was submitted (removed once the run succeeded)."""
        return f"{self.root}/detach/submitted"

    def records(self, checkpoints: str | None = None) -> list[str]:
        """Every training record, sorted (none before anything trained): under the train folder, and the
        reference trainer's beside the run's checkpoint folder ``checkpoints`` (default: the train folder's
        ``checkpoints``, so beside them is the train folder)."""
        beside = os.path.dirname(os.path.normpath(checkpoints)) if checkpoints else self.root
        found = [os.path.join(glob.escape(self.root), pattern) for pattern in RECORD_PATTERNS]
        found += [os.path.join(glob.escape(beside), pattern) for pattern in REFERENCE_PATTERNS]
        return sorted({p for pattern in found for p in glob.glob(pattern)})

    def stamps(self, checkpoints: str | None = None) -> str:
        """Each record with its modification time, one string: what the training charts depend on (not the
        records as inputs: those would put their training jobs into every DAG that makes the report)."""
        return " ".join(f"{p}@{os.stat(p).st_mtime_ns}" for p in self.records(checkpoints))

    def log(self, name: str) -> str:
        """A log of the whole run (``configs``, ``curve``, ``detach``, ``status``) or ``{pack}_config``."""
        return f"{self.logs}/train/{name}.log"

    def step_log(self, pack: str, step: str, k: int | str | None = None) -> str:
        """A pack's step log: ``segment``, ``eval``, ``retention``, ``after`` (with ``k``) or ``done``."""
        return f"{self.logs}/train/{pack}/{step}" + ("" if k is None else f"_{k}") + ".log"


def attempt(record: str, segment: int, stamp: str, pid: int) -> str:
    """Where a run of a segment leaves its record, beside the segment record ``record``."""
    return os.path.join(os.path.dirname(record), ATTEMPTS, f"{segment}.{stamp}.{pid}.json")


def attempts_of(record: str, segment: int) -> list[str]:
    """Every run's record of segment ``segment`` (whose record is ``record``)."""
    folder = os.path.join(glob.escape(os.path.dirname(record)), ATTEMPTS)
    return glob.glob(os.path.join(folder, f"{segment}.*.json"))


def finetune_off(record: str, segment: int, ext: str) -> str:
    """The copy of the pack's config (``ext``: its suffix) with ``finetune`` off that a segment writes beside
    its record once a fine-tuning run has its own checkpoint."""
    return os.path.join(os.path.dirname(record), f".{segment}.finetune-off{ext}")


def kind_of(path: str) -> tuple[str, str, str] | None:
    """A record path's ``(kind, pack, trainer)``: kind ``record`` (a segment's) or ``attempt`` (a run's),
    trainer ``slurm`` or ``reference``; ``None`` for other files."""
    parts = path.split(os.sep)
    if not path.endswith(".json") or len(parts) < 3:
        return None
    if parts[-2] == SEGMENTS:
        reference = len(parts) >= 4 and parts[-4] == REFERENCE
        return "record", parts[-3], REFERENCE if reference else "slurm"
    if parts[-3:-1] == [SEGMENTS, ATTEMPTS]:
        return "attempt", parts[-4], "slurm"
    return None


def reference_run(save_parent: str, name: str) -> str:
    """The reference trainer's folder of its own metrics for run ``name``, beside its checkpoints."""
    return os.path.join(save_parent, REFERENCE, name)


def reference_segments(run_dir: str) -> str:
    """The reference trainer's segment records in its run folder."""
    return os.path.join(run_dir, SEGMENTS)
