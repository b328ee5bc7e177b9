"""Every segment the chain makes, run in Megatron-LM's own code as far as a CPU goes.

For each segment of the sample's plan (first, a fine-tune's start, a pack change, a resume, a spare) on the
workflow's real files (tests/train/launches.py), the argv that the launch recipe
(config/train/megatron-launch.yaml, filled in by train-segment) gives ``pretrain_gpt.py`` goes through one
Megatron-LM process (``LOOP``): ``parse_args`` + ``validate_args``; the checkpoint tracker the chain wrote,
read by ``read_metadata``; the ``OptimizerParamScheduler`` of the arguments that trained to that checkpoint,
saved there and loaded with this segment's (as ``load_checkpoint`` does); ``get_train_valid_test_num_samples``
at the iteration it resumes at; and ``pretrain_gpt``'s dataset provider with
``build_train_valid_test_data_loaders`` over the pack, whose first global batch is checked here against the
pack's documents read by our own .bin/.idx reader, and whose validation and test datasets hold the samples
the run's evaluations ask. A spare segment (its pack finished) must not start
Megatron-LM at all: there it would train the next phase on this pack's data. The evaluation recipe's argv
(train-eval's) is parsed and sized at each pack's last iteration.

Megatron-LM runs as it is, with one process group (gloo, world size 1) and its C++ dataset helpers compiled
as its ``initialize_megatron`` does. Stubbed, each a device call (there is no GPU here):

- ``arguments.get_device_arch_version``: ``validate_args`` asks the GPU's compute capability (9: Hopper).
- ``torch.tensor(..., device="cuda")``: ``build_train_valid_test_data_loaders`` puts its three do-train/valid/
  test flags on the GPU to broadcast them; they are made on the CPU (gloo broadcasts CPU tensors).
"""

from __future__ import annotations

import json
import shlex
import shutil
import socket
from pathlib import Path

import pytest
import yaml

from tests.train.launches import START, segments
from tests.trainers import MEGATRON_ARGS, MEGATRON_ONE_RANK, Trainers
from tests.utils import REPO, Workflow
from workflow_scripts.core.fsio import read_json
from workflow_scripts.core.indexed_dataset import IndexedDataset
from workflow_scripts.train import checkpoint_eval, progress_lines, segment

