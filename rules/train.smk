"""Stage 7, train: the per-pack trainer configs, then (target ``train`` only) the training itself.

Configs: reads ``plan.json``, ``tokenized/signature.json`` and the user's base config; writes
``train/{pack}/{pack}.yml`` (GPT-NeoX) or ``.args`` (Megatron-LM) with its keys file (every computed key
and why; the train tree's names are core/train_layout.py's), and ``train/configs.csv/.md`` (iterations, cadence, segments). Part of the default target.

Training (never in the default target: building data submits no GPU job): each pack is a chain of
segments, one Slurm job each, that resume from ``latest``; after each segment its checkpoint is evaluated
and the retention policy applied; a pack is done when its checkpoint reaches its last step, and the next
pack's first segment waits for that (and, with Megatron-LM, for its index caches: train_data_cache). ``train/loss.csv``, ``loss.png``, ``evals.csv`` and ``segments.csv``
gather the run. ``train.detach: true`` submits the same segments as an sbatch chain instead.
"""

from workflow_scripts.train import detach
from workflow_scripts.train.configs import preflight
if not workflow.remote_exec and (trainer_problem := preflight.problem(config)):  # the base config vs batch, GPUs, seq_length
    raise WorkflowError(f"config: {trainer_problem}")


checkpoint train_config:
    input:
        # ancient() once the pack started: a re-plan keeps it, its config and its segments (datapacks/started.py)
        plan=lambda wildcards: TRAIN_INPUTS.config_plan(f"{OUT}/plan.json", wildcards.pack, ancient),
        signature=f"{TOK}/signature.json",
        base=config["train"]["base_config"] or [],
        model=TOKENIZER,
        merges=TOKENIZER_MERGES,
        hf_config=f"{INIT_HF}/config.json" if INIT_HF else [],  # its model keys fill the base config
        # SFT packs count k_bin_packed bins, from the merged packs' lengths
        merged=lambda wildcards: get_merged_packs(wildcards) if config["tokenize"]["mode"] == "sft" else [],
    output:
        config=TRAIN_LAYOUT.config("{pack}", TRAIN_CONFIG_EXT),
        record=TRAIN_LAYOUT.keys("{pack}"),
    log:
        TRAIN_LAYOUT.log("{pack}_config"),
    localrule: True
    params:
        train=json.dumps(trained_keys(config["train"]), sort_keys=True),
        checkpoints=CHECKPOINTS,
        seed=config["seed"],
        mode=config["tokenize"]["mode"],
        tokenizer=TOKENIZER_OPTS,
        out_dir=lambda wildcards, output: os.path.dirname(os.path.dirname(output.config)),
    conda:
        "../envs/train.yaml"
    shell:
        "python -m workflow_scripts train-config --plan {input.plan:q} --signature {input.signature:q}"
        " --pack {wildcards.pack} --tokenizer-model {input.model:q} {params.tokenizer} --out-dir {params.out_dir:q}"
        " --mode {params.mode}"
        " --checkpoints {params.checkpoints:q} --seed {params.seed} --train-json {params.train:q} > {log:q} 2>&1"


rule train_configs:
    input:
        lambda wildcards: [TRAIN_LAYOUT.config(p, TRAIN_CONFIG_EXT) for p in planned_packs()],
    output:
        csv=TRAIN_LAYOUT.file(train_layout.CONFIGS_CSV),
        md=TRAIN_LAYOUT.file(train_layout.CONFIGS_MD),
    log:
        TRAIN_LAYOUT.log("configs"),
    localrule: True
    params:
        records=lambda wildcards: [TRAIN_LAYOUT.keys(p) for p in planned_packs()],
    conda:
        "../envs/train.yaml"
    shell:
        "python -m workflow_scripts train-summary --csv {output.csv:q} --md {output.md:q} {params.records:q}"
        " 2>&1 | tee {log:q}"


