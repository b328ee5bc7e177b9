"""Stages 3-4, tokenize and count. Reads the deduplicated (or ingested) shards; writes the tokenizer (when
none is given), ``tokenized/{shard}_text_document.bin/.idx`` (+ stats, quarantine, lineage ledger), ``tokenized/stats.json``,
the count-named links ``tokenized/counted/..._dc=_sc=_tc=``, ``tokenized/signature.json`` and, when asked for
(``lineage_index``), ``tokenized/hash_index``. The user's
``tokenized_sources`` enter here, verified and linked as ``tokenized/{group}_split_{source}-{NNNN}_text_document``.
"""

# A batch member's files, as templates (``{group}`` and ``{shard}``: see batch_args in common.smk).
CORPUS_FILE = f"{CORPUS}/{{group}}/{SHARD_T}{SHARD_EXT}"
TOKENIZED_EXTS = (".bin", ".idx", ".stats.json", ".quarantine.jsonl", ".ledger.npz")  # ledger: lineage's


# A barrier: the one job that lists every shard the tokenizer reads (see signatures_list).
rule corpus_list:
    input:
        lambda wildcards: get_list_chunks("corpus"),
    output:
        f"{CORPUS}/corpus.txt",
    log:
        f"{LOGS}/tokenize/corpus.log",
    localrule: True
    conda:
        "../envs/tokenize.yaml"
    shell:
        "cat /dev/null {input:q} > {output:q} 2> {log:q}"


rule train_tokenizer:
    input:
        f"{CORPUS}/corpus.txt",
    output:
        model=f"{OUT}/tokenizer/spm.model",
        vocab=f"{OUT}/tokenizer/spm.vocab",
    log:
        f"{LOGS}/tokenizer/train.log",
    benchmark:
        f"{BENCH}/tokenizer/train.tsv"
    params:
        prefix=lambda wildcards, output: output.model.removesuffix(".model"),
        settings=TOKENIZER_ARGS,
    conda:
        "../envs/tokenize.yaml"
    shell:
        # One trainer thread: the thread count is part of the model (and changes unigram pieces); it takes seconds.
        "python -m workflow_scripts train-tokenizer @{input:q} --model-prefix {params.prefix:q} {params.settings}"
        " --threads 1 > {log:q} 2>&1"


rule train_hf_tokenizer:
    input:
        f"{CORPUS}/corpus.txt",
    output:
        model=f"{OUT}/tokenizer/tokenizer.json",
        config=f"{OUT}/tokenizer/tokenizer_config.json",
    log:
        f"{LOGS}/tokenizer/train_hf.log",
    benchmark:
        f"{BENCH}/tokenizer/train_hf.tsv"
    params:
        out_dir=lambda wildcards, output: os.path.dirname(output.model),
        settings=TOKENIZER_ARGS,
    conda:
        "../envs/tokenize.yaml"
    shell:
        "python -m workflow_scripts train-tokenizer @{input:q} --kind hf-bpe --output-dir {params.out_dir:q}"
        " {params.settings} > {log:q} 2>&1"


# Per batch of a group's shards, as the dedup steps: a shard is redone only when its input, the tokenizer or
# its outputs changed.
rule tokenize:
    input:
        corpus=get_tokenize_corpus,
        model=TOKENIZER,
        merges=TOKENIZER_MERGES,
    output:
        f"{TOK}/_batches/{BATCH}.json",
    log:
        f"{LOGS}/tokenize/{BATCH}.log",
    benchmark:
        f"{BENCH}/tokenize/{BATCH}.tsv"
    params:
        batch=batch_args(
            TOK,
            inputs=[CORPUS_FILE, TOKENIZER, *TOKENIZER_MERGES],
            outputs=[f"{TOK}/{naming.tokenized_prefix(SHARD_T)}{ext}" for ext in TOKENIZED_EXTS],
            member_log=f"{LOGS}/tokenize/{SHARD_T}.log",
            command=["tokenize", "--input", CORPUS_FILE, "--output-prefix", f"{TOK}/{SHARD_T}"]
            + ["--tokenizer-model", TOKENIZER, *shlex.split(TOKENIZE_ARGS), *shlex.split(TOKENIZER_OPTS)],
        ),
    threads: threads_by_size(config["tokenize"]["threads"], 64)  # one thread per 64 MB of its shards
    resources:
        runtime=runtime_by_size(300),
    conda:
        "../envs/tokenize.yaml"
    shell:
        "python -m workflow_scripts batch --threads {threads} --member-threads {params.batch} > {log:q} 2>&1"


