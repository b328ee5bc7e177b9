"""Stage 1, ingest. Reads raw vendor files (jsonl, jsonl.gz/.zst, one-document-per-line txt, parquet) of one
group ``{lang}_{domain}_{subdomain}``; writes ``shards/{group}/{group}_split_{NNNN}.jsonl[.zst]`` of about
``ingest.shard_size`` bytes, ``quarantine.jsonl`` (file, line, reason) and ``stats.json``.

``shards`` is the stage (a group's files to shards, quarantine and stats), reading each format through
``readers`` (detection, streaming, per-record decoding); ``settings`` types the ``ingest`` section and a
source's own keys. ``sources`` resolves the configured sources into groups at Snakefile parse time (file
names only); ``sample`` writes the embedded demo delivery.
"""
