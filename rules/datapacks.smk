"""Stages 5-6, mixtures and datapacks. Reads ``tokenized/signature.json`` and the counted prefixes; writes
``mixtures/{name}.json``, the plan (``plan.json/.csv/.md``) and, per pack, ``merged/{pack}/{pack}.bin/.idx``
with its cursor ``state.json`` and ``stats.json`` in ``datapacks/{pack}/``.
"""


rule mixture:
    input:
        f"{TOK}/signature.json",
    output:
        f"{OUT}/mixtures/{{mixture}}.json",
    log:
        f"{LOGS}/mixtures/{{mixture}}.log",
    localrule: True
    params:
        mixture=lambda wildcards: json.dumps(config["mixtures"][wildcards.mixture], sort_keys=True),
    conda:
        "../envs/data.yaml"
    shell:
        "python -m workflow_scripts mixture --signature {input:q} --name {wildcards.mixture}"
        " --mixture-json {params.mixture:q} --output {output:q} > {log:q} 2>&1"


# A checkpoint: the packs are known once the plan is made; after it ran, each pack is re-evaluated against
# its spec file, which the plan rewrites only when it changed. When it runs, it keeps the packs up to the
# last one whose training started as they are (datapacks/started.py: it looks in the train folder, which is
# no input of it, so training never reruns it).
checkpoint plan:
    input:
        signature=f"{TOK}/signature.json",
        links=f"{TOK}/counted",
        # datapacks.exclude given as a file listing the documents: a change of it plans again
        exclude=lambda wildcards: [x] if isinstance(x := config["datapacks"].get("exclude"), str) else [],
    output:
        json=f"{OUT}/plan.json",
        # its table, beside it (workflow_scripts/datapacks/plan_table.py)
        slices=f"{OUT}/plan.slices.parquet",
        sources=f"{OUT}/plan.sources.parquet",
        csv=f"{OUT}/plan.csv",
        md=f"{OUT}/plan.md",
    log:
        f"{LOGS}/plan.log",
    localrule: True
    params:
        config=inputs.plan_json(config),
        merged=MERGED,
        specs=SPECS,
        train=TRAIN,
    conda:
        "../envs/data.yaml"
    shell:
        "python -m workflow_scripts plan --config-json {params.config:q} --signature {input.signature:q}"
        " --json {output.json:q} --csv {output.csv:q} --md {output.md:q} --merged-dir {params.merged:q}"
        " --specs-dir {params.specs:q} --train-dir {params.train:q}"
        " 2>&1 | tee {log:q}"


# One job per pack, from its spec alone (its start cursors are in it): the packs are written in parallel.
rule pack:
    input:
        # The plan rewrites a pack's spec only when the pack's slices or its sources' content changed.
        spec=get_pack_spec,
        # The edge to the plan (the specs are not declared outputs); ancient(): a new plan alone reruns
        # nothing.
        plan=ancient(f"{OUT}/plan.json"),
    output:
        bin=f"{MERGED}/{{pack}}/{{pack}}.bin",
        idx=f"{MERGED}/{{pack}}/{{pack}}.idx",
        state=f"{DATAPACKS}/{{pack}}/state.json",
        stats=f"{DATAPACKS}/{{pack}}/stats.json",
    log:
        f"{LOGS}/datapacks/{{pack}}.log",
    benchmark:
        f"{BENCH}/datapacks/{{pack}}.tsv"
    params:
        prefix=lambda wildcards, output: output.bin.removesuffix(".bin"),
    conda:
        "../envs/data.yaml"
    shell:
        "python -m workflow_scripts pack --spec {input.spec:q} --output {params.prefix:q}"
        " --state-out {output.state:q} --stats {output.stats:q} > {log:q} 2>&1"
