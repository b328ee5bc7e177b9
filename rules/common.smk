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
from workflow_scripts.core import lists, naming, train_layout
from workflow_scripts.core.cli import UserError
from workflow_scripts.core.runtime import set_progress_interval, show_when_done, use_this_interpreter, write_list
from workflow_scripts.core.settings import from_config, to_args
from workflow_scripts.core.train_layout import TrainLayout
from workflow_scripts.dedup.settings import DedupSettings, pair_files
from workflow_scripts.tokens.settings import TokenizerSettings, TokenizeSettings
from workflow_scripts.train.chain import Chain, ChainError, Pack
from workflow_scripts.train.settings import TrainSettings, trained_keys

use_this_interpreter(workflow.basedir)
set_progress_interval(config["progress_interval"])

# Each job runs `python -m workflow_scripts COMMAND` (= `snakepack COMMAND`) with the interpreter that runs
# Snakemake (see runtime.py), so that Slurm jobs and conda environments use this checkout's package.

OUT = config["output_root"].rstrip("/")
LOGS = config["log_root"].rstrip("/")
BENCH = f"{OUT}/benchmarks"  # Snakemake's own time and memory record of each heavy job
SAMPLE_DIR = f"{OUT}/sample"
SHARDS = f"{OUT}/shards"
SHARD_EXT = naming.shard_suffix(config["ingest"]["compress"])
SHARD = naming.shard_name("{group}", "{split}")  # the shard name as wildcards
DEDUP = f"{OUT}/dedup"
DEDUP_WORK = f"{DEDUP}/_work"
ASSIGN = f"{DEDUP_WORK}/assign"  # the cluster step's per-shard store (see the module docstring)
# The tokenizer reads the deduplicated shards, or the ingested ones when dedup is off.
CORPUS = DEDUP if config["dedup"]["enabled"] else SHARDS
TOK = f"{OUT}/tokenized"
TOKENIZER = config["tokenizer"]["model"] or f"{OUT}/tokenizer/spm.model"
DATAPACKS = f"{OUT}/datapacks"
MERGED = f"{OUT}/merged"
TRAIN = f"{OUT}/train"
TRAIN_CONFIG_EXT = ".yml" if config["train"]["trainer"] == "neox" else ".args"
CHECKPOINTS = config["train"]["checkpoints_dir"] or f"{TRAIN}/checkpoints"
SPECS = f"{DATAPACKS}/_specs"  # the plan's per-pack spec files (see the module docstring)

# Each stage's settings, rendered as the options of its command (defaults from config/schema.yaml).
DEDUP_ARGS = shlex.join(to_args(from_config(DedupSettings, config["dedup"], seed=config["seed"])))
TOKENIZER_ARGS = shlex.join(to_args(from_config(TokenizerSettings, config["tokenizer"], seed=config["seed"])))
# Threads come from the rule's `threads:` (a change of them alone reruns nothing).
TOKENIZE_ARGS = shlex.join(to_args(from_config(TokenizeSettings, config["tokenize"]), exclude=("threads",)))


def expands(*rules):
    """Whether to list every shard for ``rules``: always in the main process; in a cluster job only for its
    own rule (upstream gathers are finished, and listing 100,000 shards there would cost every job).

    Asked while the DAG is built (the job's targets are not known yet while the Snakefile is parsed).
    """
    if not workflow.remote_exec:
        return True
    return any(t.rulename in rules for t in workflow.dag_settings.target_jobs)


try:  # everything knowable from the config fails here, in one line naming the key, before any job runs
    GROUPS, IMPORTS = inputs.resolve(config, SAMPLE_DIR)
except UserError as error:
    raise WorkflowError(f"config: {error}") from None


def group_shards(group):
    """The shard paths of a group, known once its ingest checkpoint ran."""
    outdir = checkpoints.ingest.get(group=group).output[0]
    pattern = naming.shard_file_pattern(group)
    return sorted(f"{outdir}/{name}" for name in os.listdir(outdir) if pattern.fullmatch(name))


def get_shards(wildcards=None):
    """Every ingested shard."""
    return [s for group in GROUPS for s in group_shards(group)]


def dedup_done():
    """Raise (and so wait) while the dedup_cluster checkpoint is pending; nothing to wait for without dedup."""
    if config["dedup"]["enabled"]:
        checkpoints.dedup_cluster.get()


def get_corpus_shards(wildcards=None):
    """The shards the tokenizer reads: deduplicated (same names) or as ingested."""
    if not expands("list_chunk", "corpus_list", "tokenized_list"):
        return []
    dedup_done()
    return [f"{CORPUS}/{naming.shard_group(s)}/{os.path.basename(s)}" for s in get_shards()]


