"""Paths, names and input functions shared by the rules. Only cheap, pure Python: no data is read at parse
time except the small manifests of finished checkpoints (ingest groups, dedup assignments, the plan).

How incremental reruns work (each device is also commented at its use). File contents and modification
times carry every change; no param is computed from data.
- ingest (per group), dedup_cluster and plan are checkpoints: the DAG learns the shards, the per-shard dedup
  outcome and the packs once they exist, and Snakemake re-evaluates what depends on them after they ran;
- dedup_cluster rewrites a shard's assignment file only when that shard's outcome changed, so only those
  shards are filtered and tokenized again;
- plan writes one spec file per pack (its slices and the content identity of every source it reads),
  rewritten only when it changed, so only those packs are sliced and merged again.
Planning stays linear in the shard count: input functions that list per-shard files after dedup ask the
dedup_cluster checkpoint first (while it is pending, the per-shard jobs after it are not in the DAG yet),
and the gathers over all shards read one list written by a barrier rule (signatures_list, corpus_list,
tokenized_list), itself made of lists of LIST_CHUNK shards (list_chunk): Snakemake prepares a job in time
quadratic in the number of jobs it depends on, so no job depends on more than LIST_CHUNK others.
A cluster job (`--mode remote`) builds the DAG of its own job again: there, the lists over all shards are
expanded only for the rule that the job runs (see `expands`).
"""

import functools
import json
import math
import re
import shlex

from snakemake.exceptions import WorkflowError

from workflow_scripts.core import naming, schedule
from workflow_scripts.core.cli import UserError
from workflow_scripts.core.runtime import set_progress_interval, show_when_done, use_this_interpreter
from workflow_scripts.core.settings import from_config, to_args
from workflow_scripts.datapacks.mixture import check_config
from workflow_scripts.dedup.settings import DedupSettings
from workflow_scripts.ingest.sample import NAME_REGEX as SAMPLE_NAME_REGEX
from workflow_scripts.ingest.sample import plan as sample_plan
from workflow_scripts.ingest.sources import resolve_groups
from workflow_scripts.report.records import training_files
from workflow_scripts.tokens.settings import TokenizeOptions
from workflow_scripts.tokens.sources import resolve_imports
from workflow_scripts.tokens.settings import TokenizerOptions

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
TOKENIZER_ARGS = shlex.join(to_args(from_config(TokenizerOptions, config["tokenizer"], seed=config["seed"])))
# Threads come from the rule's `threads:` (a change of them alone reruns nothing).
TOKENIZE_ARGS = shlex.join(to_args(from_config(TokenizeOptions, config["tokenize"]), exclude=("threads",)))


def expands(*rules):
    """Whether to list every shard for ``rules``: always in the main process; in a cluster job only for its
    own rule (upstream gathers are finished, and listing 100,000 shards there would cost every job).

    Asked while the DAG is built (the job's targets are not known yet while the Snakefile is parsed).
    """
    if not workflow.remote_exec:
        return True
    return any(t.rulename in rules for t in workflow.dag_settings.target_jobs)


def write_list(paths_var, list_file):
    """Shell: write a rule's (possibly 100,000) paths to ``list_file``, one a line, for an ``@LIST`` option.

    ``printf`` is a shell builtin, so no argument-length limit applies to it.
    """
    return f"printf '%s\\n' {paths_var} > {list_file}"


def sample_outputs():
    """The sample's files, or nothing when the sample is disabled."""
    if not config["sample"]["enabled"]:
        return []
    files = [f"{SAMPLE_DIR}/{f.name}" for f in sample_plan(config["sample"]["scale"])]
    return [*files, f"{SAMPLE_DIR}/manifest.json"]


def configured_sources():
    """The user's sources, plus the embedded sample when enabled."""
    sources = list(config["sources"])
    if config["sample"]["enabled"]:
        sample = {"name": "sample", "paths": [], "files": sample_outputs()[:-1], "name_regex": SAMPLE_NAME_REGEX}
        sources.append(sample | {"format": "auto", "text_key": ["text"], "id_key": "id"})
    return sources


try:
    GROUPS = resolve_groups(configured_sources(), config["ingest"])
    IMPORTS = resolve_imports(config["tokenized_sources"], config["tokenizer"]["model"])
except UserError as error:  # one line naming the source, no traceback
    raise WorkflowError(f"config: {error}") from None
if not GROUPS and not IMPORTS:
    raise WorkflowError(
        "config: no input: give `sources` (raw files) or `tokenized_sources` in config/config.yaml or your"
        " --configfile (the embedded sample runs with --configfile config/sample.yaml)"
    )