rule train_segment:
    input:
        unpack(get_segment_inputs),
    output:
        TRAIN_LAYOUT.record("{pack}", "{segment}"),
    log:
        TRAIN_LAYOUT.step_log("{pack}", "segment", "{segment}"),
    benchmark:
        f"{BENCH}/train/{{pack}}/segment_{{segment}}.tsv"
    retries: config["train"]["segment_retries"]
    resources:
        runtime=math.ceil(config["train"]["time_limit_minutes"]),
        nodes=config["train"]["nodes"],
        tasks_per_node=config["train"]["gpus_per_node"],
        cpus_per_task=config["train"]["cpus_per_task"] or 1,
        slurm_extra=job_request.slurm_extra(TrainSettings.from_config(config["train"])),
        estimate_s=lambda wildcards: pack_summary(wildcards.pack).estimate_s(),
        attempt=lambda wildcards, attempt: attempt,
    params:
        segments=lambda wildcards: pack_summary(wildcards.pack).segments,
        launch=lambda wildcards: config["train"]["launch"],  # functions: {config} is the trainer's
        margin=config["train"]["save_minutes"],
        finetune=shlex.join(["--finetune-from", config["train"]["finetune_from"]]) if config["train"]["finetune_from"] else "",
    conda:
        "../envs/train.yaml"
    shell:
        "python -m workflow_scripts train-segment --keys {input.pack_keys:q} --segment {wildcards.segment} --segments {params.segments}"
        " --record {output:q} --launch {params.launch:q} --margin-minutes {params.margin} {params.finetune}"
        " --attempt {resources.attempt} > {log:q} 2>&1"


rule train_data_cache:
    """A Megatron-LM pack's GPTDataset index caches (train, valid, test, for the phase it trains) under
    --data-cache-path, built by Megatron-LM's own code on a CPU before the pack's first segment (which waits
    for it), so the GPU job finds them and builds none. Not in the default target: only training asks for it."""
    input:
        pack_keys=TRAIN_LAYOUT.keys("{pack}"),
        config=TRAIN_LAYOUT.config("{pack}", ".args"),
        data=lambda wildcards: [f"{MERGED}/{p}/{p}.{e}" for p in [wildcards.pack, *planned_packs("validation")] for e in ("bin", "idx")],
    output:
        TRAIN_LAYOUT.data_cache("{pack}"),
    log:
        TRAIN_LAYOUT.step_log("{pack}", "data_cache"),
    params:
        world_size=config["train"]["nodes"] * config["train"]["gpus_per_node"],
        python=shlex.join(["--python", config["train"]["megatron_python"]]) if config["train"]["megatron_python"] else "",
    conda:
        "../envs/train.yaml"
    shell:
        "python -m workflow_scripts train-data-cache --keys {input.pack_keys:q} --world-size {params.world_size}"
        " {params.python} --out {output:q} > {log:q} 2>&1"


rule train_finetune_start:
    """Seed 003's start, made by the DAG: the run's checkpoint folder gets a link to train.finetune_from and
    the trainer's tracker naming it (refused where the run has a checkpoint of its own of that name)."""
    input:
        start=config["train"]["finetune_from"] or [],
        pack_keys=lambda wildcards: [p.keys for p in train_chain().packs],  # the plan's end, for the check
    output:
        TRAIN_LAYOUT.file(train_layout.FINETUNE_START),
    log:
        TRAIN_LAYOUT.log("finetune_start"),
    localrule: True
    params:
        checkpoints=CHECKPOINTS,
        trainer=config["train"]["trainer"],
        last_step=lambda wildcards: train_chain().packs[-1].end,
    conda:
        "../envs/train.yaml"
    shell:
        "python -m workflow_scripts finetune-start --checkpoints {params.checkpoints:q} --start {input.start:q}"
        " --trainer {params.trainer} --last-step {params.last_step} --out {output:q} > {log:q} 2>&1"