def get_signatures(wildcards=None):
    if not expands("list_chunk", "signatures_list"):
        return []
    return [f"{DEDUP_WORK}/sig/{naming.shard_stem(s)}.sig" for s in get_shards()]


def assignment(wildcards):
    """Where the cluster step keeps a shard's dedup assignment."""
    return f"{ASSIGN}/{naming.shard_name(wildcards.group, wildcards.split)}.assign.json"


def get_assignment(wildcards):
    """A shard's own dedup assignment, once the cluster step ran (rewritten only when it changes).

    A shard the cluster step has not seen yet (a new one, after a partial run) waits for the cluster
    summary instead, which is newer than the shard's outputs once the cluster step ran.
    """
    dedup_done()
    path = assignment(wildcards)
    return path if os.path.exists(path) else f"{DEDUP_WORK}/cluster_summary.json"


def get_tokenized_prefixes(wildcards=None):
    """One `{shard}_text_document` prefix per shard, then one per imported prefix."""
    shards = [naming.shard_stem(s) for s in get_corpus_shards()] if GROUPS else []
    return [f"{TOK}/{naming.tokenized_prefix(name)}" for name in [*shards, *IMPORTS]]


def list_entries(kind):
    """(the files a chunk of ``kind`` waits for, the lines its list holds), for every shard."""
    if kind == "signatures":
        return get_signatures(), get_signatures()
    if kind == "corpus":
        return get_corpus_shards(), get_corpus_shards()
    prefixes = get_tokenized_prefixes()
    return [f"{p}.stats.json" for p in prefixes], prefixes


# Where each list's files are (under OUT); each list's chunks live there too, in _lists/: deleting the
# directory deletes its list, so a rerun makes the list again and, first, what it lists. (A list left behind
# would be up to date, and Snakemake remakes a missing file only for a job that runs.)
LISTED = {"signatures": f"{DEDUP_WORK}/sig", "corpus": CORPUS, "tokenized": TOK}
LIST_KIND = {path.removeprefix(f"{OUT}/"): kind for kind, path in LISTED.items()}


def get_list_chunks(kind):
    """The chunk lists that make up the list of ``kind``."""
    return [f"{LISTED[kind]}/_lists/{i}.txt" for i in range(lists.chunk_count(len(list_entries(kind)[1])))]


def plan_config():
    """The configuration the plan depends on, as JSON (a change reruns the plan)."""
    keys = ("seed", "training", "datapacks", "mixtures")
    return json.dumps({**{k: config[k] for k in keys}, "train": trained_keys(config["train"])}, sort_keys=True)


@functools.cache
def _read_json(path, mtime):
    with open(path) as f:
        return json.load(f)


def read_plan():
    """The plan checkpoint's JSON, parsed once per version of the file (not once per pack)."""
    path = str(checkpoints.plan.get().output.json)
    return _read_json(path, os.stat(path).st_mtime_ns)


def planned_packs():
    """Pack names, in order, once the plan checkpoint ran."""
    return [p["name"] for p in read_plan()["packs"]]


def validation_packs():
    """The held-out validation packs (one per language), once the plan checkpoint ran."""
    return [p["name"] for p in read_plan()["validation"]]


def plan_entry(name):
    """A pack's or validation pack's plan entry."""
    plan = read_plan()
    return next(p for p in [*plan["packs"], *plan["validation"]] if p["name"] == name)


def get_pack_spec(wildcards):
    """A pack's spec file, once the plan ran (rewritten only when what the pack would hold changed)."""
    checkpoints.plan.get()
    return f"{SPECS}/{wildcards.pack}.json"


def get_previous_state(wildcards):
    """The state file of the pack before this one (nothing for the first pack)."""
    packs = planned_packs()
    if wildcards.pack not in packs:  # a validation pack: never chained
        return []
    index = packs.index(wildcards.pack)
    return [f"{DATAPACKS}/{packs[index - 1]}/state.json"] if index else []


def get_pack_sources(wildcards):
    """The tokenized sources (or their shuffled copies) a pack reads.

    ancient(): the count links are remade on every count run, and a re-tokenization may give the same
    tokens; the spec holds each source's content identity, so a change of content reruns the pack.
    """
    pack = plan_entry(wildcards.pack)
    if config["datapacks"]["shuffle"]:
        names = sorted({s["source"] for s in pack["slices"]})
        return [f"{DATAPACKS}/sources/{n}{ext}" for n in names for ext in (".bin", ".idx")]
    return [ancient(p) for p in sorted({s["prefix"] + ext for s in pack["slices"] for ext in (".bin", ".idx")})]


