"""Stage 2, dedup. Reads the ingested shards; writes the kept documents (byte-identical lines) under
``dedup/{group}/``, the removed ones with the id they duplicate under ``dedup/{group}/removed/``,
``clusters.tsv``, ``report.json`` and ``stats.json``.

Steps: ``signatures`` (per shard: MinHash, exact hashes) -> ``exact`` and ``bands`` (per hash partition and
LSH band group: candidate pairs, verified by Jaccard) -> ``cluster`` (union-find; one assignment per shard)
-> ``filter`` (per shard) -> ``report``. ``local`` runs them all in one process pool.

- ``params``: the resolved parameters every signature job uses (one job per run); ``settings``: the
  ``dedup`` section, typed, the LSH shape and the files the rules wait for;
- ``text``: normalization and shingling, over ``_shingle`` (compiled); ``verify``: exact Jaccard of pairs;
- ``pairs``: key pairs from sorted hash arrays; ``store``: the one-file array container (mmap), and
  ``sigset`` all of a run's signature stores; ``shards``: shard naming and reading shared by the steps.
"""
