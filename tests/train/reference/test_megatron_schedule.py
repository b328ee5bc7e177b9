"""The reference trainer's learning rate and weight decay on a Megatron-LM run are Megatron-LM's own.

One Megatron-LM process (``SCHEDULER``) builds the pin's ``OptimizerParamScheduler`` as
``training.get_optimizer_param_scheduler`` does, from each pack's arguments through ``parse_args`` +
``validate_args``; a later pack's is loaded from the state the previous pack's saved at its end (as
``load_checkpoint`` does), and it is stepped one global batch of samples an iteration (as ``train_step``
does). Its LR and weight decay at every global iteration of the sample's Megatron-LM plan, across the pack
boundaries, for the sample's schedule, for each decay style and weight-decay increment the reference
implements and for later packs whose values win or lose on the resume, are compared with the reference's
(``lr.MegatronSchedule`` from ``load_config`` on the same arguments files, resumed as the trainer resumes
it); what Megatron-LM refuses, or the reference does not implement, is refused. The same process gives
``parse_args``' defaults and the validated values of the scheduler's flags, against
``configs.megatron.SCHEDULER_ARGS``, and the LR of a short real chain, against the trainer's ``loss.csv``.

Stubbed, a device call: ``arguments.get_device_arch_version`` (``validate_args`` asks the GPU's compute
capability; there is no GPU here). The scheduler holds one SGD parameter group on the CPU.
"""

from __future__ import annotations

import contextlib
import json
import math
from pathlib import Path
from typing import Any

import pytest

from tests.train.reference.conftest import losses, run_trainer
from tests.train.reference.test_megatron_config import write_args
from tests.trainers import MEGATRON_ARGS, Trainers
from tests.utils import Workflow
from workflow_scripts.core.fsio import read_json
from workflow_scripts.train.configs import megatron
from workflow_scripts.train.reference.config import load_config
from workflow_scripts.train.reference.run_config import ConfigError

SCHEDULER = (
    MEGATRON_ARGS
    + r"""
import json
import torch
from megatron.training import training

with open(sys.argv[1]) as f:  # the runs' argvs (too long for one argument)
    given = json.load(f)

def typed(value):
    return [value, type(value).__name__]

sys.argv = ["pretrain_gpt.py"]
defaults = vars(arguments.parse_args())
out = {"defaults": {k: typed(defaults[k]) for k in given["dests"]}, "runs": []}
for run in given["runs"]:
    values, validated, state = [], [], None
    for pack in run:
        args = parsed(pack["argv"], build_tokenizer=False)
        validated.append({k: typed(getattr(args, k)) for k in given["dests"]})
        optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
        scheduler = training.get_optimizer_param_scheduler(optimizer)
        if state is not None:
            scheduler.load_state_dict(state)
        group = optimizer.param_groups[0]
        for _ in range(pack["iterations"]):
            values.append([group["lr"], group["weight_decay"]])  # what this iteration's step uses
            scheduler.step(increment=args.global_batch_size)
        state = scheduler.state_dict()
    out["runs"].append({"values": values, "validated": validated})
print(json.dumps(out))
"""
)

