"""The embedded sample: a generated multilingual vendor delivery, the default input."""

from workflow_scripts.sample import plan as sample_plan

SAMPLE_DIR = f"{OUT}/sample"


def sample_outputs():
    """The sample's files, or nothing when the sample is disabled."""
    if not config["sample"]["enabled"]:
        return []
    return [f"{SAMPLE_DIR}/{f.name}" for f in sample_plan(config["sample"]["scale"])] + [
        f"{SAMPLE_DIR}/manifest.json"
    ]


rule sample:
    output:
        sample_outputs(),
    log:
        f"{LOGS}/sample.log",
    params:
        outdir=SAMPLE_DIR,
        seed=config["seed"],
        scale=config["sample"]["scale"],
    conda:
        "../envs/data.yaml"
    shell:
        "python -m workflow_scripts.sample --output-dir {params.outdir} --seed {params.seed}"
        " --scale {params.scale} > {log} 2>&1"
