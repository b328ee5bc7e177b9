"""Stage 2, dedup: MinHash near-duplicate (and exact) removal, scattered over shards, gathered by LSH band."""


rule dedup_signatures:
    input:
        f"{SHARDS}/{{group}}/{{group}}_split_{{split}}{SHARD_EXT}",
    output:
        f"{DEDUP_WORK}/sig/{{group}}_split_{{split}}.sig",
    log:
        f"{LOGS}/dedup/signatures/{{group}}_split_{{split}}.log",
    params:
        settings=dedup_args(),
    conda:
        "../envs/dedup.yaml"
    shell:
        "python -m workflow_scripts.dedup.signatures --input {input:q} --output {output:q} {params.settings}"
        " > {log} 2>&1"


rule dedup_exact:
    input:
        dedup_signatures,
    output:
        f"{DEDUP_WORK}/pairs/exact_{{part}}.pairs",
    log:
        f"{LOGS}/dedup/exact_{{part}}.log",
    params:
        partitions=config["dedup"]["partitions"],
    conda:
        "../envs/dedup.yaml"
    shell:
        "python -m workflow_scripts.dedup.exact --signatures {input:q} --partition {wildcards.part}"
        " --partitions {params.partitions} --output {output:q} > {log} 2>&1"


rule dedup_bands:
    input:
        dedup_signatures,
    output:
        f"{DEDUP_WORK}/pairs/bands_{{band}}_{{part}}.pairs",
    log:
        f"{LOGS}/dedup/bands_{{band}}_{{part}}.log",
    params:
        groups=config["dedup"]["band_groups"],
        partitions=config["dedup"]["partitions"],
    conda:
        "../envs/dedup.yaml"
    shell:
        "python -m workflow_scripts.dedup.bands --signatures {input:q} --group {wildcards.band}"
        " --groups {params.groups} --partition {wildcards.part} --partitions {params.partitions}"
        " --output {output:q} > {log} 2>&1"


checkpoint dedup_cluster:
    input:
        signatures=dedup_signatures,
        pairs=dedup_pair_files(),
    output:
        assign=directory(f"{DEDUP_WORK}/assign"),
        clusters=f"{DEDUP}/clusters.tsv",
        summary=f"{DEDUP_WORK}/cluster_summary.json",
    log:
        f"{LOGS}/dedup/cluster.log",
    conda:
        "../envs/dedup.yaml"
    shell:
        "python -m workflow_scripts.dedup.cluster --signatures {input.signatures:q} --pairs {input.pairs:q}"
        " --assign-dir {output.assign:q} --clusters {output.clusters:q} --summary {output.summary:q} > {log} 2>&1"


rule dedup_filter:
    input:
        shard=f"{SHARDS}/{{group}}/{{group}}_split_{{split}}{SHARD_EXT}",
        # Every cluster run rewrites all assignments; a shard is filtered again only when its own changed.
        assign=ancient(f"{DEDUP_WORK}/assign"),
    output:
        kept=f"{DEDUP}/{{group}}/{{group}}_split_{{split}}{SHARD_EXT}",
        removed=f"{DEDUP}/{{group}}/removed/{{group}}_split_{{split}}{SHARD_EXT}",
        stats=f"{DEDUP_WORK}/stats/{{group}}_split_{{split}}.stats.json",
    log:
        f"{LOGS}/dedup/filter/{{group}}_split_{{split}}.log",
    params:
        assign=lambda wildcards, input: f"{input.assign}/{wildcards.group}_split_{wildcards.split}.assign.json",
        assign_digest=assign_digest,
    conda:
        "../envs/dedup.yaml"
    shell:
        "python -m workflow_scripts.dedup.filter --input {input.shard:q} --assign {params.assign:q}"
        " --output {output.kept:q} --removed {output.removed:q} --stats {output.stats:q} > {log} 2>&1"


rule dedup_report:
    input:
        stats=lambda wildcards: [f"{DEDUP_WORK}/stats/{shard_stem(s)}.stats.json" for s in all_shards()],
        summary=f"{DEDUP_WORK}/cluster_summary.json",
    output:
        stats=f"{DEDUP}/stats.json",
        report=f"{DEDUP}/report.json",
    log:
        f"{LOGS}/dedup/report.log",
    conda:
        "../envs/dedup.yaml"
    shell:
        "python -m workflow_scripts.dedup.report --stats {input.stats:q} --summary {input.summary:q}"
        " --output-stats {output.stats:q} --report {output.report:q} > {log} 2>&1"
