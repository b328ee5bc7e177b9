"""Stage 1, ingest. Reads the configured raw files (and the sample); writes, per group
``{lang}_{domain}_{subdomain}``, ``shards/{group}/{group}_split_{NNNN}.jsonl[.zst]`` with its quarantine and
stats, and ``shards/stats.json`` for the stage.
"""


# A checkpoint: a group's shard names are known only once its raw files were read.
checkpoint ingest:
    input:
        lambda wildcards: GROUPS[wildcards.group].files,
    output:
        directory(f"{SHARDS}/{{group}}"),
    log:
        f"{LOGS}/ingest/{{group}}.log",
    benchmark:
        f"{BENCH}/ingest/{{group}}.tsv"
    params:
        settings=lambda wildcards: GROUPS[wildcards.group].args,
    conda:
        "../envs/data.yaml"
    shell:
        write_list("{input:q}", "{log:q}.inputs")
        + " && python -m workflow_scripts ingest --input @{log:q}.inputs --output-dir {output:q} {params.settings} > {log:q} 2>&1"


rule ingest_stats:
    input:
        expand(f"{SHARDS}/{{group}}", group=GROUPS),
    output:
        f"{SHARDS}/stats.json",
    log:
        f"{LOGS}/ingest/stats.log",
    localrule: True
    conda:
        "../envs/data.yaml"
    shell:
        write_list("{input:q}", "{log:q}.inputs")
        + " && python -m workflow_scripts stats --stage ingest --output {output:q} @{log:q}.inputs > {log:q} 2>&1"


# A part of one of the lists of every shard (core/lists.py): the signatures, the shards the
# tokenizer reads, the tokenized prefixes. It waits for the batch jobs that make its shards' files, and lives
# in their directory (see LISTS in common.smk).
rule list_chunk:
    input:
        get_list_chunk_inputs,
    output:
        f"{OUT}/{{listed}}/_lists/{{chunk}}.txt",
    log:
        f"{LOGS}/lists/{{listed}}/{{chunk}}.log",
    wildcard_constraints:
        listed="|".join(map(re.escape, LIST_KIND)),
    params:
        lines=lambda wildcards: lists.chunk_of(list_entries(LIST_KIND[wildcards.listed])[1], wildcards.chunk),
    localrule: True
    conda:
        "../envs/data.yaml"
    shell:
        write_list("{params.lines:q}", "{output:q}") + " 2> {log:q}"