rule train_import:
    """train.init_from.hf as the trainer's step-0 checkpoint: GPT-NeoX's layout for the base config's TP and
    PP, or Megatron-LM's torch_dist (iter_0000000, loaded at any TP and PP), its vocabulary padded as the
    trainer pads the data tokenizer's for the base config's TP, checked by logits (train/import/import.json).
    A CPU job."""
    input:
        model=lambda wildcards: hf_start.model_files(INIT_HF),
        tokenizer=TOKENIZER,
        merges=TOKENIZER_MERGES,
    output:
        checkpoint=directory(TRAIN_LAYOUT.import_checkpoint(config["train"]["trainer"])),
        check=TRAIN_LAYOUT.import_check,
    log:
        TRAIN_LAYOUT.log("import"),
    params:
        hf=INIT_HF,
        tokenizer=TOKENIZER_OPTS,
        layout=lambda wildcards: hf_start.import_args(config["train"]["base_config"], config["train"]["trainer"]),
    conda:
        "../envs/train.yaml"
    shell:
        "python -m workflow_scripts hf-import --hf {params.hf:q} --tokenizer-model {input.tokenizer:q}"
        " {params.tokenizer} --out {output.checkpoint:q} --check {output.check:q} {params.layout} > {log:q} 2>&1"


rule train_export:
    """A checkpoint of the run as a Hugging Face folder (a pack's last step, or a milestone of
    train.export: GPT-NeoX's global_stepN with the pack's .yml, or Megatron-LM's torch_dist iter_NNNNNNN
    with its .args), checked by logits and tokenizer (train/export/{export}.json). A CPU job."""
    input:
        unpack(get_export_inputs),
        tokenizer=TOKENIZER,
        merges=TOKENIZER_MERGES,
    output:
        folder=directory(TRAIN_LAYOUT.export("{export}")),
        check=TRAIN_LAYOUT.export_check("{export}"),
    log:
        TRAIN_LAYOUT.log("export_{export}"),
    params:
        checkpoint=export_checkpoint,
        tokenizer=TOKENIZER_OPTS,
        source=shlex.join(["--hf-source", INIT_HF]) if INIT_HF else "",
        shard_mb=config["train"]["export"].get("shard_mb", 5000),
        vocab=config["train"]["export"].get("vocab", "padded"),
    conda:
        "../envs/train.yaml"
    shell:
        "python -m workflow_scripts hf-export --checkpoint {params.checkpoint:q} --config {input.config:q}"
        " --tokenizer-model {input.tokenizer:q} {params.tokenizer} --out {output.folder:q} --check {output.check:q}"
        " {params.source} --shard-mb {params.shard_mb} --vocab {params.vocab} > {log:q} 2>&1"


rule train_eval:
    input:
        pack_keys=TRAIN_LAYOUT.keys("{pack}"),
        record=TRAIN_LAYOUT.record("{pack}", "{segment}"),
    output:
        TRAIN_LAYOUT.evaluation("{pack}", "{segment}"),
    resources:
        nodes=1,
        tasks_per_node=config["train"]["gpus_per_node"],
        cpus_per_task=config["train"]["cpus_per_task"] or 1,
        slurm_extra=job_request.slurm_extra(TrainSettings.from_config(config["train"])),
    log:
        TRAIN_LAYOUT.step_log("{pack}", "eval", "{segment}"),
    params:
        launch=lambda wildcards: config["train"]["eval_launch"] or "",
        every=config["train"]["eval_every"],
    conda:
        "../envs/train.yaml"
    shell:
        "python -m workflow_scripts train-eval --keys {input.pack_keys:q} --record {input.record:q} --out {output:q}"
        " --launch {params.launch:q} --every {params.every} > {log:q} 2>&1"


rule train_prune:
    input:
        unpack(lambda wildcards: train_chain().prune_inputs(wildcards.pack, int(wildcards.segment))),
    output:
        TRAIN_LAYOUT.retention("{pack}", "{segment}"),
    log:
        TRAIN_LAYOUT.step_log("{pack}", "retention", "{segment}"),
    localrule: True
    params:
        keep_last=config["train"]["keep_last"],
        milestones=" ".join(map(str, config["train"]["milestones"])),
        protect=lambda wildcards: " ".join(map(str, train_chain().protected)),
    conda:
        "../envs/train.yaml"
    shell:
        "python -m workflow_scripts train-prune --record {input.record:q} --keep-last {params.keep_last}"
        " --milestones {params.milestones} --protect {params.protect} --out {output:q} > {log:q} 2>&1"


