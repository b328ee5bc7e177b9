"""Stage 7, train: per-pack trainer configs from the plan (``configs``, checked by ``lint``; ``summary``), the
training chain as data (``chain``: segments, evaluations, retention), each segment a resumable Slurm job
(``segment``, ``checkpoint_eval``, ``retention``, ``finished``, ``curve``; ``detach`` submits the chain as
sbatch jobs; ``status`` shows where it stands), and a reference torch + DeepSpeed trainer (``reference``).
Reads ``plan.json`` and ``merged/``; writes the train tree of ``core/train_layout.py``.
"""
