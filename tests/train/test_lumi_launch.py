"""The LUMI launch (config/train/lumi-neox.yaml's ``train.launch`` with profiles/lumi's ``mpi: srun``) starts:
the job's nodes, tasks and hostfile recovered from Slurm (``snakepack launch-env``) reach GPT-NeoX's
``deepy.py`` and DeeperSpeed's Slurm launcher (the LUMI fork's tree and the ``trainers`` fixture's
DeeperSpeed), which start one rank per task.

- Through the local Slurm: the launch runs as Snakemake's Slurm executor runs a rule with ``mpi: srun``
  (the jobstep plugin's own code strips the job's ``SLURM_*`` variables), and DeeperSpeed's ``srun`` starts
  the ranks. The test cluster is one node, so this is the 1-node launch with 2 ranks.
- Without Slurm: a 2-node LUMI job's ``scontrol show job`` answer (its layout copied from Slurm 22.05's),
  its node list expanded by Slurm's own ``scontrol show hostnames``, through the same code of the trainers.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest
import yaml

from tests.train.slurm_jobs import job_environment, run_snakefile, slurm_cluster  # noqa: F401 (a fixture)
from tests.trainers import Trainers
from tests.utils import snakemake_env, tail
from workflow_scripts.core.fsio import write_json
from workflow_scripts.train import checkpoint_eval, launch_env
from workflow_scripts.train.hf import config as hf_config

REPO = Path(__file__).resolve().parents[2]
LUMI = yaml.safe_load((REPO / "config" / "train" / "lumi-neox.yaml").read_text())["train"]

# The "Slurm launching" keys of the fork's own train_configs/30B_SOTA_*.yml (seed 000's configs).
SLURM_KEYS = {"launcher": "slurm", "deepspeed_slurm": True, "no_ssh_check": True}

# Stands in for GPT-NeoX's train.py, which needs a GPU: the rank's arguments as train.py loads them
# (NeoXArgs.consume_neox_args, configure_distributed_args), and the rendezvous it would use.
PROBE_TRAIN = """\
import json, os, socket, sys
from megatron.neox_arguments import NeoXArgs
args = NeoXArgs.consume_neox_args()
args.configure_distributed_args()
seen = {k: os.environ.get(k) for k in ("MASTER_ADDR", "MASTER_PORT", "SLURM_STEP_ID", "SLURM_JOB_ID")}
with open(os.path.join(os.environ["PROBE_OUT"], f"rank{args.rank}.json"), "w") as f:
    json.dump({"rank": args.rank, "local_rank": args.local_rank, "world_size": args.world_size,
               "host": socket.gethostname(), **seen}, f)
"""

# What deepy.py does before it execs DeeperSpeed's launcher (the fork's deepy.py, its NeoXArgs), then
# DeeperSpeed's own argument handling, hostfile parsing (_parse_hostfile) and Slurm launcher command.
LAUNCHER = """\
import contextlib, io, json, sys
import deepspeed.launcher.runner as runner
from deepspeed.launcher.multinode_runner import SlurmRunner
from megatron.neox_arguments import NeoXArgs
with contextlib.redirect_stdout(io.StringIO()):
    neox = NeoXArgs.consume_deepy_args(["train.py", sys.argv[1]])
    main_args = neox.get_deepspeed_main_args()
args = runner.parse_args(main_args)
pool = runner.fetch_hostfile(args.hostfile)
active = runner.parse_inclusion_exclusion(pool, args.include, args.exclude)
cmd = SlurmRunner(args, runner.encode_world_info(active), pool).get_cmd({}, active)
print(json.dumps({"pool": pool, "master_addr": args.master_addr, "world_size": neox.world_size,
                  "global_num_gpus": neox.global_num_gpus, "srun": cmd[:3],
                  "user": cmd[cmd.index("-u") + 1]}))
"""

# A LUMI job of 2 nodes x 8 ranks, as `scontrol show job` answers (the layout of Slurm 22.05's answer).
TWO_NODES = """\
JobId=8123456 JobName=e2a9c0de-7f16-4bd5-a0f1-1f2d3c4b5a69
   UserId=user(1001) GroupId=pepr_user(1001) MCS_label=N/A
   JobState=RUNNING Reason=None Dependency=(null)
   Partition=standard-g AllocNode:Sid=uan01:12345
   ReqNodeList=(null) ExcNodeList=(null)
   NodeList=nid[005001-005002]
   BatchHost=nid005001
   NumNodes=2 NumCPUs=256 NumTasks=16 CPUs/Task=7 ReqB:S:C:T=0:0:*:*
   TRES=cpu=256,mem=960G,node=2,billing=256,gres/gpu=16
   Socks/Node=* NtasksPerN:B:S:C=8:0:*:1 CoreSpec=*
   Command=(null)
   WorkDir=/scratch/project_465000000/run
   Comment=rule_train_segment_wildcards_main_1_0