rule train_pack:
    input:
        pack_keys=TRAIN_LAYOUT.keys("{pack}"),
        records=lambda wildcards: train_chain().records(wildcards.pack),
        previous=lambda wildcards: train_chain().finish_waits(wildcards.pack),  # a pack without segments: the one before
    output:
        TRAIN_LAYOUT.done("{pack}"),
    log:
        TRAIN_LAYOUT.step_log("{pack}", "done"),
    localrule: True
    conda:
        "../envs/train.yaml"
    shell:
        "python -m workflow_scripts train-finished --keys {input.pack_keys:q} --out {output:q} {input.records:q} > {log:q} 2>&1"


rule train_curve:
    input:
        records=lambda wildcards: train_chain().records(),
        evals=lambda wildcards: train_chain().evaluations(),
    output:
        loss=TRAIN_LAYOUT.file(train_layout.LOSS_CSV),
        png=TRAIN_LAYOUT.file(train_layout.LOSS_PNG),
        evals=TRAIN_LAYOUT.file(train_layout.EVALS_CSV),
        segments=TRAIN_LAYOUT.file(train_layout.SEGMENTS_CSV),
        stats=TRAIN_LAYOUT.file(train_layout.STATS),
    log:
        TRAIN_LAYOUT.log("curve"),
    localrule: True
    params:
        out_dir=lambda wildcards, output: os.path.dirname(output.loss),
    conda:
        "../envs/train.yaml"
    shell:
        "python -m workflow_scripts train-curve --out-dir {params.out_dir:q} --segments {input.records:q}"
        " --evals {input.evals:q} > {log:q} 2>&1"


rule train:
    """Every pack trained to its last step through the segment chain (Slurm jobs with a profile), and the
    Hugging Face exports of train.export; with ``train.detach``, what is left of the chain submitted as
    sbatch jobs (train_detach)."""
    localrule: True
    input:
        lambda wildcards: (
            [TRAIN_LAYOUT.detach_flag]
            if config["train"]["detach"]
            else [*train_chain().target(), *map(TRAIN_LAYOUT.export_check, exports())]
        ),


rule train_detach:
    """Submit what is left of the chain as sbatch jobs, each asking for what the executor would give its rule,
    and return."""
    input:
        pack_keys=lambda wildcards: [p.keys for p in train_chain().packs],
        start=[TRAIN_LAYOUT.file(train_layout.FINETUNE_START)] if config["train"]["finetune_from"] else [],
    output:
        touch(TRAIN_LAYOUT.detach_flag),  # removed once the run succeeded: each `snakemake train` submits again
    log:
        TRAIN_LAYOUT.log("detach"),
    localrule: True
    conda:
        "../envs/train.yaml"
    params:
        train=lambda wildcards: json.dumps(config["train"], sort_keys=True),
        train_dir=lambda wildcards, output: os.path.dirname(os.path.dirname(output[0])),
        logs_dir=LOGS,
        state=TRAIN_LAYOUT.detach_state,
        sft="--sft" if config["tokenize"]["mode"] == "sft" else "",
        # the account, partition and time the Slurm executor would give each kind of job (detach.REQUEST_RULES)
        requests=lambda wildcards, input: json.dumps(
            detach.executor_resources(
                {kind: getattr(rules, name).rule for kind, name in detach.REQUEST_RULES.items()},
                {"wildcards": wildcards, "input": input, "attempt": 1, "threads": 1, "async_run": workflow.async_run},
            )
        ),
    shell:
        "python -m workflow_scripts train-detach --train-json {params.train:q} --train-dir {params.train_dir:q}"
        " --logs-dir {params.logs_dir:q} --state {params.state:q} {params.sft} --requests-json {params.requests:q}"
        " {input.pack_keys:q} 2>&1 | tee -a {log:q}"


# The mark of a detached submission (train_detach) is removed by the Snakefile's onsuccess.


rule status:
    """Where the training stands: segments, Slurm states, iterations, s/iter, ETA, disk, stalls."""
    localrule: True
    log:
        TRAIN_LAYOUT.log("status"),
    params:
        train=lambda wildcards: json.dumps(config["train"], sort_keys=True),
        train_dir=TRAIN,
        logs_dir=LOGS,
    conda:
        "../envs/train.yaml"
    shell:
        "python -m workflow_scripts status --train-json {params.train:q} --train-dir {params.train_dir:q}"
        " --logs-dir {params.logs_dir:q} --suggest 2>&1 | tee {log:q}"
