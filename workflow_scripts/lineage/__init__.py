"""Lineage: what the model saw. Reads a pack's trainer config, its merged ``.bin/.idx``, the plan and the
sources' ledgers. Modules:

- ``steps``: which sequences of a pack each global step reads, and which steps read a sequence (the
  trainer's sample order, inverted),
- ``sources``: a pack's documents back to their tokenized sources, from the plan's rows,
- ``query``: ``snakepack lineage`` (``--steps N:M``, ``--doc PATH:SEQ`` or ``FILE:LINE``,
  ``--source-doc SOURCE:DOC``, ``--hash HEX``, ``--text TEXT``, ``--source NAME``, ``--file PATH``) over
  them and the tokenized sources' ledgers (``tokens.ledger``: each document's raw file, line and content
  hash),
- ``hash_index``: ``snakepack lineage-index``, every source's content hashes bucketed and sorted, which
  ``--hash`` and ``--text`` read instead of every ledger (the one module here that writes: its folder).
"""