# Everything knowable from the config fails here, before any job runs, naming the key.
check_config(config["mixtures"], config["datapacks"]["phases"], [*GROUPS, *(i.group for i in IMPORTS.values())])
if config["tokenizer"]["model"] and not os.path.isfile(config["tokenizer"]["model"]):
    raise WorkflowError(f"tokenizer.model: {config['tokenizer']['model']} is not a file")


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


def get_pair_files():
    """Exact-pass partitions and band-group x partition pair files."""
    parts = range(config["dedup"]["partitions"])
    exact = [f"{DEDUP_WORK}/pairs/exact_{p}.pairs" for p in parts]
    return exact + [f"{DEDUP_WORK}/pairs/bands_{g}_{p}.pairs" for g in range(config["dedup"]["band_groups"]) for p in parts]


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


def get_import(wildcards):
    """The user's prefix behind an imported name."""
    return IMPORTS[wildcards.imported]


def get_import_inputs(wildcards):
    """An imported prefix's files and the model it is checked against."""
    entry = get_import(wildcards)
    return {"bin": f"{entry.prefix}.bin", "idx": f"{entry.prefix}.idx", "model": entry.tokenizer_model}


LIST_CHUNK = 1000


def list_entries(kind):
    """(the files a chunk of ``kind`` waits for, the lines its list holds), for every shard."""
    if kind == "signatures":
        return get_signatures(), get_signatures()
    if kind == "corpus":
        return get_corpus_shards(), get_corpus_shards()
    prefixes = get_tokenized_prefixes()
    return [f"{p}.stats.json" for p in prefixes], prefixes


def chunk_of(items, chunk):
    return items[int(chunk) * LIST_CHUNK : (int(chunk) + 1) * LIST_CHUNK]


# Where each list's files are (under OUT); each list's chunks live there too, in _lists/: deleting the
# directory deletes its list, so a rerun makes the list again and, first, what it lists. (A list left behind
# would be up to date, and Snakemake remakes a missing file only for a job that runs.)
LISTED = {"signatures": f"{DEDUP_WORK}/sig", "corpus": CORPUS, "tokenized": TOK}
LIST_KIND = {path.removeprefix(f"{OUT}/"): kind for kind, path in LISTED.items()}


