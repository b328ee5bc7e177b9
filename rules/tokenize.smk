"""Stages 3-4, tokenize and count: SentencePiece into Megatron .bin/.idx, count-named links, data signature."""


rule train_tokenizer:
    input:
        corpus_shards,
    output:
        model=f"{OUT}/tokenizer/spm.model",
        vocab=f"{OUT}/tokenizer/spm.vocab",
    log:
        f"{LOGS}/tokenizer/train.log",
    params:
        prefix=lambda wildcards, output: output.model.removesuffix(".model"),
        vocab_size=config["tokenizer"]["vocab_size"],
        model_type=config["tokenizer"]["model_type"],
        max_sentences=config["tokenizer"]["max_sentences"],
        coverage=config["tokenizer"]["character_coverage"],
        symbols=",".join(config["tokenizer"]["control_symbols"]),
        seed=config["seed"],
    conda:
        "../envs/tokenize.yaml"
    shell:
        # One trainer thread: the thread count is part of the model (and changes unigram pieces); it takes seconds.
        "python -m workflow_scripts.tokens.train_tokenizer {input:q} --model-prefix {params.prefix:q}"
        " --vocab-size {params.vocab_size} --model-type {params.model_type}"
        " --max-sentences {params.max_sentences} --character-coverage {params.coverage}"
        " --control-symbols {params.symbols:q} --seed {params.seed} --threads 1 > {log} 2>&1"


rule tokenize:
    input:
        shard=f"{CORPUS}/{{group}}/{{group}}_split_{{split}}{SHARD_EXT}",
        model=TOKENIZER,
    output:
        multiext(f"{TOK}/{{group}}_split_{{split}}_text_document", ".bin", ".idx", ".stats.json", ".quarantine.jsonl"),
    log:
        f"{LOGS}/tokenize/{{group}}_split_{{split}}.log",
    params:
        prefix=lambda wildcards, output: output[0].removesuffix("_text_document.bin"),
        args=tokenize_args(),
    threads: config["tokenize"]["threads"]
    conda:
        "../envs/tokenize.yaml"
    shell:
        "python -m workflow_scripts.tokens.encode --input {input.shard:q} --output-prefix {params.prefix:q}"
        " --tokenizer-model {input.model:q} --workers {threads} {params.args} > {log} 2>&1"


rule tokenize_stats:
    input:
        lambda wildcards: [f"{p}.stats.json" for p in tokenized_prefixes()],
    output:
        f"{TOK}/stats.json",
    log:
        f"{LOGS}/tokenize/stats.log",
    conda:
        "../envs/data.yaml"
    shell:
        "python -m workflow_scripts.core.stage_stats --stage tokenize --output {output:q} {input:q} > {log} 2>&1"


rule count:
    input:
        lambda wildcards: [f"{p}{ext}" for p in tokenized_prefixes() for ext in (".bin", ".idx")],
    output:
        links=directory(f"{TOK}/counted"),
        signature=f"{TOK}/signature.json",
    log:
        f"{LOGS}/count.log",
    params:
        prefixes=lambda wildcards: tokenized_prefixes(),
    conda:
        "../envs/data.yaml"
    shell:
        "python -m workflow_scripts.tokens.count --prefixes {params.prefixes:q} --links-dir {output.links:q}"
        " --signature {output.signature:q} > {log} 2>&1"
