"""Stage 2, dedup. Reads the ingested shards; writes ``dedup/{group}/{shard}.jsonl`` (kept lines, byte for
byte), ``dedup/{group}/removed/``, ``dedup/clusters.tsv``, ``report.json`` and ``stats.json``. Scattered over
shards (signatures, filter) and gathered by hash partition and LSH band group (exact, bands, cluster).
"""

# A batch member's files, as templates (``{group}`` and ``{shard}``: see batch_args in common.smk).
SHARD_FILE = f"{SHARDS}/{{group}}/{SHARD_T}{SHARD_EXT}"
SIG_FILE = f"{DEDUP_WORK}/sig/{SHARD_T}.sig"
ASSIGN_FILE = f"{ASSIGN}/{SHARD_T}.assign.json"
KEPT_FILE = f"{DEDUP}/{{group}}/{SHARD_T}{SHARD_EXT}"
REMOVED_FILE = f"{DEDUP}/{{group}}/removed/{SHARD_T}{SHARD_EXT}"
FILTER_STATS = f"{DEDUP_WORK}/stats/{SHARD_T}.stats.json"


# The settings resolved once (LSH shape, datasketch's permutations): the signature jobs skip that cost.
rule dedup_params:
    output:
        f"{DEDUP_WORK}/params.json",
    log:
        f"{LOGS}/dedup/params.log",
    params:
        settings=DEDUP_ARGS,
    localrule: True
    conda:
        "../envs/dedup.yaml"
    shell:
        "python -m workflow_scripts dedup-params --output {output:q} {params.settings} > {log:q} 2>&1"


# Per batch of a group's shards (core/batches.py): one job signs them all, and redoes only the shards
# whose inputs or signatures changed.
rule dedup_signatures:
    input:
        shards=get_batch_shards,
        params=f"{DEDUP_WORK}/params.json",
    output:
        f"{DEDUP_WORK}/sig/_batches/{BATCH}.json",
    log:
        f"{LOGS}/dedup/signatures/{BATCH}.log",
    benchmark:
        f"{BENCH}/dedup/signatures/{BATCH}.tsv"
    params:
        batch=batch_args(
            f"{DEDUP_WORK}/sig",
            inputs=[SHARD_FILE, f"{DEDUP_WORK}/params.json"],
            outputs=[SIG_FILE],
            member_log=f"{LOGS}/dedup/signatures/{SHARD_T}.log",
            command=["dedup-signatures", "--input", SHARD_FILE, "--output", SIG_FILE]
            + ["--params", f"{DEDUP_WORK}/params.json"],
        ),
    threads: threads_by_size(config["dedup"]["threads"], 64)
    resources:
        runtime=runtime_by_size(300),
    conda:
        "../envs/dedup.yaml"
    shell:
        "python -m workflow_scripts batch --threads {threads} {params.batch} > {log:q} 2>&1"


# A barrier: the one job that lists every signature, so that the gathers below depend on one file (the
# DAG then grows linearly when the shards become known).
rule signatures_list:
    input:
        lambda wildcards: get_list_chunks("signatures"),
    output:
        f"{DEDUP_WORK}/signatures.txt",
    log:
        f"{LOGS}/dedup/signatures.log",
    localrule: True
    conda:
        "../envs/dedup.yaml"
    shell:
        "cat /dev/null {input:q} > {output:q} 2> {log:q}"


rule dedup_exact:
    input:
        f"{DEDUP_WORK}/signatures.txt",
    output:
        f"{DEDUP_WORK}/pairs/exact_{{part}}.pairs",
    log:
        f"{LOGS}/dedup/exact_{{part}}.log",
    benchmark:
        f"{BENCH}/dedup/exact_{{part}}.tsv"
    params:
        partitions=config["dedup"]["partitions"],
    conda:
        "../envs/dedup.yaml"
    shell:
        "python -m workflow_scripts dedup-exact --signatures @{input:q} --partition {wildcards.part}"
        " --partitions {params.partitions} --output {output:q} > {log:q} 2>&1"


