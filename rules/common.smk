"""Paths and lookups shared by the rules: constants, the config checked up front, and input functions
(`get_*`) passing Snakemake's checkpoints and wildcards as plain values to the package, which holds the logic.
How the DAG stays incremental and linear in the shard count: docs/reruns.md and docs/scale.md."""

import json
import math
import re
import shlex

from snakemake.exceptions import WorkflowError

from workflow_scripts import inputs
from workflow_scripts.core import batches, lists, naming, train_layout
from workflow_scripts.core.cli import UserError
from workflow_scripts.core.runtime import set_progress_interval, show_when_done, use_this_interpreter, write_list
from workflow_scripts.core.versioned import per_version
from workflow_scripts.datapacks import pack_index
from workflow_scripts.dedup.settings import assignment_waits, pair_files
from workflow_scripts.report import layout as report_layout
from workflow_scripts.tokens import kinds
from workflow_scripts.train.chain import ChainError
from workflow_scripts.train import job_request, launch_env
from workflow_scripts.train.hf import start as hf_start
from workflow_scripts.train.rule_inputs import TrainInputs
from workflow_scripts.train.settings import TrainSettings, resolved, trained_keys

use_this_interpreter(workflow.basedir)
set_progress_interval(config["progress_interval"])

# Jobs run `python -m workflow_scripts COMMAND` (= `snakepack COMMAND`) with the interpreter that runs Snakemake.
OUT = config["output_root"].rstrip("/")
LOGS = config["log_root"].rstrip("/")
BENCH = f"{OUT}/benchmarks"  # Snakemake's own time and memory record of each heavy job
SAMPLE_DIR = f"{OUT}/sample"
SHARDS = f"{OUT}/shards"
SHARD_EXT = naming.shard_suffix(config["ingest"]["compress"])
DEDUP = f"{OUT}/dedup"
DEDUP_WORK = f"{DEDUP}/_work"
ASSIGN = f"{DEDUP_WORK}/assign"  # the cluster step's per-shard store (docs/reruns.md)
CORPUS = DEDUP if config["dedup"]["enabled"] else SHARDS  # what the tokenizer reads
TOK = f"{OUT}/tokenized"
DATAPACKS = f"{OUT}/datapacks"
MERGED = f"{OUT}/merged"
TRAIN = f"{OUT}/train"
TRAIN_LAYOUT = train_layout.TrainLayout(TRAIN, LOGS)  # the train tree's names (core/train_layout.py)
TRAIN_CONFIG_EXT = ".yml" if config["train"]["trainer"] == "neox" else ".args"
CHECKPOINTS = config["train"]["checkpoints_dir"] or f"{TRAIN}/checkpoints"
INIT_HF = config["train"].get("init_from", {}).get("hf")  # a Hugging Face model to start from
SPECS = f"{DATAPACKS}/_specs"  # the plan's per-pack spec files (docs/reruns.md)
REPORT = f"{OUT}/report"  # the charts of `snakemake --report` (rules/report.smk)
DEDUP_ARGS, TOKENIZER_ARGS, TOKENIZE_ARGS = inputs.stage_args(config)  # each stage's settings as options

try:  # everything knowable from the config fails here, in one line naming the key, before any job runs
    TOKENIZER_FILES = kinds.from_config(config["tokenizer"], f"{OUT}/tokenizer")  # given, or trained
    TOKENIZER = TOKENIZER_FILES.model
    TOKENIZER_MERGES = [TOKENIZER_FILES.merges] if TOKENIZER_FILES.merges else []  # GPT-2's second file
    TOKENIZER_OPTS = shlex.join(kinds.options(TOKENIZER_FILES, config["tokenizer"]["type"]))  # beyond the model
    GROUPS, IMPORTS = inputs.resolve(config, SAMPLE_DIR)
    config["train"] = resolved(hf_start.resolve(config["train"], TRAIN_LAYOUT))  # init_from.hf: the start; checks
    if INIT_HF and not workflow.remote_exec:  # the model's tokenizer is the data's, or no job runs
        hf_start.check_tokenizer(INIT_HF, TOKENIZER_FILES)
except UserError as error:
    raise WorkflowError(f"config: {error}") from None

PER_BATCH = config["shards_per_job"]  # a per-shard stage's job covers this many shards of a group
BATCH = "{group}.{batch}"  # a batch job's name: its group and batch number (core/batches.py)
SHARD_T = "{shard}"  # a member's shard name in the templates of `snakepack batch` (workflow_scripts/batch.py)
# The lists of every shard (core/lists.py), each beside what it lists; the list_chunk rule finds one by its folder.
LISTS = lists.Lists(f"{DEDUP_WORK}/sig", CORPUS, TOK, config["dedup"]["enabled"], PER_BATCH, tuple(IMPORTS))
LIST_KIND = {folder.removeprefix(f"{OUT}/"): kind for kind, folder in LISTS.folders.items()}
TRAIN_INPUTS = TrainInputs.of(config, TRAIN_LAYOUT, MERGED, TRAIN_CONFIG_EXT, CHECKPOINTS)  # train/rule_inputs.py
# Each report section's chart captions (its inputs) and files (its outputs), by section (report/layout.py).
REPORT_CAPTIONS, REPORT_OUTPUTS = report_layout.rule_files(workflow.basedir, REPORT, report, config)


