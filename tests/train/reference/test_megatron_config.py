"""The reference trainer reads Megatron-LM's arguments as strictly as Megatron-LM: phases by samples (the
workflow's arguments), the phase the run's tracker is in, what Megatron-LM refuses refused (phase
transitions without --train-samples, iterations beside samples, a resume past the last phase, an LR
schedule that differs from the checkpoint's), and two packs trained across a phase transition."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.train.reference.conftest import BATCH, SEQ, run_trainer
from workflow_scripts.train import checkpoint_dirs
from workflow_scripts.train.reference.config import load_config
from workflow_scripts.train.reference.megatron_config import blend
from workflow_scripts.train.reference.run_config import ConfigError

LAYOUT = checkpoint_dirs.MEGATRON


def write_args(
    path: Path,
    model: Path,
    data: str,
    checkpoints: Path,
    extra: str = "",
    run: str = f"--train-samples {8 * BATCH}",
) -> Path:
    """A tiny run of two phases of 4 iterations (``run``: 8 x the batch, a transition at 4)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        f"--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length {SEQ}\n"
        f"--max-position-embeddings {SEQ} --micro-batch-size 2 --global-batch-size {BATCH}\n"
        "--lr 0.003 --min-lr 0.0003 --lr-decay-style cosine --seed 1234 --log-interval 1\n"
        f"--tokenizer-type GPTSentencePieceTokenizer --tokenizer-model {model}  # the data's tokenizer\n"
        f"--train-data-path {data} --save {checkpoints} --load {checkpoints} --save-interval 4\n"
        f"{run} --phase-transition-iterations 4 --distributed-backend gloo\n{extra}\n"
    )
    return path


@pytest.mark.parametrize(
    ("run", "message"),
    [
        ("--train-iters 8", "--phase-transition-iterations without --train-samples"),
        (f"--train-iters 8 --train-samples {8 * BATCH}", "--train-iters beside --train-samples"),
    ],
)
def test_what_megatron_lm_refuses_is_refused(tmp_path: Path, model: Path, run: str, message: str) -> None:
    path = write_args(tmp_path / "a.args", model, "x", tmp_path / "ckpt", run=run)
    with pytest.raises(ConfigError, match=message):
        load_config([str(path)])


def test_the_phase_is_the_one_the_tracker_is_in(tmp_path: Path, model: Path) -> None:
    checkpoints = tmp_path / "ckpt"
    path = write_args(tmp_path / "a.args", model, "x", checkpoints)
    cfg = load_config([str(path)])
    assert (cfg.offset, cfg.end, cfg.phase_transitions) == (0, 4, (4,))  # no checkpoint: the first phase
    checkpoints.mkdir()
    for step, phase in [(3, (0, 4)), (4, (4, 8)), (5, (4, 8))]:  # a transition starts the next phase
        LAYOUT.set_latest(str(checkpoints), step)
        cfg = load_config([str(path)])
        assert (cfg.offset, cfg.end) == phase
    assert (
        load_config([str(path)], evaluation=True).offset,
        load_config([str(path)], evaluation=True).end,
    ) == (
        0,
        8,
    )  # train-eval's argv: no phases
    LAYOUT.set_latest(str(checkpoints), 8)
    with pytest.raises(ConfigError, match="no phase after it"):
        load_config([str(path)])
    evaluation = load_config([str(path)], evaluation=True)  # the run's last checkpoint is evaluated
    assert (evaluation.offset, evaluation.end) == (0, 8)
    LAYOUT.set_latest(str(checkpoints), 100)
    finetune = write_args(tmp_path / "f.args", model, "x", checkpoints, "--finetune")
    assert load_config([str(finetune)]).offset == 0  # --finetune restarts at iteration 0


def test_two_packs_across_a_transition_and_a_schedule_megatron_would_refuse(
    tmp_path: Path, model: Path, packs: dict[str, str]
) -> None:
    checkpoints = tmp_path / "ckpt"
    first = write_args(tmp_path / "a" / "a.args", model, packs["pack_a"], checkpoints)
    out = run_trainer(first).output
    assert LAYOUT.latest(str(checkpoints)) == 4 and "exit: complete" in out  # the phase's end
    other = write_args(
        tmp_path / "b2" / "b2.args", model, packs["pack_b"], checkpoints, "--lr-decay-style linear"
    )
    refused = run_trainer(other, ok=False)
    assert refused.returncode != 0 and "for learning rate decay style do not match" in refused.output
    override = "--lr-decay-style linear --override-opt-param-scheduler"
    allowed = write_args(tmp_path / "b3" / "b3.args", model, packs["pack_b"], tmp_path / "c3", override)
    assert load_config([str(allowed)]).scheduler_from == "override"  # Megatron-LM takes this pack's values
    second = write_args(tmp_path / "b" / "b.args", model, packs["pack_b"], checkpoints)
    out = run_trainer(second).output
    assert "resumed from iter_0000004: local iteration 0 of 4" in out
    assert LAYOUT.latest(str(checkpoints)) == 8


@pytest.mark.parametrize(
    ("values", "paths", "weights"),
    [
        (["a", "b"], ["a", "b"], None),
        ([1.0, "a", 2, "b"], ["a", "b"], [1.0, 2.0]),
        (["a", 1.0, "b"], ["a", "1.0", "b"], None),  # odd: prefixes alone, as Megatron-LM reads it
    ],
)
def test_a_held_out_blend_is_read_as_megatron_lm_reads_it(
    values: list, paths: list[str], weights: list[float] | None
) -> None:
    assert blend(values) == (paths, weights)