rule dedup_bands:
    input:
        f"{DEDUP_WORK}/signatures.txt",
    output:
        f"{DEDUP_WORK}/pairs/bands_{{band}}_{{part}}.pairs",
    log:
        f"{LOGS}/dedup/bands_{{band}}_{{part}}.log",
    benchmark:
        f"{BENCH}/dedup/bands_{{band}}_{{part}}.tsv"
    params:
        band_groups=config["dedup"]["band_groups"],
        partitions=config["dedup"]["partitions"],
    conda:
        "../envs/dedup.yaml"
    shell:
        "python -m workflow_scripts dedup-bands --signatures @{input:q} --band-group {wildcards.band}"
        " --band-groups {params.band_groups} --partition {wildcards.part} --partitions {params.partitions}"
        " --output {output:q} > {log:q} 2>&1"


# A checkpoint: after it ran, the filters are re-evaluated against their own assignment files, which it
# rewrites only when they change (ASSIGN is its store, not a declared output: Snakemake would empty it).
checkpoint dedup_cluster:
    input:
        signatures=f"{DEDUP_WORK}/signatures.txt",
        pairs=pair_files(DEDUP_WORK, config["dedup"]["partitions"], config["dedup"]["band_groups"]),
    output:
        clusters=f"{DEDUP}/clusters.tsv",
        summary=f"{DEDUP_WORK}/cluster_summary.json",
    log:
        f"{LOGS}/dedup/cluster.log",
    benchmark:
        f"{BENCH}/dedup/cluster.tsv"
    params:
        assign=ASSIGN,
    conda:
        "../envs/dedup.yaml"
    shell:
        write_list("{input.pairs:q}", "{log:q}.pairs")
        + " && python -m workflow_scripts dedup-cluster --signatures @{input.signatures:q} --pairs @{log:q}.pairs"
        " --assign-dir {params.assign:q} --clusters {output.clusters:q} --summary {output.summary:q}"
        " > {log:q} 2>&1"


rule dedup_filter:
    input:
        shards=get_batch_shards,
        # Each rewritten by the cluster step only when its shard's outcome changes.
        assign=get_batch_assignments,
        # The edge to the cluster step (the assignment store is not a declared output); ancient(): a new
        # clusters.tsv alone reruns nothing.
        clusters=ancient(f"{DEDUP}/clusters.tsv"),
    output:
        f"{DEDUP}/_batches/{BATCH}.json",
    log:
        f"{LOGS}/dedup/filter/{BATCH}.log",
    params:
        batch=batch_args(
            DEDUP,
            inputs=[SHARD_FILE, ASSIGN_FILE],
            outputs=[KEPT_FILE, REMOVED_FILE, FILTER_STATS],
            member_log=f"{LOGS}/dedup/filter/{SHARD_T}.log",
            command=["dedup-filter", "--input", SHARD_FILE, "--assign", ASSIGN_FILE, "--output", KEPT_FILE]
            + ["--removed", REMOVED_FILE, "--stats", FILTER_STATS],
        ),
    # Before tokenize jobs: each frees a batch's tokenize job, so the largest are not left to start last.
    priority: 1
    threads: threads_by_size(config["dedup"]["threads"], 256)
    resources:
        runtime=runtime_by_size(1200),
    conda:
        "../envs/dedup.yaml"
    shell:
        "python -m workflow_scripts batch --threads {threads} {params.batch} > {log:q} 2>&1"


rule dedup_report:
    input:
        # After the corpus list, every filter job (and so every per-shard statistics file) is done.
        corpus=f"{CORPUS}/corpus.txt",
        summary=f"{DEDUP_WORK}/cluster_summary.json",
    output:
        stats=f"{DEDUP}/stats.json",
        report=f"{DEDUP}/report.json",
    log:
        f"{LOGS}/dedup/report.log",
    localrule: True
    conda:
        "../envs/dedup.yaml"
    params:
        stats_dir=f"{DEDUP_WORK}/stats",
    shell:
        "python -m workflow_scripts dedup-report --shards @{input.corpus:q} --stats-dir {params.stats_dir:q}"
        " --summary {input.summary:q} --output-stats {output.stats:q} --report {output.report:q} > {log:q} 2>&1"