def get_list_chunks(kind):
    """The chunk lists that make up the list of ``kind``."""
    count = -(-len(list_entries(kind)[1]) // LIST_CHUNK)
    return [f"{LISTED[kind]}/_lists/{i}.txt" for i in range(count)]


# How the training runs (commands, retries, detach, status), not what it trains: changing these reruns no
# plan and no trainer config.
TRAIN_RUN_KEYS = ("launch", "eval_launch", "evaluate_sft", "segment_retries", "stall_minutes", "detach", "sbatch")


def train_config_json():
    """The ``train`` section the trainer configs depend on, as JSON."""
    return json.dumps({k: v for k, v in config["train"].items() if k not in TRAIN_RUN_KEYS}, sort_keys=True)


def plan_config():
    """The configuration the plan depends on, as JSON (a change reruns the plan)."""
    keys = ("seed", "training", "datapacks", "mixtures")
    return json.dumps({**{k: config[k] for k in keys}, "train": json.loads(train_config_json())}, sort_keys=True)


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
    return [f"{TRAIN}/{p}/{p}{TRAIN_CONFIG_EXT}" for p in planned_packs()] if config["train"]["base_config"] else []


# --- training (rules/train.smk) -------------------------------------------------------------------------------
# A pack trains as a chain of segments (Slurm jobs): segment k waits for segment k - 1, a pack's first
# segment for the previous pack's done.json. How many segments a pack has is in its keys.json (the
# train_config checkpoint), so the chain is known once the configs exist.


def pack_keys_file(pack):
    return f"{TRAIN}/{pack}/keys.json"


def pack_summary(pack):
    """A pack's training summary (iterations, offset, cadence, segments), once its trainer config exists."""
    path = str(checkpoints.train_config.get(pack=pack).output.record)
    return _read_json(path, os.stat(path).st_mtime_ns)["summary"]


def pack_segments(pack):
    """The number of segments of a pack, spares included."""
    return pack_summary(pack)["segments"]


def segment_records(pack):
    return [f"{TRAIN}/{pack}/segments/{k}.json" for k in range(pack_segments(pack))]


def evaluates():
    """Whether every checkpoint is evaluated (an eval command, and not an SFT run unless asked)."""
    train = config["train"]
    return bool(train["eval_launch"]) and (config["tokenize"]["mode"] != "sft" or train["evaluate_sft"])


def get_segment_inputs(wildcards):
    """A segment's config, data and predecessor: the pack's previous segment or the previous pack's end."""
    pack, k = wildcards.pack, int(wildcards.segment)
    if k >= pack_segments(pack):
        raise WorkflowError(f"{pack} has {pack_segments(pack)} segments (0-{pack_segments(pack) - 1}), not {k}")
    packs = planned_packs()
    index = packs.index(pack)
    if k:
        previous = [f"{TRAIN}/{pack}/segments/{k - 1}.json"]
    else:
        previous = [f"{TRAIN}/{packs[index - 1]}/done.json"] if index else []
    # ancient(): a merged pack remade with the same content does not retrain (its config would change)
    data = [ancient(f"{MERGED}/{p}/{p}.{ext}") for p in [pack, *validation_packs()] for ext in ("bin", "idx")]
    return {"pack_keys": pack_keys_file(pack), "previous": previous, "data": data}


def get_prune_inputs(wildcards):
    """Retention runs after the segment, after its evaluation, and after the retention of the segment
    before (so after every earlier evaluation: none of them still loads a checkpoint it may delete)."""
    pack, k = wildcards.pack, int(wildcards.segment)
    record = f"{TRAIN}/{pack}/segments/{k}.json"
    evaluation = [f"{TRAIN}/{pack}/eval/{k}.json"] if evaluates() else []
    packs = planned_packs()
    if k:
        previous = [f"{TRAIN}/{pack}/retention/{k - 1}.json"]
    elif packs.index(pack):
        before = packs[packs.index(pack) - 1]
        previous = [f"{TRAIN}/{before}/retention/{pack_segments(before) - 1}.json"]
    else:
        previous = []
    return {"record": record, "evaluation": evaluation, "previous": previous}


def segment_estimate_s(wildcards):
    """The plan's guess of one segment's time (shown by `snakemake -n train`)."""
    summary = pack_summary(wildcards.pack)
    busy = min(summary["segments"], -(-summary["train_iters"] // summary["exit_interval"]))
    return round(summary["hours"] * 3600 / max(busy, 1))


def get_pack_records(wildcards):
    return segment_records(wildcards.pack)


def finetune_option():
    """A segment's --finetune-from (the run's starting checkpoint), or nothing."""
    start = config["train"]["finetune_from"]
    return f"--finetune-from {shlex.quote(start)}" if start else ""


def retention_protected():
    """The global steps retention keeps besides its policy: every pack's end (where the next pack starts)
    and the run's starting checkpoint (train.finetune_from)."""
    steps = [pack_summary(p)["iteration_offset"] + pack_summary(p)["train_iters"] for p in planned_packs()]
    if config["train"]["finetune_from"]:
        steps.append(schedule.start_step(config["train"]["finetune_from"]))
    return " ".join(map(str, steps))


def get_all_records(wildcards=None):
    return [r for pack in planned_packs() for r in segment_records(pack)]


def get_all_evals(wildcards=None):
    if not evaluates():
        return []
    return [f"{TRAIN}/{p}/eval/{k}.json" for p in planned_packs() for k in range(pack_segments(p))]


def get_train_target(wildcards):
    """Everything `snakemake train` makes: every pack done, every segment's retention, the curve."""
    packs = planned_packs()
    retention = [f"{TRAIN}/{p}/retention/{k}.json" for p in packs for k in range(pack_segments(p))]
    return [*[f"{TRAIN}/{p}/done.json" for p in packs], *retention, f"{TRAIN}/loss.csv"]


def get_detach_inputs(wildcards):
    """Every pack's keys.json, in training order (the detached chain is built from them)."""
    packs = planned_packs()
    for pack in packs:
        pack_segments(pack)  # waits for the train_config checkpoint
    return [pack_keys_file(p) for p in packs]


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
    return training_files(TRAIN)


def training_stamps():
    """Each training record with its modification time: the training charts' parameter, so that a new or
    rewritten record redraws them. Not inputs: as inputs, the records would put their training jobs into
    every DAG that makes the report (a changed segment rule would submit GPU jobs from `snakemake`)."""
    return " ".join(f"{p}@{os.stat(p).st_mtime_ns}" for p in training_records())


def report_pages(wildcards=None):
    """The pages of the report's sections: plan and data, and training once it has records."""
    sections = ["plan", "data", *(["training"] if training_records() else [])]
    return [f"{REPORT}/{section}/index.html" for section in sections]
