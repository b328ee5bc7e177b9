"""Paths, settings and input functions shared by the rules: short lookups over the package's logic (cheap,
pure Python; no data is read at parse time but the small manifests of finished checkpoints). How the DAG
stays incremental and linear in the shard count: docs/reruns.md and docs/scale.md.
"""

import functools
import json
import math
import re
import shlex

from snakemake.exceptions import WorkflowError

from workflow_scripts import inputs
from workflow_scripts.core import batches, lists, naming, train_layout
from workflow_scripts.core.cli import UserError
from workflow_scripts.core.runtime import set_progress_interval, show_when_done, use_this_interpreter, write_list
from workflow_scripts.core.settings import from_config, to_args
from workflow_scripts.core.train_layout import TrainLayout
from workflow_scripts.datapacks import pack_index
from workflow_scripts.dedup.settings import DedupSettings, pair_files
from workflow_scripts.report import layout as report_layout
from workflow_scripts.tokens import kinds
from workflow_scripts.tokens.settings import TokenizerSettings, TokenizeSettings
from workflow_scripts.train.chain import Chain, ChainError, Pack
from workflow_scripts.train import checkpoint_dirs, job_request
from workflow_scripts.train.hf import start as hf_start
from workflow_scripts.train.settings import TrainSettings, trained_keys

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
TRAIN_LAYOUT = TrainLayout(TRAIN, LOGS)  # the train tree's names (core/train_layout.py)
TRAIN_CONFIG_EXT = ".yml" if config["train"]["trainer"] == "neox" else ".args"
CHECKPOINTS = config["train"]["checkpoints_dir"] or f"{TRAIN}/checkpoints"
INIT_HF = config["train"].get("init_from", {}).get("hf")  # a Hugging Face model to start from
SPECS = f"{DATAPACKS}/_specs"  # the plan's per-pack spec files (docs/reruns.md)
REPORT = f"{OUT}/report"  # the charts of `snakemake --report` (rules/report.smk)

# Each stage's settings as its command's options (threads come from the rule's `threads:`: no rerun).
DEDUP_ARGS = shlex.join(to_args(from_config(DedupSettings, config["dedup"], seed=config["seed"])))
TOKENIZER_ARGS = shlex.join(to_args(from_config(TokenizerSettings, config["tokenizer"], seed=config["seed"])))
TOKENIZE_ARGS = shlex.join(to_args(from_config(TokenizeSettings, config["tokenize"]), exclude=("threads",)))


try:  # everything knowable from the config fails here, in one line naming the key, before any job runs
    TOKENIZER_FILES = kinds.from_config(config["tokenizer"], f"{OUT}/tokenizer")  # given, or trained
    TOKENIZER = TOKENIZER_FILES.model
    TOKENIZER_MERGES = [TOKENIZER_FILES.merges] if TOKENIZER_FILES.merges else []  # GPT-2's second file
    TOKENIZER_OPTS = shlex.join(kinds.options(TOKENIZER_FILES, config["tokenizer"]["type"]))  # beyond the model
    GROUPS, IMPORTS = inputs.resolve(config, SAMPLE_DIR)
    config["train"] = hf_start.resolve(config["train"], TRAIN_LAYOUT)  # init_from.hf: its import is the start
    if INIT_HF and not workflow.remote_exec:  # the model's tokenizer is the data's, or no job runs
        hf_start.check_tokenizer(INIT_HF, TOKENIZER_FILES)
except UserError as error:
    raise WorkflowError(f"config: {error}") from None


