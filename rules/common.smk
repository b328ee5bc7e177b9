"""Shared paths and input functions. Only cheap, pure Python here: no data is read at parse time."""

import json
import shlex

from workflow_scripts.runtime import use_this_interpreter
from workflow_scripts.sample import NAME_REGEX as SAMPLE_NAME_REGEX
from workflow_scripts.sample import plan as sample_plan
from workflow_scripts.sources import resolve_groups

use_this_interpreter(workflow.basedir)

OUT = config["output_root"].rstrip("/")
LOGS = config["log_root"].rstrip("/")
SAMPLE_DIR = f"{OUT}/sample"
SHARDS = f"{OUT}/shards"
SHARD_EXT = ".jsonl.zst" if config["ingest"]["compress"] else ".jsonl"


wildcard_constraints:
    group="[a-z0-9]+_[a-z0-9]+_[a-z0-9]+",
    split=r"\d+",
    pack=r"[A-Za-z0-9-]+_\d+",
    source=r"[a-z0-9]+_[a-z0-9]+_[a-z0-9]+_split_\d+",
    mixture=r"[A-Za-z0-9_-]+",


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


GROUPS = resolve_groups(configured_sources(), config["ingest"])


def group_shards(group):
    """The shard paths of a group, known once its ingest checkpoint ran."""
    outdir = checkpoints.ingest.get(group=group).output[0]
    names = glob_wildcards(f"{outdir}/{{name,[a-z0-9]+_[a-z0-9]+_[a-z0-9]+_split_\\d+}}{SHARD_EXT}").name
    return sorted(f"{outdir}/{name}{SHARD_EXT}" for name in names)


TOK = f"{OUT}/tokenized"
TOKENIZER = config["tokenizer"]["model"] or f"{OUT}/tokenizer/spm.model"
DATAPACKS = f"{OUT}/datapacks"
MERGED = f"{OUT}/merged"


def corpus_shards(wildcards=None):
    """The deduplicated shards of every group: the tokenizer's input."""
    return [s for group in GROUPS for s in group_shards(group)]


def tokenized_prefixes():
    """One `{shard}_text_document` prefix per shard."""
    return [f"{TOK}/{os.path.basename(s).removesuffix(SHARD_EXT)}_text_document" for s in corpus_shards()]


def tokenize_args():
    """Tokenizer options from the config (EOD, BOS, minimum length, SFT markers)."""
    t = config["tokenize"]
    args = ["--min-tokens", str(t["min_tokens"])]
    if t["append_eod"]:
        args += ["--append-eod", "--eod-piece", t["eod_piece"]]
    if t["prepend_bos"]:
        args.append("--prepend-bos")
    if t["mode"] == "sft":
        args.append("--sft")
    for marker, piece in t["sft_markers"].items():
        args += ["--sft-marker", f"{marker}={piece}"]
    return shlex.join(args)


def plan_config():
    """The configuration the plan depends on, as JSON (a change reruns the plan)."""
    keys = ("seed", "training", "datapacks", "mixtures")
    return json.dumps({k: config[k] for k in keys}, sort_keys=True)


def planned_packs():
    """Pack names, in order, once the plan checkpoint ran."""
    with checkpoints.plan.get().output.json.open() as f:
        return [p["name"] for p in json.load(f)["packs"]]


def pack_spec(wildcards):
    """A pack's own entry of the plan: the slicer reruns for a pack only when this changes."""
    with checkpoints.plan.get().output.json.open() as f:
        plan = json.load(f)
    index = next(i for i, p in enumerate(plan["packs"]) if p["name"] == wildcards.pack)
    pack = plan["packs"][index]
    return json.dumps({"index": index, "slices": pack["slices"], "shuffle": plan["shuffle"]}, sort_keys=True)


def previous_state(wildcards):
    """The state file of the pack before this one (nothing for the first pack)."""
    packs = planned_packs()
    index = packs.index(wildcards.pack)
    return [f"{DATAPACKS}/{packs[index - 1]}/state.json"] if index else []


def pack_sources(wildcards):
    """The tokenized sources (or their shuffled copies) a pack reads."""
    spec = json.loads(pack_spec(wildcards))
    names = sorted({s["source"] for s in spec["slices"]})
    if spec["shuffle"]:
        return [f"{DATAPACKS}/sources/{n}{ext}" for n in names for ext in (".bin", ".idx")]
    return sorted({s["prefix"] + ext for s in spec["slices"] for ext in (".bin", ".idx")})


def merged_packs(wildcards):
    return [f"{MERGED}/{p}/{p}.bin" for p in planned_packs()]
