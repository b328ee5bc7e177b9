"""Lineage: what the model saw. Reads a pack's trainer config and its merged ``.bin/.idx``; writes nothing.
Modules:

- ``steps``: which documents of a pack each global step reads, and which steps read a document (the
  trainer's sample order, inverted),
- ``query``: ``snakepack lineage`` (``--steps N:M``, ``--doc PATH:DOC``) over it.
"""