STYLES = {  # a run's name -> the flags that replace the sample's (None: the flag left out; later: packs 2...)
    "sample": {},
    "linear, warmup fraction and init": {
        "--lr-decay-style": "linear",
        "--lr-warmup-fraction": "0.3",
        "--lr-warmup-init": "0.0002",
    },
    "cosine, warmup samples, decay samples, weight decay linear": {
        "--lr-warmup-samples": "TENTH",
        "--lr-decay-samples": "HALF",
        "--weight-decay-incr-style": "linear",
        "--weight-decay": None,
        "--start-weight-decay": "0.01",
        "--end-weight-decay": "0.1",
    },
    "constant, weight decay cosine": {
        "--lr-decay-style": "constant",
        "--lr-warmup-samples": "TENTH",
        "--weight-decay-incr-style": "cosine",
        "--weight-decay": None,
        "--start-weight-decay": "0.0",
        "--end-weight-decay": "0.05",
    },
    "inverse-square-root": {"--lr-decay-style": "inverse-square-root", "--lr-warmup-samples": "TENTH"},
    "WSD exponential": {"--lr-decay-style": "WSD", "--lr-wsd-decay-samples": "HALF"},
    "WSD linear": {
        "--lr-decay-style": "WSD",
        "--lr-wsd-decay-samples": "HALF",
        "--lr-wsd-decay-style": "linear",
    },
    "WSD cosine": {
        "--lr-decay-style": "WSD",
        "--lr-wsd-decay-samples": "TENTH",
        "--lr-wsd-decay-style": "cosine",
    },
    "WSD minus_sqrt": {
        "--lr-decay-style": "WSD",
        "--lr-wsd-decay-samples": "HALF",
        "--lr-wsd-decay-style": "minus_sqrt",
    },
    # later packs only: whose values a resume takes, this pack's or the checkpoint's
    "later packs override": {"later": {"--lr-decay-style": "linear", "--override-opt-param-scheduler": ""}},
    "later packs take the checkpoint's": {
        "--lr-warmup-fraction": "0.2",
        "later": {"--min-lr": "0.0", "--use-checkpoint-opt-param-scheduler": ""},
    },
}


