"""Evaluations and index caches that cost no GPU time, proved in Megatron-LM's own code (the pinned tree, run
on a CPU as tests/train/test_megatron_in_the_loop.py runs it: one gloo process group, the device calls
stubbed, ``LOOP``):

- an evaluation (train-eval's argv, config/train/megatron-launch.yaml's ``eval_launch``) builds no training
  dataset: ``build_train_valid_test_data_loaders`` gets none from ``pretrain_gpt``'s provider, writes no
  training index, and builds the validation and test loaders it evaluates on;
- the evaluation of step 0 loads ``iter_0000000``, not the latest checkpoint (``--ckpt-step 0`` is
  Megatron-LM's "latest": ``if args.ckpt_step:``);
- the ``train_data_cache`` rule builds every pack's index caches before its first segment, in the training
  target only: the first segment's own ``build_train_valid_test_data_loaders`` then finds every cache file
  and builds none (no file written, no "Build and save" line).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
from pathlib import Path

import pytest
import yaml

from tests.train.launches import CONFIG, segments
from tests.train.test_megatron_in_the_loop import free_port, pretrain_argv
from tests.trainers import MEGATRON_ARGS, MEGATRON_ONE_RANK, Trainers
from tests.utils import REPO, Workflow, snakemake_env, tail
from workflow_scripts.core.fsio import read_json
from workflow_scripts.core.train_layout import TrainLayout
from workflow_scripts.train import checkpoint_dirs, checkpoint_eval, segment

RECIPE = yaml.safe_load((REPO / "config" / "train" / "megatron-launch.yaml").read_text())["train"]

LOOP = (
    MEGATRON_ARGS
    + MEGATRON_ONE_RANK
    + r"""
import logging

logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr, force=True)

def cache_files(folder):
    if not folder or not os.path.isdir(folder):
        return {}
    return {e.name: e.stat().st_mtime_ns for e in os.scandir(folder)}

out = []
for job in json.loads(sys.argv[1]):
    args = parsed(job["argv"])
    r = {"ckpt_step": args.ckpt_step, "skip_train": args.skip_train}
    if job.get("load_path"):  # which folder load_checkpoint reads (the tracker, or --ckpt-step when true)
        r["load_path"] = os.path.realpath(checkpointing.get_load_checkpoint_path_by_args(args))
    if job.get("build"):
        training.update_train_iters(args)  # as pretrain does before it builds the data
        args.iteration = job["iteration"]  # what load_checkpoint sets
        args.consumed_train_samples = args.iteration * args.global_batch_size
        provider = pretrain_gpt.train_valid_test_datasets_provider
        made = {}
        def recording(sizes, provider=provider, made=made):
            made["sizes"] = list(sizes)
            made["datasets"] = provider(sizes)
            return made["datasets"]
        recording.is_distributed = True
        before = cache_files(args.data_cache_path)
        loader, valid, test = training.build_train_valid_test_data_loaders(recording)
        after = cache_files(args.data_cache_path)
        r["sizes"] = made["sizes"]
        r["train_dataset"] = None if made["datasets"][0] is None else len(made["datasets"][0])
        r["train_loader"] = loader is not None
        r["valid"] = [len(v.dataset) for v in valid]
        r["test"] = None if test is None else len(test.dataset)
        r["do_valid"] = bool(args.do_valid)
        r["cache"] = args.data_cache_path
        r["written"] = sorted(n for n in after if before.get(n) != after[n])
    out.append(r)
