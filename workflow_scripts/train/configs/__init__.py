"""Per-pack trainer configs (``snakepack train-config``), one module a concern and one a trainer:

- ``write``: the command: one pack's config and keys file, checked and linted,
- ``checks``: the base config against the plan, the cluster and the data's end of document (``ConfigError``),
  as the trainers' own argument code checks it; ``preflight``: the same from the workflow's config alone,
  when the Snakefile is parsed (``snakemake -n``, ``snakemake plan``), before any job,
- ``keys``: the keys the workflow computes for a pack and why, under GPT-NeoX's names (both trainers),
- ``neox``: GPT-NeoX's YAML: the base read, the model keys of ``train.init_from.hf``, the pack's config,
- ``megatron``: Megatron-LM's arguments: the base read, the keys renamed, pack boundaries and exits.
"""