rule import_tokenized:
    input:
        bin=lambda wildcards: f"{IMPORTS[wildcards.imported].prefix}.bin",
        idx=lambda wildcards: f"{IMPORTS[wildcards.imported].prefix}.idx",
        model=lambda wildcards: IMPORTS[wildcards.imported].tokenizer_model,
        merges=lambda wildcards: TOKENIZER_MERGES if IMPORTS[wildcards.imported].tokenizer_model == TOKENIZER else [],
    output:
        multiext(f"{TOK}/{naming.tokenized_prefix('{imported}')}", ".bin", ".idx", ".stats.json", ".ledger.npz"),
    log:
        f"{LOGS}/tokenize/{{imported}}.log",
    params:
        source=lambda wildcards: IMPORTS[wildcards.imported].prefix,
        prefix=lambda wildcards: f"{TOK}/{naming.tokenized_prefix(wildcards.imported)}",
        checks=lambda wildcards: shlex.join(
            ["--eod", IMPORTS[wildcards.imported].eod, *(["--bos", b] if (b := IMPORTS[wildcards.imported].bos) else [])]
            + (shlex.split(TOKENIZER_OPTS) if IMPORTS[wildcards.imported].tokenizer_model == TOKENIZER else [])
        ),
    conda:
        "../envs/tokenize.yaml"
    shell:
        "python -m workflow_scripts import-tokenized --prefix {params.source:q} --output-prefix {params.prefix:q}"
        " --tokenizer-model {input.model:q} {params.checks} > {log:q} 2>&1"


# A barrier: the one job that lists every tokenized prefix (see signatures_list).
rule tokenized_list:
    input:
        lambda wildcards: get_list_chunks("tokenized"),
    output:
        f"{TOK}/prefixes.txt",
    log:
        f"{LOGS}/tokenize/prefixes.log",
    localrule: True
    conda:
        "../envs/tokenize.yaml"
    shell:
        "cat /dev/null {input:q} > {output:q} 2> {log:q}"


rule tokenize_stats:
    input:
        f"{TOK}/prefixes.txt",
    output:
        f"{TOK}/stats.json",
    log:
        f"{LOGS}/tokenize/stats.log",
    localrule: True
    conda:
        "../envs/data.yaml"
    shell:
        "sed 's/$/.stats.json/' {input:q} > {log:q}.inputs"
        " && python -m workflow_scripts stats --stage tokenize --output {output:q} @{log:q}.inputs > {log:q} 2>&1"


rule count:
    input:
        f"{TOK}/prefixes.txt",
    output:
        links=directory(f"{TOK}/counted"),
        signature=f"{TOK}/signature.json",
    log:
        f"{LOGS}/count.log",
    conda:
        "../envs/data.yaml"
    shell:
        "python -m workflow_scripts count --prefixes @{input:q} --links-dir {output.links:q}"
        " --signature {output.signature:q} > {log:q} 2>&1"


# The lineage hash index (not in `all`: `snakemake lineage_index`): every source's content hashes, bucketed and
# sorted, which `snakepack lineage --hash/--text` reads instead of every ledger (workflow_scripts/lineage/
# hash_index.py). The signature is rewritten whenever a tokenized prefix (and its ledger) is, so this reruns.
rule lineage_index:
    input:
        f"{TOK}/signature.json",
    output:
        directory(f"{TOK}/hash_index"),
    log:
        f"{LOGS}/lineage_index.log",
    conda:
        "../envs/data.yaml"
    shell:
        "python -m workflow_scripts lineage-index --signature {input:q} --output {output:q} > {log:q} 2>&1"