"""


def plugin_stripped(env: dict[str, str]) -> dict[str, str]:
    """The job step's environment as snakemake-executor-plugin-slurm-jobstep 0.6.1 leaves it for a rule
    (Executor.run_job, __init__.py lines 208-226: keep_slurm, then every other SLURM_*, SRUN_*, SBATCH_*
    removed). For the tests without Slurm; the Slurm test runs the plugin's own code."""
    keep = {"SLURM_JOB_ID", "SLURM_JOBID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID",
            "SLURM_ARRAY_TASK_MIN", "SLURM_ARRAY_TASK_MAX", "SLURM_ARRAY_TASK_STEP", "SLURM_CLUSTER_NAME",
            "SLURM_SUBMIT_DIR", "SLURM_SUBMIT_HOST"}  # fmt: skip
    return {k: v for k, v in env.items() if not k.startswith(("SRUN_", "SBATCH_", "SLURM_")) or k in keep}


def neox_config(path: Path) -> Path:
    """The sample's GPT-NeoX base config with the Slurm launching keys of the fork's own configs."""
    config = yaml.safe_load((REPO / "config" / "train" / "neox-sample.yml").read_text()) | SLURM_KEYS
    path.write_text(yaml.safe_dump(config))
    return path


def neox_dir(trainers: Trainers, root: Path) -> Path:
    """A GPT-NeoX folder for the launch's ``$NEOX_DIR``: the fork's deepy.py and megatron package, and a
    train.py that reports the rank's arguments instead of training (PROBE_TRAIN)."""
    fork = trainers.tree("fork")
    root.mkdir()
    for name in ("deepy.py", "megatron"):
        (root / name).symlink_to(fork / name)
    (root / "train.py").write_text(PROBE_TRAIN)
    return root


def site_stubs(trainers: Trainers, root: Path) -> Path:
    """LUMI's tools that this machine has not, as commands on PATH (no device call is stubbed):
    ``module`` (Lmod: the modules only bind LUMI's file systems into the image) does nothing, and
    ``singularity exec -B BINDS IMAGE CMD...`` runs CMD here with the trainers' Python as the image's."""
    root.mkdir()
    (root / "module").write_text("#!/bin/sh\nexit 0\n")
    (root / "singularity").write_text(
        textwrap.dedent(f"""\
        #!/bin/bash
        [ "$1" = exec ] && [ "$2" = -B ] || {{ echo "singularity stub: unexpected $*" >&2; exit 2; }}
        shift 4
        PATH={shlex.quote(str(Path(trainers.python).parent))}:$PATH exec "$@"
        """)
    )
    for tool in root.iterdir():
        tool.chmod(0o755)
    return root


def test_launch_env_of_a_two_node_lumi_job_starts_deeperspeeds_slurm_launcher(trainers, tmp_path):
    """2 LUMI nodes: the hostfile and variables from `scontrol show job`'s answer pass the fork's deepy.py
    and DeeperSpeed's own `_parse_hostfile` and argument handling; its Slurm launcher asks srun for 16
    ranks. In the plugin's environment without them, deepy.py stops at the first SLURM_* it reads."""
    if shutil.which("scontrol") is None:
        pytest.skip("no Slurm client: `scontrol show hostnames` expands the node list")
    hosts = subprocess.run(["scontrol", "show", "hostnames", "nid[005001-005002]"], capture_output=True,
                           text=True, check=True).stdout.split()  # fmt: skip
    shape = launch_env.shape_of("8123456", TWO_NODES, hosts)
    assert (shape.hosts, shape.tasks, shape.tasks_per_node, shape.cpus_per_task) == (
        ("nid005001", "nid005002"), 16, 8, 7)  # fmt: skip
    hostfile = tmp_path / "hosts_8123456"
    hostfile.write_text(shape.hostfile())
    config = neox_config(tmp_path / "lumi.yml")
    stripped = plugin_stripped(os.environ | {"SLURM_JOB_ID": "8123456", "SLURM_NTASKS": "16"})
    env = stripped | shape.variables() | {"DLTS_HOSTFILE": str(hostfile), "MASTER_PORT": "9835"}
    proc = trainers.run("fork", ["-c", LAUNCHER, str(config)], env=env, timeout=300)
    assert proc.returncode == 0, tail(proc.stdout + proc.stderr)
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["pool"] == {"nid005001": 8, "nid005002": 8} and got["master_addr"] == "nid005001"
    assert got["world_size"] == 16 and got["global_num_gpus"] == 16  # deepy's own rank: 0 of 16
    assert got["srun"] == ["srun", "-n", "16"] and got["user"] == "train.py"

    # the same in the plugin's environment without launch-env: deepy.py stops before the launcher
    bare = stripped | {"DLTS_HOSTFILE": str(hostfile), "MASTER_ADDR": "nid005001"}
    proc = trainers.run("fork", ["-c", LAUNCHER, str(config)], env=bare, timeout=300)
    assert proc.returncode != 0 and "KeyError: 'SLURM_LOCALID'" in proc.stderr, tail(proc.stderr)


