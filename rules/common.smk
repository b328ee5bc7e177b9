"""Shared paths and input functions. Only cheap, pure Python here: no data is read at parse time."""

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
