"""Stages 5-7: mixtures, the datapack plan, per-pack slicing with a persistent cursor, per-pack merge."""


rule mixture:
    input:
        f"{TOK}/signature.json",
    output:
        f"{OUT}/mixtures/{{mixture}}.json",
    log:
        f"{LOGS}/mixtures/{{mixture}}.log",
    params:
        mixture=lambda wildcards: json.dumps(config["mixtures"][wildcards.mixture], sort_keys=True),
    conda:
        "../envs/data.yaml"
    shell:
        "python -m workflow_scripts.datapacks.mixture --signature {input:q} --name {wildcards.mixture}"
        " --mixture-json {params.mixture:q} --output {output:q} > {log} 2>&1"


checkpoint plan:
    input:
        signature=f"{TOK}/signature.json",
        links=f"{TOK}/counted",
    output:
        json=f"{OUT}/plan.json",
        csv=f"{OUT}/plan.csv",
        md=f"{OUT}/plan.md",
    log:
        f"{LOGS}/plan.log",
    params:
        config=plan_config(),
        merged=MERGED,
    conda:
        "../envs/data.yaml"
    shell:
        "python -m workflow_scripts.datapacks.plan_report --config-json {params.config:q} --signature {input.signature:q}"
        " --json {output.json:q} --csv {output.csv:q} --md {output.md:q} --merged-dir {params.merged:q}"
        " 2>&1 | tee {log}"


rule shuffle_source:
    input:
        multiext(f"{TOK}/{{source}}_text_document", ".bin", ".idx"),
    output:
        multiext(f"{DATAPACKS}/sources/{{source}}", ".bin", ".idx"),
    log:
        f"{LOGS}/datapacks/shuffle_{{source}}.log",
    params:
        prefix=lambda wildcards: f"{TOK}/{wildcards.source}_text_document",
        out=lambda wildcards, output: output[0].removesuffix(".bin"),
        seed=config["seed"],
    conda:
        "../envs/data.yaml"
    shell:
        "python -m workflow_scripts.datapacks.slicer shuffle --prefix {params.prefix:q} --name {wildcards.source}"
        " --seed {params.seed} --output {params.out:q} > {log} 2>&1"


rule slice_pack:
    input:
        plan=ancient(f"{OUT}/plan.json"),
        state=previous_state,
        sources=pack_sources,
    output:
        slices=directory(f"{DATAPACKS}/{{pack}}/slices"),
        listing=f"{DATAPACKS}/{{pack}}/slices.txt",
        state=f"{DATAPACKS}/{{pack}}/state.json",
        stats=f"{DATAPACKS}/{{pack}}/stats.json",
    log:
        f"{LOGS}/datapacks/{{pack}}.log",
    params:
        spec=pack_spec,
        state=lambda wildcards, input: shlex.join(["--state-in", *input.state]) if input.state else "",
        sources=lambda wildcards: (
            shlex.join(["--sources-dir", f"{DATAPACKS}/sources"]) if config["datapacks"]["shuffle"] else ""
        ),
    conda:
        "../envs/data.yaml"
    shell:
        "python -m workflow_scripts.datapacks.slicer slice --plan {input.plan:q} --pack {wildcards.pack} {params.state}"
        " {params.sources} --out-dir {output.slices:q} --list {output.listing:q} --state-out {output.state:q}"
        " --stats {output.stats:q} > {log} 2>&1"


rule merge_pack:
    input:
        slices=f"{DATAPACKS}/{{pack}}/slices",
        listing=f"{DATAPACKS}/{{pack}}/slices.txt",
    output:
        bin=f"{MERGED}/{{pack}}/{{pack}}.bin",
        idx=f"{MERGED}/{{pack}}/{{pack}}.idx",
        merge_log=f"{MERGED}/{{pack}}/{{pack}}.merge.log",
    log:
        f"{LOGS}/merged/{{pack}}.log",
    params:
        prefix=lambda wildcards, output: output.bin.removesuffix(".bin"),
    conda:
        "../envs/data.yaml"
    shell:
        "python -m workflow_scripts.core.indexed_dataset merge --output {params.prefix:q} --log {output.merge_log:q}"
        " --list {input.listing:q} > {log} 2>&1"
