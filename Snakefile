"""snakepack: raw text shards -> training-ready LLM datapacks, as one Snakemake DAG (see README.md).

Keep this file cheap to parse: every Slurm job parses it again. All logic lives in workflow_scripts/.
"""

from snakemake.utils import min_version, validate

min_version("9.0")


configfile: "config/config.yaml"


validate(config, "config/schema.yaml")


include: "rules/common.smk"
include: "rules/sample.smk"


rule all:
    default_target: True
    input:
        sample_outputs(),
