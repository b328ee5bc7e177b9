"""Lineage: what the model saw. Reads a pack's trainer config, its merged ``.bin/.idx`` and the plan;
writes nothing. Modules:

- ``steps``: which sequences of a pack each global step reads, and which steps read a sequence (the
  trainer's sample order, inverted),
- ``sources``: a pack's documents back to their tokenized sources, from the plan's rows,
- ``query``: ``snakepack lineage`` (``--steps N:M``, ``--doc PATH:SEQ``, ``--source-doc SOURCE:DOC``) over
  them.
"""