print(json.dumps(out))
"""
)


def run_loop(trainers: Trainers, jobs: list[dict]) -> tuple[list[dict], str]:
    """``LOOP`` over ``jobs`` in Megatron-LM's tree: its results, and its log (Megatron-LM's lines)."""
    argv = ["-c", LOOP, json.dumps(jobs), str(free_port()), trainers.helpers_lock]
    out = trainers.run("megatron", argv, env=trainers.helpers_env())
    assert out.returncode == 0, out.stderr[-4000:]
    return json.loads(out.stdout.strip().splitlines()[-1]), out.stderr


def eval_argv(keys: segment.PackKeys, checkpoints: str, step: int, out: Path) -> list[str]:
    """What train-eval hands ``pretrain_gpt.py`` for the checkpoint of ``step``."""
    command = checkpoint_eval.evaluation_command(RECIPE["eval_launch"], keys, checkpoints, step, str(out))
    return pretrain_argv(command)


def test_an_evaluation_builds_no_training_index_and_step_zero_is_step_zero(
    variants: dict[str, Workflow], trainers: Trainers, tmp_path: Path
) -> None:
    wf = variants["megatron"]
    plan = read_json(wf.root / "results" / "plan.json")
    batch, names = plan["global_batch_size"], [p["name"] for p in plan["packs"]]
    jobs = []
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(wf.root)  # train-eval runs there: the keys' paths are relative to it
        for name in (names[0], names[-1]):  # the first pack's end, and the run's last step
            keys = segment.PackKeys.read(str(wf.root / "results" / "train" / name / "keys.json"))
            argv = eval_argv(keys, keys.checkpoints, keys.end, tmp_path / name / "eval" / "0.json.part")
            jobs.append({"argv": [*argv, "--data-cache-path", str(tmp_path / "cache" / name)], "build": True,
                         "iteration": keys.end})  # fmt: skip
        # step 0 (an import's iter_0000000, a fine-tune's start) beside a later latest checkpoint, in the
        # run's checkpoint folder (the arguments' --load)
        checkpoints, layout = Path(keys.checkpoints), checkpoint_dirs.of("megatron")
        made = [checkpoints / layout.tag(step) for step in (0, 50)]
        assert not any(p.exists() for p in made) and layout.latest(str(checkpoints)) is None
        for folder in made:
            folder.mkdir(parents=True)
        layout.set_latest(str(checkpoints), 50)
        try:
            for step in (0, 50):
                argv = eval_argv(keys, str(checkpoints), step, tmp_path / "eval" / f"{step}.json.part")
                jobs.append({"argv": argv, "load_path": True})
            results, log = run_loop(trainers, jobs)
        finally:
            for folder in made:
                folder.rmdir()
            (checkpoints / layout.tracker).unlink()
    for job, r, name in zip(jobs, results, (names[0], names[-1]), strict=False):
        where = f"{name}: {r}"
        assert r["skip_train"] and r["ckpt_step"] == job["iteration"], where
        # no training dataset, no training index: Megatron-LM would have sized one of the whole run's
        # --train-samples (plan's last end x batch) over the pack at every evaluation
        assert r["train_dataset"] is None and not r["train_loader"], where
        assert not [n for n in r["written"] if "-train-" in n], where
        # and it evaluates: the validation set of the run's held-out packs, sized for --eval-iters batches
        assert r["do_valid"] and r["valid"] and r["test"], where
        assert (
            r["sizes"][1] == r["sizes"][2] == int(job["argv"][job["argv"].index("--eval-iters") + 1]) * batch
        )
        assert any("-valid-" in n for n in r["written"]), where
    step0, step50 = results[2], results[3]
    assert step0["load_path"] == os.path.realpath(checkpoints / "iter_0000000"), step0
    assert step50["load_path"] == os.path.realpath(checkpoints / "iter_0000050"), step50
    assert "Build and save the GPTDataset train indices" not in log


def test_step_zero_load_folder(tmp_path: Path) -> None:
    """The step-0 evaluation's ``--load``: a folder whose tracker names 0 and whose iter_0000000 is the
    run's; an evaluation of step 0 where the run has none is refused, naming it."""
    args = tmp_path / "p.args"
    args.write_text(f"--train-data-path /d/p\n--load {tmp_path}/ckpt\n--phase-transition-iterations 10\n")
    keys = segment.PackKeys("p", str(args), 0, 10, 5, str(tmp_path / "ckpt"), {}, trainer="megatron")
    launch = "pretrain_gpt.py {args} --skip-train --ckpt-step {step}"
    with pytest.raises(checkpoint_eval.UserError, match="no iter_0000000"):
        checkpoint_eval.evaluation_command(launch, keys, keys.checkpoints, 0, str(tmp_path / "e" / "0.json"))
    (tmp_path / "ckpt" / "iter_0000000").mkdir(parents=True)
    command = checkpoint_eval.evaluation_command(
        launch, keys, keys.checkpoints, 0, str(tmp_path / "e" / "0.json")
    )
    words = shlex.split(command)
    load = Path(words[words.index("--load") + 1])
    assert (
        words.count("--load") == 1
        and "--train-data-path" not in words
        and "--phase-transition-iterations" not in words
    )
    assert (load / "latest_checkpointed_iteration.txt").read_text().strip() == "0"
    assert (load / "iter_0000000").resolve() == (tmp_path / "ckpt" / "iter_0000000").resolve()
    later = shlex.split(checkpoint_eval.evaluation_command(launch, keys, keys.checkpoints, 5, "o.json"))
    assert later[later.index("--load") + 1] == f"{tmp_path}/ckpt"  # other steps: the run's folder


