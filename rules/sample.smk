"""The embedded sample: a generated multilingual vendor delivery (raw files and manifest.json under
``sample/``), the default input. Reads nothing.
"""


rule sample:
    output:
        inputs.sample_files(config, SAMPLE_DIR),
    log:
        f"{LOGS}/sample.log",
    params:
        outdir=lambda wildcards, output: os.path.dirname(output[-1]),
        seed=config["seed"],
        scale=config["sample"]["scale"],
    conda:
        "../envs/data.yaml"
    shell:
        "python -m workflow_scripts sample --output-dir {params.outdir:q} --seed {params.seed} --scale {params.scale}"
        " > {log:q} 2>&1"
