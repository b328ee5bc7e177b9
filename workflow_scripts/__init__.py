"""snakepack: raw text shards -> training-ready LLM datapacks (the package behind the workflow's rules).

One subpackage per stage over ``core`` (which imports no stage); a stage imports ``core`` and earlier stages
only: ``ingest``, ``dedup``, ``tokens``, ``datapacks``, ``train``, ``lineage`` (what the model saw), then
``report`` (which reads them all).
``cli`` is the ``snakepack`` command, with a subcommand per tool; ``batch`` runs one of them for every shard
of a batch job (``snakepack batch``); ``inputs`` checks the run's inputs from the config when the Snakefile
is parsed.
"""
