"""Core: what every stage shares and no stage owns.

- ``indexed_dataset``: the Megatron ``.bin/.idx`` format (read, build; its columns spill to disk through
  ``spill_column``); ``dataset_verify`` checks every invariant, ``dataset_merge`` merges and slices, and
  ``dataset_commands`` holds ``snakepack verify``, ``info`` and ``merge``;
- ``fsio``: crash-safe writes (temporary name, then rename) and compressed line files;
- ``naming``: every name in the results tree, built and parsed in one place (``train_layout``: training);
- ``batches``: the per-shard stages' batch jobs (their shards, options and records); ``lists``: the chunked
  lists of every shard that barrier rules write; ``versioned``: what the rules' input functions read, once per
  version of a file or folder;
- ``settings``: typed settings whose defaults come from ``config/schema.yaml``;
- ``stage_stats``: a stage's ``stats.json`` and the one balance check (in = out + dropped);
- ``cli``: the error convention (a user error is one line and exit status 2); ``config_errors``: one-line
  configuration errors;
- ``runtime``: how rule jobs find this package's interpreter, and small Snakemake helpers; ``slurm_plan``:
  what a dry run under a Slurm profile would submit; ``snakemake_lines``: filters on Snakemake's own
  terminal lines (progress that never goes back, a read-only output in one line); ``run_summary``: what a
  run read, kept and rejected, where its outputs are and the next command, at its end;
- ``schedule``: the training-schedule arithmetic the runbooks did by hand;
- ``progress``: progress bars, periodic log lines and a job's summary line; ``cache``: the user's cache of
  derived data;
- ``compiled``: the one loader of the package's compiled extensions.
"""