def test_the_caches_are_built_before_each_first_segment_which_then_builds_none(
    variants: dict[str, Workflow], trainers: Trainers, tmp_path: Path
) -> None:
    wf = variants["megatron"]  # its arguments name its own folders (a clone's would name the original's)
    layout = TrainLayout(str(wf.root / "results" / "train"))
    plan = read_json(wf.root / "results" / "plan.json")
    names = [p["name"] for p in plan["packs"] if p["train_iters"]]  # a pack with nothing to train: no segment
    # Megatron-LM's launches (the reference trainer's builds its own index: no cache rule for it)
    train = {"megatron_python": trainers.python, **{k: RECIPE[k] for k in ("launch", "eval_launch")}}
    (wf.root / "cache.yaml").write_text(yaml.safe_dump({"train": train}))
    config = (*CONFIG, "cache.yaml")
    env = {**snakemake_env(), "MEGATRON_LM": str(trainers.tree("megatron")), **trainers.helpers_env()}
    # the default target builds no cache; training's first segments each wait for their pack's
    dry = wf.run("-n", *config, env=env)
    assert dry.returncode == 0 and "train_data_cache" not in dry.output, tail(dry.output)
    dry = wf.run("-n", "train", "--profile", "profiles/local", *config, env=env)
    assert dry.returncode == 0, tail(dry.output)
    jobs = dict(
        re.findall(r"^(\w+)\s+(\d+)$", dry.output.split("Job stats:", 1)[1].split("total", 1)[0], re.M)
    )
    assert jobs.get("train_data_cache") == str(len(names)), tail(dry.output)
    records = [os.path.relpath(layout.data_cache(n), wf.root) for n in names]
    proc = wf.run("--profile", "profiles/local", "--cores", "2", *records, *config, env=env)
    assert proc.returncode == 0, tail(proc.output)
    cache = wf.root / "results" / "train" / "data_cache"
    for name in names:
        args = (wf.root / "results" / "train" / name / f"{name}.args").read_text()
        assert f"--data-cache-path {cache}\n" in args, name  # train.data_cache_dir's default
        record = read_json(layout.data_cache(name))
        assert record["files"] and any("-train-" in f for f in record["files"]), record
    # every pack's first segment (first, pack change) as its launch starts it, through Megatron-LM's own
    # build_train_valid_test_data_loaders at the iteration it loads
    jobs = []
    for seg in segments(wf):
        if seg.kind in ("first", "pack change"):
            argv = pretrain_argv(segment.launch_command(RECIPE["launch"], seg.keys, shlex.join(seg.files)))
            jobs.append({"argv": argv, "build": True, "iteration": seg.tracker or 0, "pack": seg.keys.pack})
    assert sorted(j["pack"] for j in jobs) == sorted(names)
    before = {e.name: e.stat().st_mtime_ns for e in os.scandir(cache)}
    results, log = run_loop(trainers, jobs)
    for job, r in zip(jobs, results, strict=True):
        assert r["cache"] == str(cache) and r["written"] == [], (job["pack"], r["written"])
        assert r["train_dataset"] and r["train_loader"], job["pack"]
        record = read_json(layout.data_cache(job["pack"]))
        assert r["sizes"] == [record["sizes"][s] for s in ("train", "valid", "test")], (job["pack"], record)
    assert {e.name: e.stat().st_mtime_ns for e in os.scandir(cache)} == before
    assert "Build and save" not in log and "Load the GPTDataset train indices" in log
    shutil.rmtree(cache)  # without them, the same segments build every index: the check above has teeth
    results, log = run_loop(trainers, jobs[:1])
    assert results[0]["written"] and "Build and save the GPTDataset train indices" in log
