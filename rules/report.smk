"""The report: `snakemake --report report.html` shows the charts of the plan, the data and, once trained, the
training. Reads ``plan.json``, ``mixtures/``, ``train/configs.csv``, the stages' ``stats.json``, the dedup
report, the data signature (and the indexes it names) and the trainers' records under ``train/``; writes per
section ``report/{section}/{chart}.png/.csv`` and ``index.html`` (a page with every chart and table).
"""


report: "../report/workflow.rst"


rule report_plan:
    input:
        plan=f"{OUT}/plan.json",
        plan_table=[f"{OUT}/plan.slices.parquet", f"{OUT}/plan.sources.parquet"],
        mixtures=expand(f"{OUT}/mixtures/{{mixture}}.json", mixture=config["mixtures"]),
        configs=TRAIN_LAYOUT.file(train_layout.CONFIGS_CSV) if config["train"]["base_config"] else [],
        captions=REPORT_CAPTIONS["plan"],
    output:
        **REPORT_OUTPUTS["plan"],
    log:
        f"{LOGS}/report/plan.log",
    localrule: True
    params:
        out_dir=lambda wildcards, output: os.path.dirname(output.page),
        configs=lambda wildcards, input: f"--configs {shlex.quote(input.configs)}" if input.configs else "",
        # datapacks.exclude set: the excluded chart is declared (report/layout.py), so always written
        excluded=lambda wildcards, output: "--excluded" if "excluded_chart" in output.keys() else "",
    conda:
        "../envs/report.yaml"
    shell:
        "python -m workflow_scripts report plan --plan {input.plan:q} --mixtures {input.mixtures:q} {params.configs}"
        " {params.excluded}"
        " --captions {input.captions:q} --out-dir {params.out_dir:q} > {log:q} 2>&1"


rule report_data:
    input:
        ingest=f"{SHARDS}/stats.json",
        dedup=f"{DEDUP}/stats.json" if config["dedup"]["enabled"] else [],
        dedup_report=f"{DEDUP}/report.json" if config["dedup"]["enabled"] else [],
        tokenize=f"{TOK}/stats.json",
        signature=f"{TOK}/signature.json",
        plan=f"{OUT}/plan.json",
        captions=REPORT_CAPTIONS["data"],
    output:
        **REPORT_OUTPUTS["data"],
    log:
        f"{LOGS}/report/data.log",
    localrule: True
    params:
        out_dir=lambda wildcards, output: os.path.dirname(output.page),
        dedup=lambda wildcards, input: (
            f"--dedup {shlex.quote(input.dedup)} --dedup-report {shlex.quote(input.dedup_report)}"
            if input.dedup
            else ""
        ),
    conda:
        "../envs/report.yaml"
    shell:
        "python -m workflow_scripts report data --ingest {input.ingest:q} {params.dedup}"
        " --tokenize {input.tokenize:q} --signature {input.signature:q} --plan {input.plan:q}"
        " --captions {input.captions:q} --out-dir {params.out_dir:q} > {log:q} 2>&1"


# Made once the trainers left records (segments, loss curves): a new or rewritten record redraws the charts
# (their names and times are a parameter, not inputs: the report never schedules training). The packs and
# their trainer configs are inputs: the consumption chart reads them (none of them trains).
rule report_training:
    input:
        plan=f"{OUT}/plan.json",
        captions=REPORT_CAPTIONS["training"],
        packs=get_merged_packs,
        configs=lambda wildcards: [TRAIN_LAYOUT.config(p, TRAIN_CONFIG_EXT) for p in planned_packs()],
    output:
        **REPORT_OUTPUTS["training"],
    log:
        f"{LOGS}/report/training.log",
    localrule: True
    params:
        out_dir=lambda wildcards, output: os.path.dirname(output.page),
        train_dir=lambda wildcards: TRAIN,
        checkpoints=CHECKPOINTS,  # the reference trainer's records are beside it
        records=TRAIN_LAYOUT.stamps(CHECKPOINTS),
        seconds_per_iter=config["train"]["seconds_per_iter"],
    conda:
        "../envs/train.yaml"  # the consumption chart reads the trainer configs (and their tokenizers)
    shell:
        "python -m workflow_scripts report-training --train-dir {params.train_dir:q} --checkpoints {params.checkpoints:q}"
        " --plan {input.plan:q}"
        " --seconds-per-iter {params.seconds_per_iter} --captions {input.captions:q} --out-dir {params.out_dir:q}"
        " > {log:q} 2>&1"


# `snakemake report`: everything the report shows, then `snakemake --report report.html`.
rule report:
    localrule: True
    input:
        report_pages,
