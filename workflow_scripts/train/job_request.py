"""What a training job asks Slurm for, from the ``train`` settings alone (one place for the whole run).

Nodes (``train.nodes``), one rank per GPU (``--ntasks-per-node`` = ``train.gpus_per_node``), CPUs per rank
(``train.cpus_per_task``), GPUs per node with the site's type when it needs one (``--gpus-per-node=mi250:8``;
``train.request_gpus``, ``train.gpu_type``) and the site's own flags (``train.sbatch``). The Snakemake
Slurm plugin takes nodes, ranks and CPUs as resources (it sets those flags itself) and the rest as
``slurm_extra``; the detached chain passes them all to sbatch. No ``--signal``: the segment's watchdog
(``train-segment``) gives the trainer its notice, and Slurm's would also reach Snakemake's own job step,
which SIGUSR1 kills.
"""

from __future__ import annotations

from workflow_scripts.train.settings import TrainSettings


def gpus_per_node(train: TrainSettings) -> str:
    """``--gpus-per-node``'s value: ``8``, or ``mi250:8`` with a GPU type."""
    return f"{train.gpu_type}:{train.gpus_per_node}" if train.gpu_type else str(train.gpus_per_node)


def slurm_extra(train: TrainSettings) -> str:
    """The flags the Slurm plugin leaves to ``slurm_extra``: GPUs and the site's."""
    flags = [f"--gpus-per-node={gpus_per_node(train)}"] if train.request_gpus else []
    return " ".join([*flags, *train.sbatch])


def sbatch_flags(train: TrainSettings, nodes: int | None = None) -> list[str]:
    """Every flag of a training job's request, as sbatch takes them (the detached chain), on ``nodes``
    (default ``train.nodes``; an evaluation takes one)."""
    flags = [f"--nodes={nodes or train.nodes}", f"--ntasks-per-node={train.gpus_per_node}"]
    if train.cpus_per_task:
        flags.append(f"--cpus-per-task={train.cpus_per_task}")
    return [*flags, *slurm_extra(train).split()]