def get_merged_packs(wildcards):
    return [f"{MERGED}/{p}/{p}.bin" for p in [*planned_packs(), *validation_packs()]]


def get_train_configs(wildcards):
    """Every pack's trainer config (none without ``train.base_config``)."""
    return [TRAIN_LAYOUT.config(p, TRAIN_CONFIG_EXT) for p in planned_packs()] if config["train"]["base_config"] else []


# --- training (rules/train.smk): the chain of train/chain.py, known once every pack's config exists ---------
TRAIN_LAYOUT = TrainLayout(TRAIN, LOGS)
TRAIN_SETTINGS = TrainSettings.from_config(config["train"])


def pack_summary(pack):
    """A pack's place in the chain (iterations, offset, cadence, segments), once its trainer config exists."""
    path = str(checkpoints.train_config.get(pack=pack).output.record)
    return Pack.from_summary(path, _read_json(path, os.stat(path).st_mtime_ns)["summary"])


def train_chain():
    """The training chain, once every pack's trainer config exists (the train_config checkpoints)."""
    return _chain(tuple(pack_summary(p) for p in planned_packs()))


@functools.cache
def _chain(packs):
    return Chain.build(packs, TRAIN_SETTINGS, config["tokenize"]["mode"] == "sft", TRAIN_LAYOUT)


def get_segment_inputs(wildcards):
    """A segment's config, predecessor (the pack's previous segment or the previous pack's end) and data.

    ancient(): a merged pack remade with the same content does not retrain (its config would change)."""
    try:
        previous = train_chain().waits_for(wildcards.pack, int(wildcards.segment))
    except ChainError as error:
        raise WorkflowError(str(error)) from None
    data = [ancient(f"{MERGED}/{p}/{p}.{ext}") for p in [wildcards.pack, *validation_packs()] for ext in ("bin", "idx")]
    return {"pack_keys": TRAIN_LAYOUT.keys(wildcards.pack), "previous": previous, "data": data}


def finetune_option():
    """A segment's --finetune-from (the run's starting checkpoint), or nothing."""
    start = config["train"]["finetune_from"]
    return f"--finetune-from {shlex.quote(start)}" if start else ""


REPORT = f"{OUT}/report"  # the charts of `snakemake --report` (rules/report.smk)
REPORT_CHARTS = {
    "plan": ["schedule", "tokens_by_language", "tokens_by_domain", "epochs", "mixture"]
    + (["checkpoints"] if config["train"]["base_config"] else []),
    "data": ["funnel", *(["dedup_clusters", "dedup_removal"] if config["dedup"]["enabled"] else [])]
    + ["doc_tokens", "quarantine"],
    "training": ["loss", "speed", "timeline"],
}


def report_captions(section):
    """The one-line caption file of each chart of a report section."""
    folder = os.path.relpath(os.path.join(workflow.basedir, "report", section))  # a moved tree reruns nothing
    return [os.path.join(folder, f"{c}.rst") for c in REPORT_CHARTS[section]]


def reported(path, section, caption, labels):
    """``path``, marked for ``snakemake --report`` once it exists: the report of a partial tree leaves out
    what has not run yet instead of failing."""
    if not os.path.exists(path):
        return path
    return report(path, caption=caption, category=section.capitalize(), labels=labels)


def report_outputs(section):
    """A report section's named outputs: each chart's PNG and CSV, and the page with all of them."""
    outputs = {"page": reported(f"{REPORT}/{section}/index.html", section, None, {"chart": "overview", "file": "page"})}
    for chart in REPORT_CHARTS[section]:
        caption = f"../report/{section}/{chart}.rst"
        for ext, kind in ((".png", "chart"), (".csv", "table")):
            path = f"{REPORT}/{section}/{chart}{ext}"
            outputs[f"{chart}_{kind}"] = reported(path, section, caption, {"chart": chart, "file": kind})
    return outputs


def training_records():
    """The records the trainers left under train/ (the training charts are made once there are some)."""
    return TRAIN_LAYOUT.records()


def training_stamps():
    """Each training record with its modification time: the training charts' parameter, so that a new or
    rewritten record redraws them. Not inputs: as inputs, the records would put their training jobs into
    every DAG that makes the report (a changed segment rule would submit GPU jobs from `snakemake`)."""
    return " ".join(f"{p}@{os.stat(p).st_mtime_ns}" for p in training_records())


def report_pages(wildcards=None):
    """The pages of the report's sections: plan and data, and training once it has records."""
    sections = ["plan", "data", *(["training"] if training_records() else [])]
    return [f"{REPORT}/{section}/index.html" for section in sections]
