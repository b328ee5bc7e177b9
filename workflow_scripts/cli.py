"""``snakepack``: one command with a subcommand per tool (the workflow's rules call the same commands).

Each subcommand is a stage module's ``main``; it is imported only when run, so ``snakepack --help`` is quick.
User errors print ``snakepack SUBCOMMAND: error: ...`` and exit 2; anything else keeps its traceback.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from typing import NamedTuple, NoReturn

from workflow_scripts.core.cli import UserError, run


class Command(NamedTuple):
    module: str
    function: str
    help: str
    quick_exit: bool = False  # nothing to clean up: its process ends without the interpreter's teardown


def _c(module: str, help: str, function: str = "main", quick_exit: bool = False) -> Command:
    return Command(f"workflow_scripts.{module}", function, help, quick_exit)


COMMANDS: dict[str, Command] = {
    "sample": _c("ingest.sample", "write the embedded sample delivery (raw files and manifest)"),
    "ingest": _c("ingest.shards", "raw files of one group -> uniform jsonl shards, quarantine, stats"),
    "batch": _c("batch", "run a per-shard command over a batch of a group's shards, skipping current ones"),
    "dedup": _c("dedup.local", "every dedup step locally over a set of shards (standalone)"),
    "dedup-params": _c("dedup.params", "dedup step 0: the resolved parameters (LSH shape, permutations)"),
    "dedup-signatures": _c("dedup.signatures", "dedup step 1: MinHash signatures of one shard"),
    "dedup-exact": _c("dedup.exact", "dedup step 2: exact-duplicate pairs of one hash partition"),
    "dedup-bands": _c("dedup.bands", "dedup step 2: LSH candidate pairs of one band group and partition"),
    "dedup-cluster": _c("dedup.cluster", "dedup step 3: clusters of all pairs, one assignment per shard"),
    "dedup-filter": _c("dedup.filter", "dedup step 4: one shard's kept and removed documents"),
    "dedup-report": _c("dedup.report", "dedup step 5: the stage's stats.json and report.json"),
    "train-tokenizer": _c(
        "tokens.train_tokenizer",
        "train a tokenizer on shards (SentencePiece, or a byte-level BPE tokenizer.json)",
    ),
    "tokenize": _c("tokens.encode", "one shard -> Megatron {prefix}_text_document.bin/.idx", quick_exit=True),
    "import-tokenized": _c(
        "tokens.imported", "verify a .bin/.idx made elsewhere and link it for the count stage"
    ),
    "inspect": _c("tokens.inspection", "show tokenized documents as text, pieces and ids"),
    "count": _c("tokens.count", "count-named links (_dc=_sc=_tc=) and the data signature"),
    "stats": _c("core.stage_stats", "a stage's stats.json from its jobs' stats (checked to add up)"),
    "mixture": _c("datapacks.mixture", "a named mixture -> sampling probabilities and trainer paths"),
    "plan": _c("datapacks.plan_files", "the datapack plan: plan.json, plan.csv, plan.md"),
    "pack": _c("datapacks.packer", "write one datapack's .bin/.idx from its spec and the tokenized sources"),
    "train-config": _c(
        "train.configs.write", "one pack's trainer config (GPT-NeoX YAML or Megatron-LM arguments)"
    ),
    "train-reference": _c("train.reference.train", "train one pack's GPT-NeoX config (torch + DeepSpeed)"),
    "hf-import": _c("train.hf.import_", "a Hugging Face LLaMA folder as a GPT-NeoX checkpoint to start from"),
    "hf-export": _c("train.hf.export", "a LLaMA-shaped GPT-NeoX checkpoint as a Hugging Face folder"),
    "finetune-start": _c("train.finetune", "a checkpoint folder starting from a checkpoint (seed 003)"),
    "train-summary": _c("train.summary", "the packs' training table (iterations, cadence, segments)"),
    "train-data-cache": _c(
        "train.data_cache", "a Megatron-LM pack's dataset index caches, built before its first segment"
    ),
    "train-segment": _c("train.segment", "one training segment of a pack (a Slurm job) and its record"),
    "train-eval": _c("train.checkpoint_eval", "evaluate the checkpoint a segment saved"),
    "train-prune": _c("train.retention", "the checkpoint retention policy after a segment"),
    "train-finished": _c("train.finished", "check from the checkpoint that a pack reached its last step"),
    "train-curve": _c("train.curve", "the run's loss curve and its segment and evaluation tables"),
    "train-detach": _c("train.detach", "submit what is left of the training chain as sbatch jobs"),
    "launch-env": _c("train.launch_env", "a Slurm job's nodes, tasks and hostfile, from Slurm, for a launch"),
    "status": _c("train.status", "where the training stands: segments, Slurm, s/iter, ETA, disk, stalls"),
    "audit-packs": _c("datapacks.audit", "every document of every source accounted for by the plan's packs"),
    "lineage": _c("lineage.query", "the documents a pack's steps read; the steps that read a document"),
    "lineage-index": _c(
        "lineage.hash_index", "the index of every source's content hashes that lineage reads"
    ),
    "report": _c("report.build", "the HTML report's plan or data section: charts, tables and a page"),
    "report-training": _c("report.training", "the HTML report's training section, from the trainers' files"),
    "merge": _c("core.dataset_commands", "merge .bin/.idx prefixes in order", "merge_main"),
    "verify": _c("core.dataset_commands", "check every .bin/.idx invariant", "verify_main"),
    "info": _c("core.dataset_commands", "counts and dtype of a .bin/.idx prefix", "info_main"),
}


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser: it lists the subcommands; each parses its own options."""
    parser = argparse.ArgumentParser(
        prog="snakepack",
        description="Raw text shards -> training-ready LLM datapacks. `snakepack COMMAND --help` for each.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, command in COMMANDS.items():
        sub.add_parser(name, help=command.help, add_help=False)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``snakepack COMMAND ARGS...``."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] not in COMMANDS:
        build_parser().parse_args(args)  # prints the usage or the error, and exits
    name, rest = args[0], args[1:]
    command = COMMANDS[name]
    prog = f"snakepack {name}"
    sys.argv[0] = prog  # argparse's default prog in the stage's parser
    if not command.module.startswith("workflow_scripts.train."):  # torch's commands keep their BLAS threads
        # no other command uses numpy's BLAS, whose idle pool spins for a tenth of a CPU second at import,
        # beside the command's own threads
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    try:
        entry = getattr(importlib.import_module(command.module), command.function)
    except UserError as err:  # a compiled extension not built (core.compiled)
        print(f"{prog}: error: {err}", file=sys.stderr)
        return 2
    return run(prog, entry, rest)


def entry() -> NoReturn:
    """The process's entry point (``snakepack``, ``python -m workflow_scripts``): ``main``, its status the
    exit status. A ``quick_exit`` command that succeeded ends its process at once, its output flushed: the
    interpreter's teardown of a tokenize run (its tokenizers, arrays and modules) takes 40 ms."""
    args = sys.argv[1:]
    status = main(args)
    if status == 0 and args and args[0] in COMMANDS and COMMANDS[args[0]].quick_exit:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    sys.exit(status)


if __name__ == "__main__":
    entry()