PER_BATCH = config["shards_per_job"]  # a per-shard stage's job covers this many shards of a group
BATCH = "{group}.{batch}"  # a batch job's name: its group and batch number (core/batches.py)
SHARD_T = "{shard}"  # a member's shard name in the templates of `snakepack batch` (workflow_scripts/batch.py)
# A batch member's files, as templates (``{group}`` and ``{shard}``: see batch_args).
SHARD_FILE = f"{SHARDS}/{{group}}/{SHARD_T}{SHARD_EXT}"
SIG_FILE = f"{DEDUP_WORK}/sig/{SHARD_T}.sig"
ASSIGN_FILE = f"{ASSIGN}/{SHARD_T}.assign.json"
KEPT_FILE = f"{DEDUP}/{{group}}/{SHARD_T}{SHARD_EXT}"
REMOVED_FILE = f"{DEDUP}/{{group}}/removed/{SHARD_T}{SHARD_EXT}"
FILTER_STATS = f"{DEDUP_WORK}/stats/{SHARD_T}.stats.json"
CORPUS_FILE = f"{CORPUS}/{{group}}/{SHARD_T}{SHARD_EXT}"
TOKENIZED_EXTS = (".bin", ".idx", ".stats.json", ".quarantine.jsonl")


def group_folder(group):
    """A group's ingest folder and its version (mtime), once its ingest checkpoint ran: the caches' key."""
    outdir = checkpoints.ingest.get(group=group).output[0]
    return outdir, os.stat(outdir).st_mtime_ns


def group_shards(group):
    """A group's ingested shard files (listed once per version of its folder)."""
    return _shard_files(*group_folder(group))


@functools.cache
def _shard_files(outdir, mtime):
    return tuple(f"{outdir}/{name}" for name in batches.shard_files(outdir))


def get_shards(wildcards=None):
    """Every ingested shard, known once its group's ingest checkpoint ran."""
    return [shard for group in GROUPS for shard in group_shards(group)]


def get_batch_shards(wildcards):
    """The ingested shards of a batch job (a group's batches are split once per version of its folder)."""
    return list(_group_batches(*group_folder(wildcards.group)).get(int(wildcards.batch), []))


@functools.cache
def _group_batches(outdir, mtime):
    return batches.by_batch(_shard_files(outdir, mtime), PER_BATCH)


def batch_file(stage_dir, shard):
    """The manifest of the batch job of ``stage_dir`` that covers ``shard``."""
    return batches.manifest(stage_dir, naming.shard_group(shard), batches.batch_of(shard, PER_BATCH))


def batch_bytes(wildcards):
    return sum(os.stat(shard).st_size for shard in get_batch_shards(wildcards))


def runtime_by_size(mb_per_minute):
    """A batch job's time limit in minutes, from its shards' size at a conservative one-core rate, shared
    by its threads (its members run side by side)."""
    return lambda wildcards, threads: 1 + math.ceil(batch_bytes(wildcards) / 2**20 / mb_per_minute / threads)


def threads_by_size(threads, mb_per_thread):
    """A batch job's threads: one per ``mb_per_thread`` MB of its shards, ``threads`` at most (a small
    batch leaves the other cores to its neighbours; no output depends on it)."""
    return lambda wildcards: max(1, min(threads, math.ceil(batch_bytes(wildcards) / 1e6 / mb_per_thread)))


def batch_args(stage_dir, inputs, outputs, member_log, command):
    """The options of `snakepack batch` for a batch job of ``stage_dir``: its shards, state and manifest,
    and each member's inputs, outputs, log and command as templates (``{group}`` filled in here, ``{shard}``
    by the member). From the wildcards alone: Snakemake then reruns the job when they change."""

    def args(wildcards):
        fill = lambda items: [item.replace("{group}", wildcards.group) for item in items]
        manifest = batches.manifest(stage_dir, wildcards.group, wildcards.batch)
        state = batches.manifest(stage_dir, wildcards.group, wildcards.batch, ".state")
        options = ["--shards-dir", f"{SHARDS}/{wildcards.group}", "--batch", wildcards.batch]
        options += ["--per-batch", str(PER_BATCH), "--manifest", manifest, "--state", state]
        options += ["--member-log", *fill([member_log])]
        options += [x for path in fill(inputs) for x in ("--input", path)]
        options += [x for path in fill(outputs) for x in ("--output", path)]
        return shlex.join([*options, "--", *fill(command)])

    return args


