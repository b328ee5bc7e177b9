"""The run's inputs, from the config alone, checked before any job runs (the Snakefile calls it while parsed:
file names only, no data is read).

The raw sources (plus the embedded sample when ``sample.enabled``) become ingest groups, the tokenized
sources become imported prefixes, and everything knowable from the config is checked, naming the key: some
input at all, every source pattern matching a file, a phase's mixture, the languages and domains a mixture
names, ``tokenizer.model``. Also from the config: what the plan depends on, and the stages' settings as
their commands' options.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

from workflow_scripts.core.cli import UserError
from workflow_scripts.core.settings import from_config, to_args
from workflow_scripts.datapacks.mixture import check_config
from workflow_scripts.dedup.settings import DedupSettings
from workflow_scripts.ingest.sample import NAME_REGEX, plan
from workflow_scripts.ingest.sources import Group, resolve_groups
from workflow_scripts.tokens.settings import TokenizerSettings, TokenizeSettings
from workflow_scripts.tokens.sources import Imported, resolve_imports
from workflow_scripts.train.settings import trained_keys


def sample_files(config: dict[str, Any], sample_dir: str) -> list[str]:
    """The sample's raw files then its manifest, or nothing when the sample is disabled."""
    if not config["sample"]["enabled"]:
        return []
    return [
        *(f"{sample_dir}/{f.name}" for f in plan(config["sample"]["scale"])),
        f"{sample_dir}/manifest.json",
    ]


def configured_sources(config: dict[str, Any], sample_dir: str) -> list[dict[str, Any]]:
    """The user's sources, plus the embedded sample when enabled."""
    sources = list(config["sources"])
    if config["sample"]["enabled"]:
        files = sample_files(config, sample_dir)[:-1]
        sample = {"name": "sample", "paths": [], "files": files, "name_regex": NAME_REGEX}
        sources.append(sample | {"format": "auto", "text_key": ["text"], "id_key": "id"})
    return sources


def resolve(config: dict[str, Any], sample_dir: str) -> tuple[dict[str, Group], dict[str, Imported]]:
    """The ingest groups and the imported prefixes; a ``UserError`` names what is wrong."""
    groups = resolve_groups(configured_sources(config, sample_dir), config["ingest"])
    imports = resolve_imports(config["tokenized_sources"], config["tokenizer"]["model"])
    if not groups and not imports:
        raise UserError(
            "no input: give `sources` (raw files) or `tokenized_sources` in config/config.yaml or your"
            " --configfile (the embedded sample runs with --configfile config/sample.yaml)"
        )
    check_config(
        config["mixtures"], config["datapacks"]["phases"], [*groups, *(i.group for i in imports.values())]
    )
    return groups, imports


def plan_json(config: dict[str, Any]) -> str:
    """The configuration the plan depends on, as JSON (a change of it reruns the plan)."""
    keys = ("seed", "training", "datapacks", "mixtures")
    return json.dumps(
        {**{k: config[k] for k in keys}, "train": trained_keys(config["train"])}, sort_keys=True
    )


def stage_args(config: dict[str, Any]) -> tuple[str, str, str]:
    """The dedup, tokenizer and tokenize settings as their commands' options (shell words). A tokenize job's
    threads come from its rule's ``threads:``, so a change of them reruns nothing."""
    seed = config["seed"]
    dedup = to_args(from_config(DedupSettings, config["dedup"], seed=seed))
    tokenizer = to_args(from_config(TokenizerSettings, config["tokenizer"], seed=seed))
    tokenize = to_args(from_config(TokenizeSettings, config["tokenize"]), exclude=("threads",))
    return shlex.join(dedup), shlex.join(tokenizer), shlex.join(tokenize)