def group_shards(group):
    """A group's ingested shard files, once its ingest checkpoint ran (listed once per folder version)."""
    folder = checkpoints.ingest.get(group=group).output[0]
    return per_version(folder, batches.group_shards, folder)


def get_batch_shards(wildcards):
    """The ingested shards of a batch job (a group's batches are split once per version of its folder)."""
    folder = checkpoints.ingest.get(group=wildcards.group).output[0]
    return list(per_version(folder, batches.group_batches, folder, PER_BATCH).get(int(wildcards.batch), []))


def runtime_by_size(mb_per_minute):
    """A batch job's time limit in minutes, from its shards' size (core/batches.py)."""
    return lambda wildcards, threads: batches.runtime_minutes(get_batch_shards(wildcards), mb_per_minute, threads)


def threads_by_size(threads, mb_per_thread):
    """A batch job's threads, from its shards' size (core/batches.py)."""
    return lambda wildcards: batches.threads_for(get_batch_shards(wildcards), threads, mb_per_thread)


def batch_args(stage, **templates):
    """`snakepack batch`'s options for a batch job of the ``stage`` folder, from the wildcards (core/batches.py)."""
    return lambda wildcards: batches.job_args(stage, SHARDS, wildcards.group, wildcards.batch, PER_BATCH, **templates)


def get_batch_assignments(wildcards):
    """A filter batch's dedup assignments, once the cluster step ran (dedup/settings.py)."""
    checkpoints.dedup_cluster.get()
    return assignment_waits(ASSIGN, get_batch_shards(wildcards), f"{DEDUP_WORK}/cluster_summary.json")


def get_tokenize_corpus(wildcards):
    """What a tokenize batch reads: its filter batch's manifest (the kept shards are no declared output)."""
    dedup = config["dedup"]["enabled"]
    return batches.manifest(DEDUP, wildcards.group, wildcards.batch) if dedup else get_batch_shards(wildcards)


def list_entries(kind):
    """(what each line of list ``kind`` waits for, its lines), once known: in a cluster job, for its listers."""
    cluster_rules = {job.rulename for job in workflow.dag_settings.target_jobs} if workflow.remote_exec else None
    if not lists.needed(kind, cluster_rules):
        return [], []
    if kind != "signatures" and GROUPS and config["dedup"]["enabled"]:
        checkpoints.dedup_cluster.get()  # the tokenizer reads the deduplicated shards (same names)
    return LISTS.entries(kind, tuple(group_shards(group) for group in GROUPS))


def get_list_chunks(kind):
    return lists.chunk_files(LISTS.folders[kind], len(list_entries(kind)[1]))


def get_list_chunk_inputs(wildcards):
    """What a list chunk waits for: the batch job (or imported prefix) of each of its lines, once."""
    return lists.chunk_waits(list_entries(LIST_KIND[wildcards.listed])[0], wildcards.chunk)


def planned_packs(kind="packs"):
    """The plan's packs (or ``kind="validation"`` packs) by name, from its index (read once per version)."""
    plan_json = str(checkpoints.plan.get().output.json)
    return per_version(plan_json, pack_index.read, SPECS, plan_json)[kind]


def get_pack_spec(wildcards):
    """A pack's spec file, once the plan ran (rewritten only when what the pack would hold changed)."""
    checkpoints.plan.get()
    return f"{SPECS}/{wildcards.pack}.json"


def get_merged_packs(wildcards):
    return [f"{MERGED}/{p}/{p}.{e}" for p in [*planned_packs(), *planned_packs("validation")] for e in ("bin", "idx")]  # a pack is both


def pack_summary(pack):
    """A pack's place in the chain (iterations, offset, cadence, segments), once its trainer config exists."""
    return TRAIN_INPUTS.pack(str(checkpoints.train_config.get(pack=pack).output.record))


def train_chain():
    """The training chain, once every pack's trainer config exists, after the Slurm plugin's MPI check."""
    try:
        launch_env.check_mpi_tasks(config["train"], workflow.resource_settings.overwrite_resources)
    except UserError as error:
        raise WorkflowError(f"config: {error}") from None
    return TRAIN_INPUTS.chain(tuple(pack_summary(p) for p in planned_packs()))


def get_segment_inputs(wildcards):
    """A segment's config, predecessor and data (ancient(): the same data remade does not retrain)."""
    pack_summary(wildcards.pack)  # first: in a Slurm job, the checkpoint its parameters read comes first
    validation = planned_packs("validation")
    try:
        return TRAIN_INPUTS.segment(train_chain(), wildcards.pack, int(wildcards.segment), validation, ancient)
    except ChainError as error:
        raise WorkflowError(str(error)) from None


def exports():
    """Each Hugging Face export's name and global step (train.export), once the packs' configs exist."""
    try:
        return TRAIN_INPUTS.exports(train_chain())
    except UserError as error:
        raise WorkflowError(str(error)) from None


def get_export_inputs(wildcards):
    """An export waits for the pack that reaches its step, and that pack's config."""
    return TRAIN_INPUTS.export_inputs(train_chain(), exports()[wildcards.export])


def export_checkpoint(wildcards):
    return TRAIN_INPUTS.checkpoint(exports()[wildcards.export])


def report_pages(wildcards=None):
    """The report's pages: plan and data, and training once it has records."""
    return [f"{REPORT}/{s}/index.html" for s in ["plan", "data", *(["training"] if TRAIN_LAYOUT.records(CHECKPOINTS) else [])]]