def with_flags(text: str, flags: dict[str, Any], samples: int) -> str:
    """An arguments file (one flag a line) with ``flags`` replaced, added or (``None``) left out; ``HALF``
    and ``TENTH`` are that share of the run's samples."""
    sizes = {"HALF": str(samples // 2), "TENTH": str(samples // 10)}
    lines = [line for line in text.splitlines() if line.split(" ")[0] not in flags]
    lines += [f"{flag} {sizes.get(v, v)}" for flag, v in flags.items() if v is not None]
    return "\n".join(lines) + "\n"


DESTS = (  # what training.get_optimizer_param_scheduler reads of the arguments, the global batch aside
    "lr", "min_lr", "lr_decay_style", "lr_decay_samples", "lr_warmup_fraction", "lr_warmup_samples",
    "lr_warmup_init", "lr_wsd_decay_style", "lr_wsd_decay_samples", "weight_decay", "start_weight_decay",
    "end_weight_decay", "weight_decay_incr_style", "train_samples", "train_iters", "lr_decay_iters",
    "lr_warmup_iters", "lr_wsd_decay_iters",
)  # fmt: skip


def run_megatron(trainers: Trainers, runs: list[list[dict]], folder: Path) -> dict:
    given = folder / "given.json"
    given.write_text(json.dumps({"dests": DESTS, "runs": runs}))
    out = trainers.run("megatron", ["-c", SCHEDULER, str(given)])
    assert out.returncode == 0, out.stderr[-4000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def reference_values(paths: list[Path], iterations: list[int]) -> list[tuple[float, float]]:
    """(lr, weight decay) of every iteration, pack after pack, as the reference trainer resumes: each pack
    from the schedule state the previous one saved at its end."""
    values, state = [], None
    for path, n in zip(paths, iterations, strict=True):
        cfg = load_config([str(path)])
        schedule = cfg.megatron_schedule
        if state is not None:
            schedule = schedule.resumed(state, 0, cfg.scheduler_from)
        values += [(schedule.lr(local), schedule.wd(local)) for local in range(n)]
        state = schedule.state(n)
    return values


def close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-300)


def test_lr_and_weight_decay_are_megatron_lms_at_every_iteration_of_the_plan(
    variants: dict[str, Workflow], trainers: Trainers, tmp_path: Path, model: Path, packs: dict[str, str]
) -> None:
    wf = variants["megatron"]
    plan = read_json(wf.root / "results" / "plan.json")
    samples = plan["total_train_iters"] * plan["global_batch_size"]
    iterations = [p["train_iters"] for p in plan["packs"]]
    assert len(iterations) > 1 and plan["packs"][1]["iteration_offset"] == iterations[0]  # boundaries
    files = {}  # run -> its packs' arguments files
    for name, flags in STYLES.items():
        files[name] = []
        for i, pack in enumerate(plan["packs"]):
            source = wf.root / "results" / "train" / pack["name"] / f"{pack['name']}.args"
            path = tmp_path / name.replace(" ", "_") / pack["name"] / f"{pack['name']}.args"
            path.parent.mkdir(parents=True)
            given = {k: v for k, v in flags.items() if k != "later"} | (flags.get("later", {}) if i else {})
            path.write_text(with_flags(source.read_text(), given, samples))
            files[name].append(path)
    runs = [
        [{"argv": megatron.argv(str(p)), "iterations": n} for p, n in zip(paths, iterations, strict=True)]
        for paths in files.values()
    ]
    # a short real chain of the reference trainer: two phases, warmup across the transition
    chain = tmp_path / "chain"
    extra = "--lr-warmup-fraction 0.75 --lr-warmup-init 0.0001 --lr-decay-style linear"
    chain_files = [
        write_args(chain / name / f"{name}.args", model, packs[name], chain / "ckpt", extra)
        for name in ("pack_a", "pack_b")
    ]
    runs.append([{"argv": megatron.argv(str(p)), "iterations": 4} for p in chain_files])
    result = run_megatron(trainers, runs, tmp_path)

    for path in chain_files:  # the LR the trainer recorded, iteration by iteration, is Megatron-LM's
        run_trainer(path)
    recorded = [float(r[2]) for name in ("pack_a", "pack_b") for r in losses(chain / "reference" / name)]
    chain_lrs = [lr for lr, _ in result["runs"][-1]["values"]]
    assert len(recorded) == len(chain_lrs) == 8
    assert all(close(a, b) for a, b in zip(recorded, chain_lrs, strict=True)), (recorded, chain_lrs)

    assert list(megatron.SCHEDULER_ARGS) == list(DESTS)
    assert result["defaults"] == {
        k: [default, type(default).__name__] for k, (default, _) in megatron.SCHEDULER_ARGS.items()
    }
    assert len({json.dumps(r["values"]) for r in result["runs"]}) == len(runs)  # the runs differ
    with contextlib.chdir(wf.root):  # the arguments' paths are relative to the workflow's folder
        for (name, paths), run in zip(files.items(), result["runs"][:-1], strict=True):
            for path, validated in zip(paths, run["validated"], strict=True):
                ours = megatron.scheduler_args(megatron.read_base(str(path)))
                assert {k: [v, type(v).__name__] for k, v in ours.items()} == validated, (name, path)
            ours = reference_values(paths, iterations)
            assert len(ours) == len(run["values"]) == plan["total_train_iters"], name
            for step, ((lr, wd), (m_lr, m_wd)) in enumerate(zip(ours, run["values"], strict=True)):
                assert close(lr, m_lr) and close(wd, m_wd), (name, step, (lr, wd), (m_lr, m_wd))


@pytest.mark.parametrize(
    ("flags", "refused"),
    [
        ("--lr-decay-style WSD --lr-wsd-decay-samples 8 --lr-wsd-decay-style sqrt", "lr-wsd-decay-style"),
        ("--lr-decay-style WSD", "--lr-wsd-decay-samples"),
        ("--decoupled-lr 0.001", "--decoupled-lr"),
        ("--weight-decay-incr-style linear", "--start-weight-decay"),
        ("--start-weight-decay 0.1", "--weight-decay-incr-style constant"),
        ("--override-opt-param-scheduler --use-checkpoint-opt-param-scheduler", "only one says"),
        ("--lr-warmup-iters 2", "--lr-warmup-iters with --train-samples"),
        ("--lr-warmup-fraction 0.1 --lr-warmup-samples 4", "--lr-warmup-samples with --lr-warmup-fraction"),
        ("--lr-warmup-samples 40", "the warmup is shorter than the decay"),
    ],
)
def test_a_schedule_the_reference_does_not_run_as_megatron_lm_is_refused(
    tmp_path: Path, model: Path, flags: str, refused: str
) -> None:
    path = write_args(tmp_path / "a.args", model, "x", tmp_path / "ckpt", flags)
    with pytest.raises(ConfigError, match=refused):
        load_config([str(path)])