@pytest.mark.slurm
def test_the_lumi_launch_starts_its_ranks_through_the_slurm_executor(slurm_cluster, trainers, tmp_path):  # noqa: F811
    """lumi-neox.yaml's launch, as it is, in a job of Snakemake's Slurm executor with `mpi: srun` (the
    jobstep plugin strips SLURM_*): deepy.py of the fork, DeeperSpeed's Slurm launcher and srun start
    2 ranks that see rank 0 and 1 of 2 and the job's node as MASTER_ADDR."""
    work, out = tmp_path / "wf", tmp_path / "ranks"
    work.mkdir()
    out.mkdir()
    config = neox_config(work / "lumi.yml")
    launch = LUMI["launch"].format(config=str(config), pack="main_1")
    (work / "launch.sh").write_text(launch)
    snakefile = textwrap.dedent("""\
        rule launch:
            output: "launched"
            resources: mpi="srun", nodes=1, tasks_per_node=2, cpus_per_task=1
            shell: "bash launch.sh > launch.log 2>&1 && env > job.env && touch {output}"
        """)
    stubs = site_stubs(trainers, tmp_path / "stubs")
    env = {
        "PATH": f"{stubs}:{snakemake_env()['PATH']}",
        "NEOX_DIR": str(neox_dir(trainers, tmp_path / "neox")),
        "SNAKEPACK_NEOX_IMAGE": "/appl/gpt-neox.sif",
        "PROBE_OUT": str(out),
    }
    proc = run_snakefile(work, snakefile, env)
    log = (work / "launch.log").read_text() if (work / "launch.log").exists() else ""
    assert proc.returncode == 0, tail(proc.stdout + proc.stderr) + "\n--- launch.log\n" + tail(log)
    job_env = job_environment(work / "job.env")
    assert "SLURM_NTASKS" not in job_env and "SLURM_JOB_NODELIST" not in job_env  # the plugin stripped them
    job = job_env["SLURM_JOB_ID"]
    assert (work / f"hosts_{job}").read_text() == "localhost slots=2\n"
    ranks = sorted((json.loads(p.read_text()) for p in out.glob("rank*.json")), key=lambda r: r["rank"])
    assert [(r["rank"], r["local_rank"], r["world_size"]) for r in ranks] == [(0, 0, 2), (1, 1, 2)], log
    assert {(r["MASTER_ADDR"], r["MASTER_PORT"], r["SLURM_JOB_ID"]) for r in ranks} == {
        ("localhost", "9835", job)
    }
    assert all(r["SLURM_STEP_ID"] not in (None, "batch") for r in ranks)  # started by srun, in a step


def test_a_job_shape_reads_slurms_own_fields_only():
    """The first field of a name is Slurm's (a later one can sit in a command or a path); a job asked by
    --ntasks alone spreads its tasks evenly over its nodes, or has no rank layout to give."""
    text = TWO_NODES.replace("NtasksPerN:B:S:C=8:0:*:1", "NtasksPerN:B:S:C=0:0:*:*") + (
        "   Command=/scratch/run.sh NodeList=nid[000001-000009] NumTasks=3\n"
    )
    shape = launch_env.shape_of("8123456", text, ["nid005001", "nid005002"])
    assert (shape.nodelist, shape.tasks, shape.tasks_per_node) == ("nid[005001-005002]", 16, 8)
    assert shape.variables()["SLURM_NTASKS_PER_NODE"] == "8" and shape.variables()["SLURM_NNODES"] == "2"
    with pytest.raises(launch_env.UserError, match="15 tasks on 2 nodes"):
        launch_env.shape_of("8123456", text.replace("NumTasks=16", "NumTasks=15"), ["nid005001", "nid005002"])
    with pytest.raises(launch_env.UserError, match="is 1 nodes, NumNodes 2"):
        launch_env.shape_of("8123456", text, ["nid005001"])


# Stands in for the fork's pp_tester_single.py, which converts the checkpoint and evaluates it on a GPU:
# its own argument parser (the parse_args function of its source, run as it is) on the launch's arguments.
PROBE_PP_TESTER = """\
import argparse, ast, json, sys
source = open(sys.argv.pop(1)).read()
parse_args = next(n for n in ast.parse(source).body if getattr(n, "name", None) == "parse_args")
space = {"argparse": argparse}
exec(compile(ast.Module([parse_args], []), "pp_tester_single.py", "exec"), space)
print("pp_tester_single.py arguments:", json.dumps(vars(space["parse_args"]())))
"""


