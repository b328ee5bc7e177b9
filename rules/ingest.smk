"""Stage 1, ingest: raw vendor files become uniform shards, one checkpoint per group (lang_domain_subdomain)."""


checkpoint ingest:
    input:
        lambda wildcards: GROUPS[wildcards.group].files,
    output:
        directory(f"{SHARDS}/{{group}}"),
    log:
        f"{LOGS}/ingest/{{group}}.log",
    params:
        args=lambda wildcards: GROUPS[wildcards.group].args,
    conda:
        "../envs/data.yaml"
    shell:
        "python -m workflow_scripts.ingest.shards --input {input:q} --output-dir {output:q} {params.args} > {log} 2>&1"


rule ingest_stats:
    input:
        expand(f"{SHARDS}/{{group}}", group=GROUPS),
    output:
        f"{SHARDS}/stats.json",
    log:
        f"{LOGS}/ingest/stats.log",
    conda:
        "../envs/data.yaml"
    shell:
        "python -m workflow_scripts.core.stage_stats --stage ingest --output {output:q} {input:q} > {log} 2>&1"
