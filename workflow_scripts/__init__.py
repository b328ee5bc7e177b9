"""snakepack: raw text shards -> training-ready LLM datapacks (the package behind the workflow's rules).

One subpackage per stage over ``core`` (which imports no stage); a stage imports ``core`` and earlier stages
only. ``cli`` is the ``snakepack`` command, with a subcommand per tool.
"""