LOOP = (
    MEGATRON_ARGS
    + MEGATRON_ONE_RANK
    + r"""
def scheduler(args):  # what setup_model_and_optimizer builds (update_train_iters included)
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=args.lr)
    return training.get_optimizer_param_scheduler(optimizer)

def restored(saver_argv, argv, iteration):
    # the scheduler saved at `iteration` by the arguments that trained to it, loaded with `argv`'s
    saver = parsed(saver_argv)
    saved = scheduler(saver)
    saved.step(increment=iteration * saver.global_batch_size)  # train_step steps it one batch an iteration
    state = saved.state_dict()
    args = parsed(argv)
    try:
        scheduler(args).load_state_dict(state)
        return "loaded"
    except AssertionError as e:
        return f"AssertionError: {e}"

def sizes(args, iteration):
    args.iteration = iteration
    args.consumed_train_samples = iteration * args.global_batch_size  # load_checkpoint: the checkpoint's
    try:
        return training.get_train_valid_test_num_samples()
    except Exception as e:
        return f"{type(e).__name__}: {e}"

out = []
for seg in json.loads(sys.argv[1]):
    r = {}
    args = parsed(seg["argv"])
    tracker = checkpointing.get_checkpoint_tracker_filename(seg["load"])
    iteration = 0
    if os.path.isfile(tracker):
        iteration, release = checkpointing.read_metadata(tracker)
        name = checkpointing.get_checkpoint_name(seg["load"], iteration, release, return_base_dir=True)
        r["tracker"], r["folder"] = iteration, os.path.basename(name)
    if args.finetune or seg["kind"] == "eval":
        iteration = 0 if args.finetune else args.ckpt_step  # load_checkpoint: --finetune restarts at 0
    r["iteration"] = iteration
    r["finetune"], r["skip_train"] = args.finetune, args.skip_train
    if seg["saved_by"]:
        r["scheduler"] = restored(seg["saved_by"], seg["argv"], iteration)
        if seg.get("old_saved_by"):
            r["old_scheduler"] = restored(seg["old_saved_by"], seg["old_argv"], iteration)
            r["old_sizes"] = sizes(parsed(seg["old_argv"]), iteration)
        args = parsed(seg["argv"])
    scheduler(args)
    r["train_iters"] = args.train_iters
    r["sizes"] = sizes(args, iteration)
    if seg["kind"] not in ("spare", "eval"):
        provider = pretrain_gpt.train_valid_test_datasets_provider
        loader, valid, test = training.build_train_valid_test_data_loaders(provider)
        r["held_out"] = [len(valid[0].dataset), len(test.dataset)]  # what evaluation can read
        batches, indices = iter(loader.batch_sampler), []
        while len(indices) < args.global_batch_size:
            indices += next(batches)
        samples = [loader.dataset[i] for i in indices]
        r["indices"] = indices
        r["samples"] = [s["tokens"].tolist() + s["labels"].tolist()[-1:] for s in samples]
        r["document_index"] = len(loader.dataset.document_index)
    out.append(r)
print(json.dumps(out))
"""
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pretrain_argv(command: str) -> list[str]:
    """The words a launch command hands ``pretrain_gpt.py``."""
    words = shlex.split(command)
    at = next(i for i, w in enumerate(words) if w.endswith("pretrain_gpt.py"))
    return words[at + 1 :]


def with_train_iters(argv: list[str], end: int) -> list[str]:
    """The arguments as the workflow wrote them before: ``--train-iters`` (the pack's end) for the run's
    ``--train-samples``."""
    words = list(argv)
    if "--train-samples" in words:
        at = words.index("--train-samples")
        words[at : at + 2] = ["--train-iters", str(end)]
    return words


def check_documents(sample: list[int], documents: set[tuple[int, ...]], eod: int, where: str) -> None:
    """A sample is a window of whole documents of the pack, one after another: a document's end, whole
    documents, a document's start (each ends with the EOD); or a slice of one document."""
    parts, part = [], []
    for token in sample:
        part.append(token)
        if token == eod:
            parts.append(tuple(part))
            part = []
    if not parts:  # inside one document
        text = ",".join(map(str, sample))
        assert any(f",{text}," in f",{','.join(map(str, d))}," for d in documents), where
        return
    head, middle, tail = parts[0], parts[1:], tuple(part)
    assert any(d[-len(head) :] == head for d in documents), f"no document of the pack ends so: {where}"
    assert all(m in documents for m in middle), f"a whole document is not the pack's: {where}"
    assert any(d[: len(tail)] == tail for d in documents), f"no document of the pack starts so: {where}"


@pytest.mark.parametrize("variant", ["megatron", "megatron-finetune"])
def test_every_megatron_segment_runs_in_megatron_lm(
    variant: str, variants: dict[str, Workflow], trainers: Trainers, tmp_path: Path
) -> None:
    wf = variants[variant]
    recipe = yaml.safe_load((REPO / "config" / "train" / "megatron-launch.yaml").read_text())["train"]
    plan = read_json(wf.root / "results" / "plan.json")
    packs = {p["name"]: p for p in plan["packs"]}
    names = [p["name"] for p in plan["packs"]]
    batch, last_end = plan["global_batch_size"], plan["total_train_iters"]
    found = []  # (segment, its argv, the checkpoint folder as it finds it)
    for i, seg in enumerate(segments(wf)):
        load = tmp_path / "loads" / str(i)
        if Path(seg.keys.checkpoints).exists():
            shutil.copytree(seg.keys.checkpoints, load, symlinks=True)
        argv = pretrain_argv(segment.launch_command(recipe["launch"], seg.keys, shlex.join(seg.files)))
        found.append((seg, argv, load))
        if seg.kind == "spare":  # the segment finds its pack finished: Megatron-LM must not be started
            record = tmp_path / "spare" / seg.keys.pack / "0.json"
            keys = wf.root / "results" / "train" / seg.keys.pack / "keys.json"
            cmd = ["--keys", str(keys), "--segment", "1", "--segments", "2", "--record", str(record)]
            with pytest.MonkeyPatch.context() as mp:
                mp.chdir(wf.root)
                assert segment.main([*cmd, "--launch", "exit 3"]) == 0  # launched, it would fail
            done = read_json(record)
            assert done["iterations"] == 0 and done["finished"] and done["last_step"] == seg.keys.end
    saver = {seg.keys.pack: argv for seg, argv, _ in found if seg.kind == "resume"}  # no --finetune
    given = []
    for seg, argv, load in found:
        entry = {"kind": seg.kind, "argv": argv, "load": str(load), "pack": seg.keys.pack, "saved_by": None}
        if seg.kind in ("resume", "spare"):
            entry["saved_by"] = argv
        elif seg.kind == "pack change":  # the previous pack saved its end
            previous = saver[names[names.index(seg.keys.pack) - 1]]
            entry["saved_by"] = previous
            entry["old_saved_by"] = with_train_iters(previous, seg.keys.offset)
            entry["old_argv"] = with_train_iters(argv, seg.keys.end)
        given.append(entry)
    for name in names:  # the evaluation of each pack's last checkpoint (train-eval's command)
        keys = segment.PackKeys.read(str(wf.root / "results" / "train" / name / "keys.json"))
        with pytest.MonkeyPatch.context() as mp:
            mp.chdir(wf.root)  # train-eval runs there: the keys' paths are relative to it
            launch = recipe["eval_launch"]
            command = checkpoint_eval.evaluation_command(launch, keys, keys.checkpoints, keys.end, "out.json")
        given.append(
            {"kind": "eval", "argv": pretrain_argv(command), "load": "", "pack": name, "saved_by": None}
        )
    argv = ["-c", LOOP, json.dumps(given), str(free_port()), trainers.helpers_lock]
    out = trainers.run("megatron", argv, env=trainers.helpers_env())
    assert out.returncode == 0, out.stderr[-4000:]
    results = json.loads(out.stdout.strip().splitlines()[-1])
    eod = read_json(wf.root / "results" / "train" / names[0] / "keys.json")["eod_id"]
    seen = set()
    for i, (entry, r) in enumerate(zip(given, results, strict=True)):
        kind, pack = entry["kind"], packs[entry["pack"]]
        seen.add(kind)
        where = f"{entry['pack']} {kind}: {r}"[:600]
        assert r["train_iters"] == last_end, where  # one run: --train-samples / global batch
        if kind == "eval":
            assert r["iteration"] == pack["iteration_offset"] + pack["train_iters"] and r["skip_train"]
            assert not r["finetune"] and isinstance(r["sizes"], list), where
            continue
        seg = found[i][0]
        if seg.tracker is None:
            assert "tracker" not in r and r["iteration"] == 0, where
        else:
            assert r["tracker"] == seg.tracker and r["folder"] == f"iter_{seg.tracker:07d}", where
        if kind == "finetune start":
            assert r["tracker"] == START and r["finetune"] and r["iteration"] == 0, where
        if entry["saved_by"]:
            assert r["scheduler"] == "loaded", where
        if kind == "pack change":  # what the per-pack --train-iters did: both failures of the issue
            assert "do not match" in r["old_scheduler"], where
            assert r["old_sizes"].startswith("TypeError"), where
        if kind == "spare":  # what the segment keeps Megatron-LM from: the next phase, on this pack's data
            later = names.index(entry["pack"]) + 1
            if later < len(names):
                assert r["sizes"][0] == packs[names[later]]["train_iters"] * batch, where
            else:
                assert r["sizes"].startswith("ValueError"), where  # no phase after the run's end
            continue
        # every evaluation of the run and the test at its end read samples that are there (an unweighted
        # held-out blend is one epoch of each prefix: 6 of the 176 the sample's evaluations ask)
        assert r["held_out"][0] >= r["sizes"][1] and r["held_out"][1] >= r["sizes"][2], where
        start = r["iteration"] - (0 if r["finetune"] else pack["iteration_offset"])
        assert r["sizes"][0] == pack["train_iters"] * batch, where  # the phase is the pack
        assert r["indices"] == list(range(start * batch, (start + 1) * batch)), where
        data = IndexedDataset(pack["merged_prefix"])
        documents = {tuple(int(t) for t in data.document(i)) for i in range(data.num_documents)}
        assert r["document_index"] == data.num_documents, where  # one epoch of the pack
        for sample in r["samples"]:
            assert len(sample) == plan["seq_length"] + 1
            check_documents(sample, documents, eod, where)
    expected = {"first", "pack change", "resume", "spare", "eval"}
    assert seen == expected | ({"finetune start"} if variant == "megatron-finetune" else set())


@pytest.mark.parametrize(
    ("line", "valid"),
    [
        (" validation loss at iteration 40 on validation set | lm loss value: 7.300000E+00 | lm loss PPL: "
         "1.480300E+03 | ", (40, 7.3)),
        (" validation loss at iteration 40 on test set | lm loss value: 7.400000E+00 | lm loss PPL: "
         "1.635000E+03 | ", None),
    ],
)  # fmt: skip
def test_megatron_validation_line_is_read_and_its_test_line_is_not(line: str, valid: tuple | None) -> None:
    """``evaluate_and_print_results`` (the pin's training.py) prints ``validation loss at {prefix} | ...``
    with ``prefix`` ``iteration N on validation set``, then the same for the test set, which is not a
    validation loss: train-eval records the last validation line."""
    assert progress_lines.validation_loss(line) == valid
