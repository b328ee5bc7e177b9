"""Stage 7, train (to come): per-pack trainer configs from the plan, a reference torch + DeepSpeed trainer,
and each pack trained as a chain of resumable Slurm segments. Reads ``plan.json`` and ``merged/``; will write
``train/{pack}/``.
"""
