"""snakepack: raw text shards -> training-ready LLM datapacks, as one Snakemake DAG (see README.md).

Keep this file cheap to parse: every Slurm job parses it again. All logic lives in workflow_scripts/.
"""

import os
import sys
from pathlib import Path

import yaml

from snakemake.utils import min_version, validate

sys.path.insert(0, workflow.basedir)  # the workflow_scripts package of this checkout

min_version("9.0")


configfile: "config/config.yaml"


# A user's --configfile replaces the sample's named mixtures and train section instead of merging into them
# (lists, such as sources and datapacks.phases, are replaced by Snakemake already); without a train section
# of its own, a config that turns the sample off writes no trainer configs.
user_configs = [yaml.safe_load(Path(f).read_text()) or {} for f in workflow.overwrite_configfiles or []]
for user_config in user_configs:
    for section in ("mixtures", "train"):
        if section in user_config:
            config[section] = user_config[section]
if user_configs and not any("train" in c for c in user_configs) and not config.get("sample", {}).get("enabled", True):
    config.pop("train", None)


validate(config, "config/schema.yaml")


# A site container for every rule, used with `--software-deployment-method apptainer` (config `container`).
if config["container"]:

    container: config["container"]



include: "rules/common.smk"


# Every wildcard's pattern comes from the naming module (workflow_scripts/core/naming.py).
wildcard_constraints:
    **naming.WILDCARDS,


include: "rules/sample.smk"
include: "rules/ingest.smk"
include: "rules/dedup.smk"
include: "rules/tokenize.smk"
include: "rules/datapacks.smk"
include: "rules/train.smk"
include: "rules/report.smk"


# Small bookkeeping steps (`localrule: True` in their rules) run where Snakemake runs, not as cluster jobs.
rule all:
    default_target: True
    localrule: True
    input:
        f"{SHARDS}/stats.json",
        f"{DEDUP}/stats.json" if config["dedup"]["enabled"] else [],
        f"{TOK}/stats.json",
        f"{TOK}/signature.json",
        expand(f"{OUT}/mixtures/{{mixture}}.json", mixture=config["mixtures"]),
        f"{OUT}/plan.md",
        get_merged_packs,
        f"{TRAIN}/configs.md" if config["train"]["base_config"] else [],
        report_pages,  # the charts of `snakemake --report report.html` (seconds)
