"""Stage 7, train: the per-pack trainer configs, then (target ``train`` only) the training itself.

Configs: reads ``plan.json``, ``tokenized/signature.json`` and the user's base config; writes
``train/{pack}/{pack}.yml`` (GPT-NeoX) or ``.args`` (Megatron-LM) with ``keys.json`` (every computed key
and why), and ``train/configs.csv/.md`` (iterations, cadence, segments). Part of the default target.

Training (never in the default target: building data submits no GPU job): each pack is a chain of
segments, one Slurm job each, that resume from ``latest``; after each segment its checkpoint is evaluated
and the retention policy applied; a pack is done when its checkpoint reaches its last step, and the next
pack's first segment waits for that. ``train/loss.csv``, ``loss.png``, ``evals.csv`` and ``segments.csv``
gather the run. ``train.detach: true`` submits the same segments as an sbatch chain instead.
"""


checkpoint train_config:
    input:
        plan=f"{OUT}/plan.json",
        signature=f"{TOK}/signature.json",
        base=config["train"]["base_config"] or [],
        model=TOKENIZER,
        # SFT packs count k_bin_packed bins, from the merged packs' lengths
        merged=lambda wildcards: get_merged_packs(wildcards) if config["tokenize"]["mode"] == "sft" else [],
    output:
        config=f"{TRAIN}/{{pack}}/{{pack}}{TRAIN_CONFIG_EXT}",
        record=f"{TRAIN}/{{pack}}/keys.json",
    log:
        f"{LOGS}/train/{{pack}}_config.log",
    localrule: True
    params:
        train=train_config_json(),
        checkpoints=CHECKPOINTS,
        seed=config["seed"],
        mode=config["tokenize"]["mode"],
        out_dir=lambda wildcards, output: os.path.dirname(os.path.dirname(output.config)),
    conda:
        "../envs/train.yaml"
    shell:
        "python -m workflow_scripts train-config --plan {input.plan:q} --signature {input.signature:q}"
        " --pack {wildcards.pack} --tokenizer-model {input.model:q} --out-dir {params.out_dir:q} --mode {params.mode}"
        " --checkpoints {params.checkpoints:q} --seed {params.seed} --train-json {params.train:q} > {log:q} 2>&1"


rule train_configs:
    input:
        get_train_configs,
    output:
        csv=f"{TRAIN}/configs.csv",
        md=f"{TRAIN}/configs.md",
    log:
        f"{LOGS}/train/configs.log",
    localrule: True
    params:
        records=lambda wildcards: [f"{TRAIN}/{p}/keys.json" for p in planned_packs()],
    conda:
        "../envs/train.yaml"
    shell:
        "python -m workflow_scripts train-summary --csv {output.csv:q} --md {output.md:q} {params.records:q}"
        " 2>&1 | tee {log:q}"


rule train_segment:
    input:
        unpack(get_segment_inputs),
    output:
        f"{TRAIN}/{{pack}}/segments/{{segment}}.json",
    log:
        f"{LOGS}/train/{{pack}}/segment_{{segment}}.log",
    benchmark:
        f"{BENCH}/train/{{pack}}/segment_{{segment}}.tsv"
    retries: config["train"]["segment_retries"]
    resources:
        runtime=math.ceil(config["train"]["time_limit_minutes"]),
        nodes=config["train"]["nodes"],
        estimate_s=segment_estimate_s,
        attempt=lambda wildcards, attempt: attempt,
    params:
        segments=lambda wildcards: pack_segments(wildcards.pack),
        launch=lambda wildcards: config["train"]["launch"],  # functions: {config} is the trainer's
        margin=config["train"]["save_minutes"],
        finetune=finetune_option(),
    conda:
        "../envs/train.yaml"
    shell:
        "python -m workflow_scripts train-segment --keys {input.pack_keys:q} --segment {wildcards.segment} --segments {params.segments}"
        " --record {output:q} --launch {params.launch:q} --margin-minutes {params.margin} {params.finetune}"
        " --attempt {resources.attempt} > {log:q} 2>&1"