def assignment(shard):
    """Where the cluster step keeps a shard's dedup assignment."""
    return f"{ASSIGN}/{naming.shard_stem(shard)}.assign.json"


def get_batch_assignments(wildcards):
    """A batch's dedup assignments once the cluster step ran (it rewrites one only when the shard's
    outcome changes); while some shard has none yet, the batch waits for the cluster summary too."""
    checkpoints.dedup_cluster.get()
    paths = [assignment(shard) for shard in get_batch_shards(wildcards)]
    found = [path for path in paths if os.path.exists(path)]
    return found if len(found) == len(paths) else [*found, f"{DEDUP_WORK}/cluster_summary.json"]


def list_entries(kind):
    """(the files a chunk of ``kind`` waits for, the lines its list holds), a pair for every shard (a batch's
    manifest, repeated for each of its shards: a chunk keeps one of each): in a cluster job
    only for the rules that list them (upstream gathers are done there; 100,000 shards would cost every job).
    Built once per version of the shard folders: every chunk asks for it (100 chunks of 100,000 shards)."""
    listing = ("list_chunk", "signatures_list") if kind == "signatures" else ("list_chunk", "corpus_list", "tokenized_list")
    if workflow.remote_exec and not any(t.rulename in listing for t in workflow.dag_settings.target_jobs):
        return [], []
    if kind != "signatures" and GROUPS and config["dedup"]["enabled"]:
        checkpoints.dedup_cluster.get()  # the tokenizer reads the deduplicated shards (same names)
    return _list_entries(kind, tuple(group_shards(group) for group in GROUPS))


@functools.cache
def _list_entries(kind, groups):  # groups: each group's cached shard tuple (a new tuple per folder version)
    shards = [shard for group in groups for shard in group]
    if kind == "signatures":
        signatures = [f"{DEDUP_WORK}/sig/{naming.shard_stem(s)}.sig" for s in shards]
        return [batch_file(f"{DEDUP_WORK}/sig", s) for s in shards], signatures
    corpus = [f"{CORPUS}/{naming.shard_group(s)}/{os.path.basename(s)}" for s in shards]
    if kind == "corpus":
        return ([batch_file(DEDUP, s) for s in shards] if config["dedup"]["enabled"] else corpus), corpus
    prefixes = [f"{TOK}/{naming.tokenized_prefix(n)}" for n in [*map(naming.shard_stem, corpus), *IMPORTS]]
    imported = [f"{p}.stats.json" for p in prefixes[len(shards) :]]
    return [*(batch_file(TOK, s) for s in shards), *imported], prefixes


def get_list_chunk_inputs(wildcards):
    """What a list chunk waits for: the batch job (or imported prefix) of each of its lines, once."""
    waits = lists.chunk_of(list_entries(LIST_KIND[wildcards.listed])[0], wildcards.chunk)
    return list(dict.fromkeys(waits))


def get_tokenize_corpus(wildcards):
    """What a tokenize batch reads: its filter batch's manifest (the kept shards are not declared outputs),
    or the ingested shards without dedup."""
    if config["dedup"]["enabled"]:
        return batches.manifest(DEDUP, wildcards.group, wildcards.batch)
    return get_batch_shards(wildcards)


# A list's chunks live beside what it lists (docs/reruns.md): deleting a stage's directory deletes its lists.
LISTED = {"signatures": f"{DEDUP_WORK}/sig", "corpus": CORPUS, "tokenized": TOK}
LIST_KIND = {path.removeprefix(f"{OUT}/"): kind for kind, path in LISTED.items()}


def get_list_chunks(kind):
    return [f"{LISTED[kind]}/_lists/{i}.txt" for i in range(lists.chunk_count(len(list_entries(kind)[1])))]


@functools.cache
def _read_json(path, mtime):
    with open(path) as f:
        return json.load(f)


def read_pack_index():
    """The plan's pack index (the packs' names), parsed once per version of the file."""
    path = str(checkpoints.plan.get().output.json)
    return _read_pack_index(path, os.stat(path).st_mtime_ns)


