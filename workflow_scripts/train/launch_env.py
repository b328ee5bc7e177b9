"""``snakepack launch-env``: a training job's launch environment, recovered from Slurm itself.

Usage (inside a Slurm job, in ``train.launch``; config/train/lumi-neox.yaml)::

    vars=$(python -m workflow_scripts launch-env --hostfile "hosts_$SLURM_JOB_ID") || exit 1
    eval "$vars"

With ``mpi: srun`` (profiles/lumi) the Slurm executor's job step (snakemake-executor-plugin-slurm-jobstep
0.6.1, ``Executor.run_job``) runs the rule in the batch step without srun and removes every ``SLURM_*``
variable but the job's identity (``SLURM_JOB_ID``, ``SLURM_JOBID``, the array's, the cluster name and the
submit dir and host) and every ``SRUN_*`` and ``SBATCH_*`` one. A launch written for an sbatch script
(seed 000's ``launch_30_SOTA_example.sh``) then reads unset variables: no node list for ``MASTER_ADDR`` and
the hostfile (DeeperSpeed's ``_parse_hostfile`` refuses an empty one), no ``SLURM_NTASKS`` for
``WORLD_SIZE``, and GPT-NeoX's ``deepy.py`` with ``deepspeed_slurm`` stops at ``SLURM_LOCALID``.

This asks Slurm what the job has (``scontrol show job``: its nodes, tasks, tasks per node and CPUs per
task; ``scontrol show hostnames``: its node names) and prints, as ``export`` lines, the variables sbatch
gives a batch script that the launch, ``deepy.py`` and the ``srun`` of DeeperSpeed's Slurm launcher read
(the step geometry: nodes, tasks per node, CPUs per task), with ``MASTER_ADDR`` (the first node) and
``WORLD_SIZE`` (the tasks); with ``--hostfile`` it writes deepy.py's hostfile, a line
``NODE slots=TASKS_PER_NODE`` per node. Megatron-LM's launch (config/train/megatron-launch.yaml) reads the
variables only: its torchrun gets the nodes, the ranks per node and the rendezvous from them.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from workflow_scripts.core.cli import UserError


@dataclass(frozen=True)
class JobShape:
    """What a Slurm job was given: its nodes (in Slurm's order), tasks, tasks per node, CPUs per task."""

    job_id: str
    nodelist: str  # Slurm's compressed form, e.g. nid[005001-005002]
    hosts: tuple[str, ...]
    tasks: int
    tasks_per_node: int
    cpus_per_task: int

    def variables(self) -> dict[str, str]:
        """The launch's environment: the batch script's own variables (sbatch's values for the batch step:
        rank 0 on node 0), then the rendezvous's."""
        nodes = str(len(self.hosts))
        return {
            "SLURM_JOB_NODELIST": self.nodelist,
            "SLURM_NODELIST": self.nodelist,
            "SLURM_JOB_NUM_NODES": nodes,
            "SLURM_NNODES": nodes,
            "SLURM_NTASKS": str(self.tasks),
            "SLURM_NTASKS_PER_NODE": str(self.tasks_per_node),
            "SLURM_CPUS_PER_TASK": str(self.cpus_per_task),
            "SLURM_NODEID": "0",
            "SLURM_PROCID": "0",
            "SLURM_LOCALID": "0",
            "MASTER_ADDR": self.hosts[0],
            "WORLD_SIZE": str(self.tasks),
        }

    def hostfile(self) -> str:
        """DeepSpeed's hostfile: a line per node, a slot per task."""
        return "".join(f"{host} slots={self.tasks_per_node}\n" for host in self.hosts)


def job_fields(text: str) -> dict[str, str]:
    """The ``Key=value`` fields of ``scontrol show job`` (either layout); the first of a name wins (a later
    one may be inside a command or a path)."""
    fields: dict[str, str] = {}
    for name, value in re.findall(r"(?:^|\s)([A-Za-z/:_]+)=(\S*)", text):
        fields.setdefault(name, value)
    return fields


def shape_of(job_id: str, show_job: str, hostnames: Sequence[str]) -> JobShape:
    """The job's shape from ``scontrol show job``'s text and its expanded node list."""
    fields = job_fields(show_job)
    try:
        nodelist, nodes = fields["NodeList"], int(fields["NumNodes"])
        tasks, cpus = int(fields["NumTasks"]), int(fields["CPUs/Task"])
        per_node = int(fields.get("NtasksPerN:B:S:C", "0").split(":")[0])
    except (KeyError, ValueError) as error:
        raise UserError(f"scontrol show job {job_id}: no {error} in the answer (is it running?)") from None
    if len(hostnames) != nodes:
        raise UserError(f"job {job_id}: NodeList {nodelist} is {len(hostnames)} nodes, NumNodes {nodes}")
    if not per_node:  # asked as --ntasks alone: the tasks spread evenly, or the ranks have no layout
        if tasks % nodes:
            raise UserError(f"job {job_id}: {tasks} tasks on {nodes} nodes: ask --ntasks-per-node")
        per_node = tasks // nodes
    return JobShape(job_id, nodelist, tuple(hostnames), tasks, per_node, cpus)


def scontrol(*args: str) -> str:
    try:
        out = subprocess.run(["scontrol", *args], capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        raise UserError("scontrol is not on PATH: launch-env runs inside a Slurm job") from None
    if out.returncode != 0:
        raise UserError(f"scontrol {' '.join(args)}: {out.stderr.strip() or f'exit {out.returncode}'}")
    return out.stdout


def job_shape(job_id: str) -> JobShape:
    """The running job's shape, from Slurm."""
    show = scontrol("show", "job", job_id)
    nodelist = job_fields(show).get("NodeList")
    return shape_of(job_id, show, scontrol("show", "hostnames", nodelist).split() if nodelist else [])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hostfile", help="where to write DeepSpeed's hostfile (GPT-NeoX's deepy.py)")
    parser.add_argument("--job", default=os.environ.get("SLURM_JOB_ID"), help="the job (default: this one)")
    args = parser.parse_args(argv)
    if not args.job:
        raise UserError("no SLURM_JOB_ID: launch-env runs inside a Slurm job (or give --job)")
    shape = job_shape(args.job)
    if args.hostfile:
        with open(args.hostfile, "w", encoding="utf-8") as f:
            f.write(shape.hostfile())
    for name, value in shape.variables().items():
        print(f"export {name}={shlex.quote(value)}")
    return 0


def check_mpi_tasks(train: Mapping[str, Any], set_resources: Mapping[str, Mapping[str, Any]]) -> None:
    """Refuse, before any job, what the Slurm executor plugin refuses at the first training job: an MPI job
    (a training rule with the ``mpi`` resource in the profile's ``set_resources``: profiles/lumi's
    ``mpi: srun``) of one task per node (snakemake-executor-plugin-slurm 2.8, submit_string.py: "For MPI
    jobs, 'tasks_per_node' must be greater than 1"). A training job has a task per GPU; a detached chain
    (``train.detach``) submits with sbatch itself."""
    rules = sorted(r for r in ("train_segment", "train_eval") if "mpi" in set_resources.get(r, {}))
    tasks_per_node = train["gpus_per_node"]
    if rules and tasks_per_node < 2 and not train["detach"]:
        raise UserError(
            f"train.gpus_per_node: {tasks_per_node} with mpi: srun ({', '.join(rules)}; profiles/lumi): "
            "the Slurm executor plugin refuses an MPI job of one task per node, and a training job has a "
            "task per GPU; use 2 GPUs per node or more (a LUMI-G node has 8 GCDs)"
        )