def test_the_lumi_evaluation_converts_the_checkpoint_as_the_models_architecture(
    trainers, tmp_path, monkeypatch, capsys
):
    """lumi-neox.yaml's eval_launch through train-eval: the fork's pp_tester_single.py (whose --architecture
    defaults to neox) is told `llama` for a LLaMA-shaped model (train.init_from.hf's keys) and `neox` for
    GPT-NeoX's layers (the sample's base config); a model of neither is refused."""
    neox = trainers.tree("fork")
    folder = tmp_path / "neox"
    folder.mkdir()
    (folder / "pp_tester_single.py").write_text(PROBE_PP_TESTER)
    stubs = site_stubs(trainers, tmp_path / "stubs")
    (stubs / "srun").write_text('#!/bin/bash\nwhile [[ $1 == -* ]]; do shift; done\nexec "$@"\n')
    (stubs / "srun").chmod(0o755)
    monkeypatch.setenv("PATH", f"{stubs}:{os.environ['PATH']}")
    for name, value in {"NEOX_DIR": str(folder), "SNAKEPACK_NEOX_IMAGE": "/appl/gpt-neox.sif",
                        "SNAKEPACK_TEST_FOLDER": "/t", "SNAKEPACK_PP_CSV": "/t/pp.csv",
                        "SNAKEPACK_TMP": "/t/tmp"}.items():  # fmt: skip
        monkeypatch.setenv(name, value)
    launch = LUMI["eval_launch"].replace(
        "pp_tester_single.py", f"pp_tester_single.py {neox}/pp_tester_single.py"
    )
    base = yaml.safe_load((REPO / "config" / "train" / "neox-sample.yml").read_text())
    for architecture, model in {"neox": {}, "llama": hf_config.LLAMA_FIXED}.items():
        config = tmp_path / f"{architecture}.yml"
        config.write_text(yaml.safe_dump(base | model | {"save": str(tmp_path / "checkpoints")}))
        keys = tmp_path / f"{architecture}.keys.json"
        values = {"iteration_offset": 0, "train_iters": 4, "exit_interval": 4, "save": str(tmp_path / "ckpt")}
        write_json(keys, {"summary": {"pack": "main_1"}, "config": str(config),
                          "set": {k: {"value": v} for k, v in values.items()}})  # fmt: skip
        record = tmp_path / "0.json"
        write_json(record, {"segment": 0, "checkpoint": "global_step4", "iterations": 4, "first_step": 0,
                            "last_step": 4, "checkpoints": str(tmp_path / "ckpt")})  # fmt: skip
        args = ["--keys", str(keys), "--record", str(record), "--out", str(tmp_path / "eval.json")]
        assert checkpoint_eval.main([*args, "--launch", launch]) == 0
        line = next(s for s in capsys.readouterr().out.splitlines() if s.startswith("pp_tester_single.py"))
        parsed = json.loads(line.split(":", 1)[1])
        assert parsed["architecture"] == architecture, line
        assert parsed["ckpt_path"] == str(tmp_path / "ckpt" / "global_step4")
        assert parsed["config"] == str(config) and parsed["neox_path"] == str(folder)
    config.write_text(yaml.safe_dump(base | {"norm": "rmsnorm", "save": str(tmp_path / "checkpoints")}))
    with pytest.raises(launch_env.UserError, match="neither LLaMA's layers"):  # the converter takes neither
        checkpoint_eval.main([*args, "--launch", launch])


def test_one_gpu_per_node_with_profiles_lumi_is_refused_before_any_job(workflow):
    """profiles/lumi starts training jobs with `mpi: srun`, which the Slurm plugin refuses with one task per
    node (its submit_string.py: "For MPI jobs, 'tasks_per_node' must be greater than 1"): `snakemake train`
    says so before any job; a data run of the same config (the sample's 1 GPU) is not refused."""
    env = snakemake_env() | {"SNAKEPACK_SLURM_ACCOUNT": "project_465000000"}
    (workflow.root / "lumi.yaml").write_text(yaml.safe_dump({"train": LUMI | {"gpus_per_node": 1}}))
    for target in ("train", "sample"):
        args = ("--dry-run", "--profile", "profiles/lumi", target, "--configfile", "config/sample.yaml")
        proc = workflow.run(*args, "lumi.yaml", timeout_s=120, env=env)
        if target == "train":
            assert proc.returncode != 0 and "train.gpus_per_node: 1 with mpi: srun" in proc.output, tail(
                proc.output
            )
        else:
            assert proc.returncode == 0, tail(proc.output)