@functools.cache
def _read_pack_index(plan_json, mtime):
    return pack_index.read(SPECS, plan_json)


def planned_packs():
    return read_pack_index()["packs"]


def validation_packs():
    return read_pack_index()["validation"]


def get_pack_spec(wildcards):
    """A pack's spec file, once the plan ran (rewritten only when what the pack would hold changed)."""
    checkpoints.plan.get()
    return f"{SPECS}/{wildcards.pack}.json"


def get_previous_state(wildcards):
    """The state file of the pack before this one (nothing for the first pack, nor a validation pack)."""
    packs = planned_packs()
    index = packs.index(wildcards.pack) if wildcards.pack in packs else 0
    return [f"{DATAPACKS}/{packs[index - 1]}/state.json"] if index else []


def get_merged_packs(wildcards):
    return [f"{MERGED}/{p}/{p}.bin" for p in [*planned_packs(), *validation_packs()]]  # the packs' targets


def pack_summary(pack):
    """A pack's place in the chain (iterations, offset, cadence, segments), once its trainer config exists."""
    path = str(checkpoints.train_config.get(pack=pack).output.record)
    return Pack.from_summary(path, _read_json(path, os.stat(path).st_mtime_ns)["summary"])


def train_chain():
    """The training chain, once every pack's trainer config exists (the train_config checkpoints)."""
    return _chain(tuple(pack_summary(p) for p in planned_packs()))


@functools.cache
def _chain(packs):
    sft = config["tokenize"]["mode"] == "sft"
    return Chain.build(packs, TrainSettings.from_config(config["train"]), sft, TRAIN_LAYOUT)


def get_segment_inputs(wildcards):
    """A segment's config, predecessor and data (ancient(): the same data remade does not retrain)."""
    pack_summary(wildcards.pack)  # first: in a Slurm job, the checkpoint its parameters read comes first
    try:
        previous = train_chain().waits_for(wildcards.pack, int(wildcards.segment))
    except ChainError as error:
        raise WorkflowError(str(error)) from None
    data = [ancient(f"{MERGED}/{p}/{p}.{e}") for p in [wildcards.pack, *validation_packs()] for e in ("bin", "idx")]
    start = [ancient(TRAIN_LAYOUT.file(train_layout.FINETUNE_START))] if config["train"]["finetune_from"] else []
    return {"pack_keys": TRAIN_LAYOUT.keys(wildcards.pack), "previous": previous, "data": data, "start": start}


def exports():
    """Each Hugging Face export's name and global step (train.export), once the packs' configs exist."""
    chain, train = train_chain(), TrainSettings.from_config(config["train"])
    packs = {p.name: p.end for p in chain.packs}
    try:
        return hf_start.export_steps(packs, train.export_packs, train.export_milestones, train.milestones)
    except UserError as error:
        raise WorkflowError(str(error)) from None


def get_export_inputs(wildcards):
    """An export waits for the pack that reaches its step (retention keeps pack ends and milestones)."""
    step = exports()[wildcards.export]
    pack = next(p for p in train_chain().packs if p.end >= step)
    return {"done": TRAIN_LAYOUT.done(pack.name), "config": TRAIN_LAYOUT.config(pack.name, TRAIN_CONFIG_EXT)}


def export_checkpoint(wildcards):
    return checkpoint_dirs.of(config["train"]["trainer"]).path(CHECKPOINTS, exports()[wildcards.export])


REPORT_CHARTS = report_layout.chart_names(bool(config["train"]["base_config"]), config["dedup"]["enabled"])


def report_captions(section):
    return report_layout.captions(workflow.basedir, section, REPORT_CHARTS[section])


def report_outputs(section):
    return report_layout.outputs(REPORT, section, REPORT_CHARTS[section], report_layout.marker(report, section))


def report_pages(wildcards=None):
    """The report's pages: plan and data, and training once it has records."""
    return [f"{REPORT}/{s}/index.html" for s in ["plan", "data", *(["training"] if TRAIN_LAYOUT.records() else [])]]
