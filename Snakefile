"""snakepack: raw text shards -> training-ready LLM datapacks, as one Snakemake DAG (see README.md).

Keep this file cheap to parse: every Slurm job parses it again. All logic lives in workflow_scripts/.
"""

import logging
import os
import sys

from snakemake.common import NOTHING_TO_BE_DONE_MSG
from snakemake.exceptions import WorkflowError
from snakemake.utils import min_version, validate

sys.path.insert(0, workflow.basedir)  # the workflow_scripts package of this checkout

from workflow_scripts.core import snakemake_lines
from workflow_scripts.core.config_errors import explain
from workflow_scripts.core.slurm_plan import SlurmPlan

# Progress that never goes back as checkpoints add jobs; a read-only output in one line, not a traceback.
snakemake_lines.install(logging.getLogger("snakemake.logging"))

min_version("9.0")


# Your configuration (a commented template; the embedded sample runs with --configfile config/sample.yaml).
# Snakemake lays every --configfile over it; config/schema.yaml fills in every key left unset.
configfile: "config/config.yaml"


try:
    validate(config, "config/schema.yaml")
except WorkflowError as error:  # one line naming the key, not Snakemake's dump of the schema and config
    raise WorkflowError(explain(error.__context__)) from None


# A site container for every rule, used with `--software-deployment-method apptainer` (config `container`).
if config["container"]:

    container: config["container"]



include: "rules/common.smk"


# `snakemake plan` prints the plan: its job when it runs, and this when nothing is to be done.
if not workflow.remote_exec:
    asked = lambda: "plan" in workflow.dag_settings.targets
    show_plan = show_when_done(f"{OUT}/plan.md", NOTHING_TO_BE_DONE_MSG, asked)
    logging.getLogger("snakemake.logging").addHandler(show_plan)
    # A Slurm profile (it gives a default partition): a dry run ends with the Slurm jobs it would submit.
    defaults = workflow.resource_settings.default_resources
    if defaults is not None and "slurm_partition" in defaults.keys():
        logging.getLogger("snakemake.logging").addHandler(SlurmPlan(lambda rule: rule in workflow._localrules))


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
        TRAIN_LAYOUT.file(train_layout.CONFIGS_MD) if config["train"]["base_config"] else [],
        report_pages,  # the charts of `snakemake --report report.html` (seconds)


# The run's last lines (workflow_scripts/core/run_summary.py): what was read, kept and rejected, where the
# outputs are and the next command; a failed run names the failed jobs' logs. None after a dry run, or when
# nothing was to be done (Snakemake calls neither handler then, nor in cluster jobs).
RUN_PLACES = (OUT, LOGS, SHARDS, DEDUP, TOK, MERGED, TRAIN_LAYOUT.file(train_layout.CONFIGS_MD), REPORT)


onsuccess:
    # A detached chain is submitted by every `snakemake train` (what is done or still queued is kept): the mark
    # of a submission goes once the run succeeded (Snakemake keeps a temp() input of a target rule). Here, as
    # Snakemake calls one onsuccess handler: the last one registered.
    if os.path.exists(TRAIN_LAYOUT.detach_flag):
        os.remove(TRAIN_LAYOUT.detach_flag)
    from workflow_scripts.core import run_summary

    places, targets = run_summary.Places(*RUN_PLACES), list(workflow.dag_settings.targets)
    run_summary.show(lambda: run_summary.done(places, sys.argv, targets))


onerror:
    from workflow_scripts.core import run_summary

    run_summary.show(lambda: run_summary.failed(run_summary.Places(*RUN_PLACES), log))
