"""Core: what every stage shares and no stage owns.

- ``indexed_dataset``: the Megatron ``.bin/.idx`` format (build, read, verify, merge, slice);
- ``fsio``: crash-safe writes (temporary name, then rename) and compressed line files;
- ``naming``: every name in the results tree, built and parsed in one place;
- ``settings``: typed settings whose defaults come from ``config/schema.yaml``;
- ``stage_stats``: a stage's ``stats.json`` and the one balance check (in = out + dropped);
- ``cli``: the error convention (a user error is one line and exit status 2);
- ``runtime``: how rule jobs find this package's interpreter.
"""
