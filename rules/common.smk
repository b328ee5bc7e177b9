"""Shared paths and input functions. Only cheap, pure Python here: no data is read at parse time."""

import hashlib
import json
import shlex

from workflow_scripts.core.runtime import use_this_interpreter
from workflow_scripts.ingest.sample import NAME_REGEX as SAMPLE_NAME_REGEX
from workflow_scripts.ingest.sample import plan as sample_plan
from workflow_scripts.ingest.sources import resolve_groups

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
    part=r"\d+",
    band=r"\d+",


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


DEDUP = f"{OUT}/dedup"
DEDUP_WORK = f"{DEDUP}/_work"
# The tokenizer reads the deduplicated shards, or the ingested ones when dedup is off.
CORPUS = DEDUP if config["dedup"]["enabled"] else SHARDS
TOK = f"{OUT}/tokenized"
TOKENIZER = config["tokenizer"]["model"] or f"{OUT}/tokenizer/spm.model"
DATAPACKS = f"{OUT}/datapacks"
MERGED = f"{OUT}/merged"


def all_shards(wildcards=None):
    """Every ingested shard."""
    return [s for group in GROUPS for s in group_shards(group)]


def corpus_shards(wildcards=None):
    """The shards the tokenizer reads: deduplicated (same names) or as ingested."""
    return [s.replace(f"{SHARDS}/", f"{CORPUS}/", 1) for s in all_shards()]


def shard_stem(path):
    return os.path.basename(path).removesuffix(SHARD_EXT)


def dedup_args():
    """The dedup settings for the signatures step (the later steps read them from the signature files)."""
    d = config["dedup"]
    args = ["--seed", str(config["seed"]), "--threshold", str(d["threshold"]), "--num-perm", str(d["num_perm"])]
    args += ["--ngram", str(d["ngram"]), "--char-ngram", str(d["char_ngram"]), "--char-langs", ",".join(d["char_langs"])]
    args += ["--bands", str(d["bands"]), "--rows", str(d["rows"]), "--scope", d["scope"], "--verify", d["verify"]]
    args += [f"--no-{k}" for k in ("lowercase", "nfkc", "punctuation", "digits", "exact") if not d[k]]
    return shlex.join(args)


def dedup_signatures(wildcards=None):
    return [f"{DEDUP_WORK}/sig/{shard_stem(s)}.sig" for s in all_shards()]


def assign_digest(wildcards):
    """Digest of a shard's own dedup assignment (which of its rows go, and to which kept document)."""
    assign_dir = checkpoints.dedup_cluster.get().output.assign
    path = f"{assign_dir}/{wildcards.group}_split_{wildcards.split}.assign.json"
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def dedup_pair_files():
    """Exact-pass partitions and band-group x partition pair files."""
    parts = range(config["dedup"]["partitions"])
    exact = [f"{DEDUP_WORK}/pairs/exact_{p}.pairs" for p in parts]
    return exact + [f"{DEDUP_WORK}/pairs/bands_{g}_{p}.pairs" for g in range(config["dedup"]["band_groups"]) for p in parts]


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
    """The tokenized sources (or their shuffled copies) a pack reads.

    ancient(): the count links are remade on every count run; what a pack takes is in its plan entry
    (pack_spec, with count-stamped names), so only a change there reruns the pack.
    """
    spec = json.loads(pack_spec(wildcards))
    names = sorted({s["source"] for s in spec["slices"]})
    if spec["shuffle"]:
        return [f"{DATAPACKS}/sources/{n}{ext}" for n in names for ext in (".bin", ".idx")]
    return [ancient(p) for p in sorted({s["prefix"] + ext for s in spec["slices"] for ext in (".bin", ".idx")})]


def merged_packs(wildcards):
    return [f"{MERGED}/{p}/{p}.bin" for p in planned_packs()]
