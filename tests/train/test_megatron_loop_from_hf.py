"""Megatron-LM's own training loop (the pinned ``pretrain_gpt.py`` on CPU ranks: tests/train/megatron_loop.py)
from a Hugging Face start: the reference trainer equals it, and its training goes back to Hugging Face.

**The reference trainer against Megatron-LM's loop.** A tiny LLaMA (grouped-query attention, untied
embeddings: tests/utils.tiny_llama) imported by ``snakepack hf-import --trainer megatron``; one arguments
file, fp32, dropout 0, read by both Megatron-LM and ``snakepack train-reference``, each on two data-parallel
ranks of one-sample micro batches, two micro batches a rank an iteration. The run exercises what the two could
compute differently: Adam with beta2 0.95 and Megatron-LM's default epsilon, weight decay (none on norms),
gradient clipping in every step (--clip-grad 0.3 is below every norm), Megatron-LM's LR schedule (warmup from
0, cosine to --min-lr), the loss over the tokens of every micro batch and rank, and the validation blend
Megatron-LM builds of weighted prefixes (2:1; the first small enough that its samples span two epochs, the
second of them shuffled apart) read from the running ``consumed_valid_samples``. The reference's training loss
at each of the 20 iterations, and its validation loss at each evaluation (10, 20), equal Megatron-LM's within
1e-4 relative (measured: under 1e-6). What the reference computes otherwise is refused by name
(``megatron_config.REFUSED``).

**From Hugging Face, through Megatron-LM's loop, back to Hugging Face.** The same import continued by
Megatron-LM over two packs, each a phase of one run as the workflow writes a pack's arguments (the same
``--train-samples`` and ``--phase-transition-iterations``, the pack's ``--train-data-path``, ``--finetune``
on the first only, weighted validation paths, saves, the exit signal): the first exits and saves at the
transition, the second resumes there (``consumed_valid_samples`` and all) and ends the run. ``snakepack
hf-export`` writes its last checkpoint (Megatron-LM's own, optimizer state beside the weights) as a Hugging
Face folder, checked there against the reference model; loaded in ``transformers``, its loss on held-out
documents is lower than the start's. (That our export is Megatron-Bridge's is tests/train/hf/
test_bridge_compat.py's.)
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import sentencepiece as spm

from tests.train import megatron_loop
from tests.train.hf.megatron_model import free_port
from tests.train.reference.conftest import TWO_RANKS, command, make_pack, pattern_docs, trainer_env
from tests.trainers import Trainers
from tests.utils import REPO, hf_folder, tail
from workflow_scripts.cli import main as snakepack
from workflow_scripts.core.fsio import read_json
from workflow_scripts.core.indexed_dataset import IndexedDataset
from workflow_scripts.train import checkpoint_dirs, finetune
from workflow_scripts.train.reference.config import load_config
from workflow_scripts.train.reference.metrics import read_loss_csv
from workflow_scripts.train.reference.run_config import ConfigError

ITERS, EVAL_INTERVAL, EVAL_ITERS, BATCH = 20, 10, 2, 4
RTOL = 1e-4
# tests/utils.tiny_llama's shape as Megatron-LM's flags
LLAMA = (
    "--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --max-position-embeddings 64\n"
    "--normalization RMSNorm --norm-epsilon 1e-6 --swiglu --ffn-hidden-size 96\n"
    "--position-embedding-type rope --rotary-base 10000 --group-query-attention --num-query-groups 2\n"
    "--disable-bias-linear --untie-embeddings-and-output-weights --attention-dropout 0 --hidden-dropout 0\n"
)


@pytest.fixture(scope="module")
def start(tmp_path_factory: pytest.TempPathFactory, model: Path) -> Path:
    """``hf-import --trainer megatron``'s iter_0000000 of a tiny LLaMA whose tokenizer is the data's (its
    Hugging Face folder is ``../../hf``)."""
    root = tmp_path_factory.mktemp("hf-start")
    hf = hf_folder(root / "hf", model)
    out = root / "import" / "iter_0000000"
    args = ["--trainer", "megatron", "--hf", str(hf), "--tokenizer-model", str(model)]
    assert snakepack(["hf-import", *args, "--out", str(out), "--check", str(root / "import.json")]) == 0
    return out


def eod_of(model: Path) -> int:
    return spm.SentencePieceProcessor(model_file=str(model)).piece_to_id("<|endoftext|>")


def write_run(root: Path, model: Path, start: Path, extra: str = "") -> Path:
    """The run's arguments over fresh packs in ``root`` (counting documents: learnable), starting from
    ``start`` (--finetune, its link in the run's checkpoint folder)."""
    eod = eod_of(model)
    train = make_pack(root / "train" / "train", pattern_docs(300, 0, eod))
    # validation: 24 samples of 32 asked, 16 and 8 by weight; the first prefix's 12 a epoch give 17 only
    # in two epochs, the second of them under 80% full (Megatron-LM's separate_final_epoch)
    small = make_pack(root / "valid_a" / "valid_a", pattern_docs(9, 1, eod))
    other = make_pack(root / "valid_b" / "valid_b", pattern_docs(20, 2, eod))
    finetune.prepare(str(root / "ckpt"), str(start), "megatron")
    path = root / "run.args"
    path.write_text(
        LLAMA + f"--micro-batch-size 1 --global-batch-size {BATCH} --train-iters {ITERS}\n"
        "--lr 0.003 --min-lr 0.0003 --lr-decay-style cosine --lr-warmup-iters 3\n"
        "--adam-beta1 0.9 --adam-beta2 0.95 --weight-decay 0.1 --clip-grad 0.3 --seed 1234 --log-interval 1\n"
        f"--eval-interval {EVAL_INTERVAL} --eval-iters {EVAL_ITERS}\n"
        f"--tokenizer-type GPTSentencePieceTokenizer --tokenizer-model {model}\n"
        f"--train-data-path {train}\n--valid-data-path 2.0 {small} 1.0 {other}\n"
        f"--load {root / 'ckpt'} --finetune --distributed-backend gloo --ckpt-format torch_dist\n{extra}\n"
    )
    return path


def reference(config: Path, out: Path) -> tuple[dict[int, float], dict[int, float]]:
    """``snakepack train-reference`` on two ranks: (training loss by iteration, validation loss by
    iteration), exact, from its loss.csv and eval.jsonl."""
    argv = [*TWO_RANKS, "--master_port", str(free_port())]
    argv += [*command(config, "--out", str(out))[1:]]
    proc = subprocess.run(argv, cwd=REPO, env=trainer_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, tail(proc.stdout + proc.stderr)
    train = {int(r["iteration"]): float(r["loss"]) for r in read_loss_csv(out / "loss.csv")}
    lines = (out / "eval.jsonl").read_text().splitlines()
    valid = {r["iteration"]: r["valid_loss"] for r in map(json.loads, lines)}
    return train, valid


def relative(ours: dict[int, float], theirs: dict[int, float]) -> dict[int, float]:
    return {i: abs(ours[i] - theirs[i]) / abs(theirs[i]) for i in theirs}


def test_the_reference_trains_and_evaluates_as_megatron_lms_loop(
    trainers: Trainers, tmp_path: Path, model: Path, start: Path
) -> None:
    config = write_run(tmp_path, model, start)
    argv = config.read_text().split()
    output = megatron_loop.run_megatron(trainers, argv, tmp_path / "megatron-cache", world=2)
    theirs_train = megatron_loop.iteration_losses(output)
    theirs_valid = megatron_loop.validation_losses(output)
    assert sorted(theirs_train) == list(range(1, ITERS + 1)), tail(output)
    assert sorted(theirs_valid) == [EVAL_INTERVAL, 2 * EVAL_INTERVAL], tail(output)

    ours_train, ours_valid = reference(config, tmp_path / "reference")
    assert sorted(ours_train) == list(range(1, ITERS + 1))
    train_diff, valid_diff = relative(ours_train, theirs_train), relative(ours_valid, theirs_valid)
    report = f"training {train_diff}\nvalidation {valid_diff}\nMegatron-LM {theirs_train} {theirs_valid}"
    assert max(train_diff.values()) < RTOL, report
    assert max(valid_diff.values()) < RTOL, report
    assert theirs_train[ITERS] < theirs_train[1] - 1.0  # it learned: the comparison is of a real run
    assert theirs_valid[20] != theirs_valid[10]


@pytest.mark.parametrize(
    ("extra", "flag"),
    [
        ("--optimizer sgd", "--optimizer sgd"),
        ("--dataloader-type cyclic", "--dataloader-type cyclic"),
        ("--calculate-per-token-loss", "--calculate-per-token-loss"),
        ("--eod-mask-loss", "--eod-mask-loss"),
        ("--full-validation", "--full-validation"),
        ("--start-eval-at-iter 5", "--start-eval-at-iter"),
        ("--eval-global-batch-size 8", "--eval-global-batch-size 8"),
        ("--rampup-batch-size 2 2 8", "--rampup-batch-size"),
    ],
)
def test_what_the_reference_computes_otherwise_is_refused_by_name(
    tmp_path: Path, model: Path, extra: str, flag: str
) -> None:
    path = tmp_path / "run.args"
    path.write_text(
        LLAMA + f"--micro-batch-size 1 --global-batch-size {BATCH} --train-iters {ITERS} --lr 0.003\n"
        f"--tokenizer-type GPTSentencePieceTokenizer --tokenizer-model {model}\n"
        f"--train-data-path x --distributed-backend gloo {extra}\n"
    )
    with pytest.raises(ConfigError, match=f"{path}: {flag}"):
        load_config([str(path)])


PHASE, RUN = 8, 16  # the transition and the run's end, in iterations


def pack_args(root: Path, model: Path, pack: str, first: bool, valid: str) -> Path:
    """Pack ``pack``'s arguments as the workflow writes them: one run of two phases (--train-samples and
    --phase-transition-iterations), this pack's data, --finetune on the first pack only."""
    path = root / pack / f"{pack}.args"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        LLAMA + f"--micro-batch-size 1 --global-batch-size {BATCH} --train-samples {RUN * BATCH}\n"
        f"--phase-transition-iterations {PHASE}\n"
        "--lr 0.003 --min-lr 0.0003 --lr-decay-style cosine --lr-warmup-samples 8\n"
        "--adam-beta2 0.95 --weight-decay 0.01 --clip-grad 1.0 --seed 1234 --log-interval 1\n"
        f"--eval-interval 4 --eval-iters 2 --valid-data-path {valid}\n"
        f"--tokenizer-type GPTSentencePieceTokenizer --tokenizer-model {model}\n"
        f"--train-data-path {root / 'packs' / pack / pack}\n"
        f"--save {root / 'ckpt'} --load {root / 'ckpt'} --save-interval 6 --ckpt-format torch_dist\n"
        "--exit-signal-handler --exit-signal SIGUSR1 --distributed-backend gloo\n"
        + ("--finetune\n" if first else "")
    )
    return path


def hf_loss(folder: Path, samples: list[list[int]]) -> float:
    """``transformers``' mean loss of ``folder`` over ``samples`` (token windows)."""
    import torch
    import transformers

    model = transformers.LlamaForCausalLM.from_pretrained(folder, torch_dtype=torch.float32).eval()
    tokens = torch.tensor(samples)
    with torch.no_grad():
        return float(model(tokens, labels=tokens).loss)


def test_a_hugging_face_llama_continued_by_megatron_lms_loop_over_two_packs_is_exported_better(
    trainers: Trainers, tmp_path: Path, model: Path, start: Path
) -> None:
    eod = eod_of(model)
    for seed, pack in enumerate(["pack_a", "pack_b"]):
        make_pack(tmp_path / "packs" / pack / pack, pattern_docs(100, 10 + seed, eod))
    held_out = make_pack(tmp_path / "packs" / "valid" / "valid", pattern_docs(30, 20, eod))
    other = make_pack(tmp_path / "packs" / "valid_b" / "valid_b", pattern_docs(30, 21, eod))
    valid = f"1.0 {held_out} 1.0 {other}"
    finetune.prepare(str(tmp_path / "ckpt"), str(start), "megatron")
    cache = tmp_path / "megatron-cache"
    outputs = []
    for first, pack in ((True, "pack_a"), (False, "pack_b")):
        args = pack_args(tmp_path, model, pack, first, valid)
        outputs.append(megatron_loop.run_megatron(trainers, args.read_text().split(), cache, world=2))
    layout = checkpoint_dirs.MEGATRON
    assert sorted(megatron_loop.iteration_losses(outputs[0])) == list(range(1, PHASE + 1)), tail(outputs[0])
    assert sorted(megatron_loop.iteration_losses(outputs[1])) == list(range(PHASE + 1, RUN + 1))
    assert list(megatron_loop.validation_losses(outputs[0])) == [4, 8]
    assert list(megatron_loop.validation_losses(outputs[1])) == [12, 16]
    assert layout.latest(str(tmp_path / "ckpt")) == RUN
    assert (tmp_path / "ckpt" / layout.tag(PHASE)).is_dir()  # saved at the transition
    assert not (tmp_path / "ckpt" / layout.tag(RUN) / "reference_trainer").exists()  # Megatron-LM's own

    out, check = tmp_path / "export", tmp_path / "export.json"
    hf = start.parents[1] / "hf"
    argv = ["--checkpoint", str(tmp_path / "ckpt" / layout.tag(RUN)), "--config", str(args)]
    argv += [
        "--tokenizer-model",
        str(model),
        "--out",
        str(out),
        "--check",
        str(check),
        "--hf-source",
        str(hf),
    ]
    assert snakepack(["hf-export", *argv]) == 0
    assert read_json(check)["ok"] and read_json(check)["logits"]["max_abs"] < 1e-3
    data = IndexedDataset(held_out)
    tokens = [int(t) for d in range(len(data)) for t in data[d]]
    windows = [tokens[i : i + 32] for i in range(0, len(tokens) - 32, 32)]
    before, after = hf_loss(hf, windows), hf_loss(out, windows)
    assert after < before - 0.5, (before, after)
