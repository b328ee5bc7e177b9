"""Stage 7, train: the per-pack trainer configs. Reads ``plan.json``, ``tokenized/signature.json`` and the
user's base config; writes ``train/{pack}/{pack}.yml`` (GPT-NeoX) or ``.args`` (Megatron-LM) with
``keys.json`` (every computed key and why), and ``train/configs.csv/.md`` (iterations, cadence, segments).
"""


rule train_config:
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
        train=json.dumps(config["train"], sort_keys=True),
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