rule train_eval:
    input:
        pack_keys=lambda wildcards: pack_keys_file(wildcards.pack),
        record=f"{TRAIN}/{{pack}}/segments/{{segment}}.json",
    output:
        f"{TRAIN}/{{pack}}/eval/{{segment}}.json",
    log:
        f"{LOGS}/train/{{pack}}/eval_{{segment}}.log",
    params:
        launch=lambda wildcards: config["train"]["eval_launch"] or "",
    conda:
        "../envs/train.yaml"
    shell:
        "python -m workflow_scripts train-eval --keys {input.pack_keys:q} --record {input.record:q} --out {output:q}"
        " --launch {params.launch:q} > {log:q} 2>&1"


rule train_prune:
    input:
        unpack(get_prune_inputs),
    output:
        f"{TRAIN}/{{pack}}/retention/{{segment}}.json",
    log:
        f"{LOGS}/train/{{pack}}/retention_{{segment}}.log",
    localrule: True
    params:
        keep_last=config["train"]["keep_last"],
        milestones=" ".join(map(str, config["train"]["milestones"])),
        protect=lambda wildcards: retention_protected(),
    conda:
        "../envs/train.yaml"
    shell:
        "python -m workflow_scripts train-prune --record {input.record:q} --keep-last {params.keep_last}"
        " --milestones {params.milestones} --protect {params.protect} --out {output:q} > {log:q} 2>&1"


rule train_pack:
    input:
        pack_keys=lambda wildcards: pack_keys_file(wildcards.pack),
        records=get_pack_records,
    output:
        f"{TRAIN}/{{pack}}/done.json",
    log:
        f"{LOGS}/train/{{pack}}/done.log",
    localrule: True
    conda:
        "../envs/train.yaml"
    shell:
        "python -m workflow_scripts train-finished --keys {input.pack_keys:q} --out {output:q} {input.records:q} > {log:q} 2>&1"


rule train_curve:
    input:
        records=get_all_records,
        evals=get_all_evals,
    output:
        loss=f"{TRAIN}/loss.csv",
        png=f"{TRAIN}/loss.png",
        evals=f"{TRAIN}/evals.csv",
        segments=f"{TRAIN}/segments.csv",
        stats=f"{TRAIN}/stats.json",
    log:
        f"{LOGS}/train/curve.log",
    localrule: True
    params:
        out_dir=lambda wildcards, output: os.path.dirname(output.loss),
    conda:
        "../envs/train.yaml"
    shell:
        "python -m workflow_scripts train-curve --out-dir {params.out_dir:q} --segments {input.records:q}"
        " --evals {input.evals:q} > {log:q} 2>&1"


if config["train"]["detach"]:

    rule train:
        """Submit what is left of the chain as sbatch jobs (--dependency=afterany) and return."""
        input:
            pack_keys=get_detach_inputs,
        log:
            f"{LOGS}/train/detach.log",
        localrule: True
        conda:
            "../envs/train.yaml"
        params:
            train=lambda wildcards: json.dumps(config["train"], sort_keys=True),
            train_dir=TRAIN,
            logs_dir=LOGS,
            state=f"{TRAIN}/detach/chain.json",
            sft="--sft" if config["tokenize"]["mode"] == "sft" else "",
        shell:
            "python -m workflow_scripts train-detach --train-json {params.train:q} --train-dir {params.train_dir:q}"
            " --logs-dir {params.logs_dir:q} --state {params.state:q} {params.sft} {input.pack_keys:q} 2>&1 | tee -a {log:q}"

else:

    rule train:
        """Every pack trained to its last step through the segment chain (Slurm jobs with a profile)."""
        localrule: True
        input:
            get_train_target,


rule status:
    """Where the training stands: segments, Slurm states, iterations, s/iter, ETA, disk, stalls."""
    localrule: True
    log:
        f"{LOGS}/train/status.log",
    params:
        train=lambda wildcards: json.dumps(config["train"], sort_keys=True),
        train_dir=TRAIN,
        logs_dir=LOGS,
    conda:
        "../envs/train.yaml"
    shell:
        "python -m workflow_scripts status --train-json {params.train:q} --train-dir {params.train_dir:q}"
        " --logs-dir {params.logs_dir:q} --suggest 2>&1 | tee {log:q}"
