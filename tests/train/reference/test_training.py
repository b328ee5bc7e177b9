"""The reference trainer end to end (subprocesses, CPU, one thread, deterministic): loss, outputs, resume
after kill -9, exits chained to the pack's end, the next pack, fine-tuning (seed 003), signals, SFT."""

from __future__ import annotations

import json
import signal
import socket
import statistics
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import sentencepiece as spm
import yaml

from tests.train.reference.conftest import (
    BATCH,
    SEQ,
    TWO_RANKS,
    command,
    latest,
    losses,
    make_pack,
    pattern_docs,
    run_trainer,
    start_trainer,
    trainer_env,
    wait_for,
    write_config,
)
from tests.utils import REPO, build_dataset, hf_folder, tail
from workflow_scripts.cli import main as snakepack
from workflow_scripts.datapacks.iterations import neox_samples
from workflow_scripts.train import finetune, sft
from workflow_scripts.train.hf import config as hf_config

pytestmark = pytest.mark.trainer  # the test tiers: tests/conftest.py

torch = pytest.importorskip("torch")
pytest.importorskip("deepspeed")


def at_iteration(n: int):
    """A predicate: the trainer printed iteration ``n`` or later."""

    def found(line: str) -> bool:
        return line.startswith("iteration") and int(line.split()[1].split("/")[0]) >= n

    return found


def model_state(checkpoint: Path) -> dict:
    return torch.load(checkpoint / "mp_rank_00_model_states.pt", map_location="cpu", weights_only=False)


def saved_steps(checkpoints: Path) -> list[int]:
    return sorted(int(p.name.removeprefix("global_step")) for p in checkpoints.glob("global_step*"))


def test_loss_goes_down_and_the_run_reports(tmp_path: Path, model: Path, packs: dict[str, str]) -> None:
    ckpt = tmp_path / "ckpt"
    config = write_config(
        tmp_path / "configs" / "pack_a.yml",
        model,
        train_data_paths=[packs["pack_a"]],
        valid_data_paths=[packs["valid"]],
        train_iters=40,
        eval_interval=20,
        checkpoint_factor=20,
        zero_optimization={"stage": 1},
        save=str(ckpt),
        load=str(ckpt),
    )
    proc = run_trainer(config)
    out = tmp_path / "reference" / "pack_a"  # default: reference/{config name} beside `save`
    rows = losses(out)
    assert [r[0] for r in rows] == list(range(1, 41))
    first, last = (statistics.mean(float(r[1]) for r in part) for part in (rows[:5], rows[-5:]))
    assert last < first - 1.0, (first, last)
    evals = [json.loads(line) for line in (out / "eval.jsonl").read_text().splitlines()]
    assert [e["iteration"] for e in evals] == [20, 40] and evals[1]["valid_loss"] < evals[0]["valid_loss"]
    assert evals[1]["valid_ppl"] == pytest.approx(np.exp(evals[1]["valid_loss"]))
    assert latest(ckpt) == "global_step40" and saved_steps(ckpt) == [20, 40]
    assert (ckpt / "global_step40" / "zero_pp_rank_0_mp_rank_00_optim_states.pt").exists()  # ZeRO 1
    assert (out / "loss.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    (segment,) = (out / "segments").glob("*.json")
    summary = json.loads(segment.read_text())
    assert segment.name == "global_step0-40.json" and summary["exit"] == "complete"
    assert summary["tokens"] == 40 * BATCH * SEQ and summary["tokens_per_s"] > 0
    assert summary["rss_peak_bytes"] > 0
    final = proc.stdout.strip().splitlines()[-1]
    assert (
        final.startswith("segment pack_a global_step0 -> global_step40: 40 iterations")
        and "tokens/s" in final
    )
    assert "not implemented: ignored: test_data_paths" in proc.stdout
    # the standalone evaluation of the latest checkpoint equals the run's own at that step
    proc = run_trainer(config, "--eval-only")
    record = json.loads(proc.stdout.strip().splitlines()[-1])
    assert record == evals[1]
    assert json.loads((out / "eval-only.jsonl").read_text()) == record


def test_kill_9_then_resume_equals_an_uninterrupted_run(
    tmp_path: Path, model: Path, packs: dict[str, str]
) -> None:
    keys = {"train_data_paths": [packs["pack_b"]], "train_iters": 24, "checkpoint_factor": 8}
    runs = {}
    for name in ("whole", "killed"):
        ckpt = tmp_path / name / "ckpt"
        runs[name] = write_config(
            tmp_path / name / "pack_b.yml", model, save=str(ckpt), load=str(ckpt), **keys
        )
    run_trainer(runs["whole"])
    whole = losses(tmp_path / "whole" / "reference" / "pack_b")
    proc = start_trainer(runs["killed"])
    wait_for(proc, at_iteration(9))  # global_step8 is saved; the next save is at 16
    proc.kill()  # SIGKILL: no chance to save
    proc.wait()
    ckpt, out = tmp_path / "killed" / "ckpt", tmp_path / "killed" / "reference" / "pack_b"
    step = int(latest(ckpt).removeprefix("global_step"))
    logged = losses(out)
    assert 8 <= step < 24 and len(logged) > step  # killed after a checkpoint, with iterations to redo
    assert logged == whole[: len(logged)]
    proc = run_trainer(runs["killed"])
    assert f"resumed from global_step{step}: local iteration {step} of 24" in proc.stdout
    assert losses(out) == whole  # step by step, bit for bit (dropout on: the RNG state is restored)
    a, b = (model_state(tmp_path / n / "ckpt" / "global_step24") for n in ("whole", "killed"))
    assert all(torch.equal(a["module"][k], b["module"][k]) for k in a["module"])
    # every random state a checkpoint holds, Python's too, comes from the seed: the same bytes run to run
    assert a["reference_trainer"]["rng"]["python"] == b["reference_trainer"]["rng"]["python"]


def test_three_exits_reach_the_end_and_the_next_pack_continues(
    tmp_path: Path, model: Path, packs: dict[str, str]
) -> None:
    ckpt = tmp_path / "ckpt"
    first = write_config(
        tmp_path / "configs" / "pack_a.yml",
        model,
        train_data_paths=[packs["pack_a"]],
        train_iters=10,
        exit_interval=4,
        checkpoint_factor=2,
        extra_save_iters=[3],
        save=str(ckpt),
        load=str(ckpt),
    )
    for end, reason in ((4, "exit_interval 4"), (8, "exit_interval 4"), (10, "complete")):
        proc = run_trainer(first)
        assert latest(ckpt) == f"global_step{end}" and proc.stdout.rstrip().endswith(f"exit: {reason}")
    assert saved_steps(ckpt) == [2, 3, 4, 6, 8, 10]
    proc = run_trainer(first)  # the pack is done: nothing to train, still exit 0
    assert "nothing to train" in proc.stdout and latest(ckpt) == "global_step10"
    assert [r[0] for r in losses(tmp_path / "reference" / "pack_a")] == list(range(1, 11))
    second = write_config(
        tmp_path / "configs" / "pack_b.yml",
        model,
        train_data_paths=[packs["pack_b"]],
        train_iters=6,
        iteration_offset=10,
        checkpoint_factor=4,
        warmup=0,
        lr_decay_style="constant",
        override_lr_scheduler=True,
        save=str(ckpt),
        load=str(ckpt),
    )
    run_trainer(second)
    rows = losses(tmp_path / "reference" / "pack_b")
    assert [r[0] for r in rows] == list(range(11, 17)) and {r[2] for r in rows} == {"0.003"}
    assert latest(ckpt) == "global_step16" and saved_steps(ckpt)[-2:] == [12, 16]
    states = model_state(ckpt / "global_step16")
    state = states["reference_trainer"]
    assert (state["iteration"], state["local_iteration"], state["consumed_samples"]) == (16, 6, 6 * BATCH)
    assert states["iteration"] == 16  # GPT-NeoX's own key: its load_checkpoint reads it without an offset
    # a pack whose offset the chain has not reached is refused, naming both steps
    third = write_config(
        tmp_path / "configs" / "pack_c.yml",
        model,
        train_data_paths=[packs["pack_c"]],
        train_iters=4,
        iteration_offset=20,
        save=str(ckpt),
        load=str(ckpt),
    )
    proc = run_trainer(third, ok=False)
    assert proc.returncode == 2
    assert "global_step16, before this pack's iteration_offset 20" in proc.stderr


def test_finetune_true_then_false(tmp_path: Path, model: Path, packs: dict[str, str]) -> None:
    base = tmp_path / "pretrain"
    pretrain = write_config(
        tmp_path / "pretrain.yml",
        model,
        train_data_paths=[packs["pack_a"]],
        train_iters=6,
        save=str(base),
        load=str(base),
    )
    run_trainer(pretrain)
    start, ckpt = base / "global_step6", tmp_path / "sft_v1"
    finetune.prepare(str(ckpt), str(start))  # seed 003's folder: a link to the start and `latest`

    def config() -> Path:
        return write_config(
            tmp_path / "configs" / "ft.yml",
            model,
            train_data_paths=[packs["pack_b"]],
            train_iters=8,
            iteration_offset=6,
            exit_interval=4,
            checkpoint_factor=4,
            finetune=finetune.finetune_flag(str(ckpt), str(start)),
            save=str(ckpt),
            load=str(ckpt),
        )

    first = config()
    assert yaml.safe_load(first.read_text())["finetune"] is True
    proc = run_trainer(first)
    assert "finetune: weights of global_step6, fresh optimizer, local iteration 0" in proc.stdout
    assert latest(ckpt) == "global_step10"
    assert model_state(ckpt / "global_step10")["optimizer"]["state"][0]["step"] == 4  # fresh optimizer
    assert model_state(start)["optimizer"]["state"][0]["step"] == 6
    rows = losses(tmp_path / "reference" / "ft")
    assert [r[0] for r in rows] == [7, 8, 9, 10]
    fresh = losses(tmp_path / "reference" / "pretrain")[0]
    assert float(rows[0][1]) < float(fresh[1]) - 0.2  # it started from the trained weights
    refused = run_trainer(first, ok=False)  # finetune still true after the run saved: the seed-003 bug
    assert refused.returncode == 2 and "finetune must be false now" in refused.stderr
    second = config()
    assert yaml.safe_load(second.read_text())["finetune"] is False
    proc = run_trainer(second)
    assert "resumed from global_step10: local iteration 4 of 8" in proc.stdout
    assert latest(ckpt) == "global_step14"
    assert model_state(ckpt / "global_step14")["optimizer"]["state"][0]["step"] == 8
    assert [r[0] for r in losses(tmp_path / "reference" / "ft")] == list(range(7, 15))


def test_signals_finish_the_iteration_save_and_exit_0(tmp_path: Path, model: Path, eod: int) -> None:
    ckpt = tmp_path / "ckpt"
    big = make_pack(tmp_path / "big" / "big", pattern_docs(3000, 9, eod))  # room for seconds of training
    config = write_config(
        tmp_path / "pack_c.yml",
        model,
        train_data_paths=[big],
        train_iters=900,
        checkpoint_factor=1000,
        save=str(ckpt),
        load=str(ckpt),
    )
    out = tmp_path / "reference" / "pack_c"
    previous = 0
    for signum in (signal.SIGTERM, signal.SIGUSR1):
        proc = start_trainer(config)
        wait_for(proc, at_iteration(previous + 3))
        proc.send_signal(signum)
        rest, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0, rest
        step = int(latest(ckpt).removeprefix("global_step"))
        assert previous + 3 <= step < 900 and rest.rstrip().endswith(f"exit: signal {signum.name}")
        assert losses(out)[-1][0] == step
        summary = json.loads((out / "segments" / f"global_step{previous}-{step}.json").read_text())
        assert summary["exit"] == f"signal {signum.name}" and summary["latest"] == f"global_step{step}"
        previous = step


def test_sft_pack_reads_several_epochs_with_the_switches(tmp_path: Path, model: Path) -> None:
    sp = spm.SentencePieceProcessor(model_file=str(model))
    user, assistant, eod = (sp.piece_to_id(p) for p in ("<|user|>", "<|assistant|>", "<|endoftext|>"))
    rng = np.random.default_rng(3)
    docs = []
    for _ in range(150):
        prompt, answer = (
            rng.integers(10, 50, int(rng.integers(2, 8))),
            rng.integers(50, 90, int(rng.integers(2, 12))),
        )
        docs.append([[user, *prompt.tolist(), user, assistant, *answer.tolist(), assistant, eod]])
    prefix = build_dataset(tmp_path / "sft" / "sft", docs)
    lengths = np.array([len(d[0]) for d in docs])
    iters = sft.sft_train_iters(lengths, SEQ, BATCH, 1234, epochs=2)  # as the plan counts an SFT pack
    assert neox_samples(iters, BATCH) > sft.k_bin_samples(lengths, SEQ, 1234, epochs=1)  # a second pass
    ckpt = tmp_path / "ckpt"
    keys = {"train_data_paths": [prefix], "train_iters": iters, "save": str(ckpt), "load": str(ckpt)}
    config = write_config(tmp_path / "sft.yml", model, pack_impl="k_bin_packed", **keys)
    proc = run_trainer(config, env={"SFT_ENABLED": "1", "CURSE_ATTENTION": "1"})
    assert "SFT_ENABLED=1 CURSE_ATTENTION=1" in proc.stdout and latest(ckpt) == f"global_step{iters}"
    index = (
        f"sft_train_indexmap_{neox_samples(iters, BATCH)}ns_{SEQ}sl_1234s_k_bin_packedpi_ac_sample_idx.npy"
    )
    assert (tmp_path / "sft" / index).exists()
    # the same iterations over the same tokens, packed for pretraining, would need a second epoch
    packed = write_config(tmp_path / "packed.yml", model, **keys)
    assert snakepack(["train-reference", "--config", str(packed)]) == 2


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_processes_read_the_same_samples_as_one(
    tmp_path: Path, model: Path, packs: dict[str, str]
) -> None:
    keys = {
        "train_data_paths": [packs["pack_a"]],
        "train_iters": 6,
        "attention_dropout": 0.0,
        "hidden_dropout": 0.0,
    }
    one = write_config(tmp_path / "one" / "p.yml", model, **keys)
    run_trainer(one)
    two = write_config(tmp_path / "two" / "p.yml", model, gradient_accumulation_steps=1, **keys)
    launch = list(TWO_RANKS)
    launch += ["--master_port", str(free_port())]
    proc = subprocess.run(
        launch + command(two)[1:], cwd=REPO, env=trainer_env(), capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, tail(proc.stdout + proc.stderr)
    assert "data parallel 2" in proc.stdout
    a, b = losses(tmp_path / "one" / "reference" / "p"), losses(tmp_path / "two" / "reference" / "p")
    assert [r[0] for r in a] == [r[0] for r in b] == list(range(1, 7))
    assert [float(r[1]) for r in a] == pytest.approx([float(r[1]) for r in b], rel=1e-5)


def test_keep_last_n_checkpoints_deletes_as_gpt_neox_does(tmp_path: Path, model: Path, packs: dict) -> None:
    """GPT-NeoX's own retention (which the workflow's configs turn off): after each save, all but the newest
    N checkpoints are deleted, milestones and pack ends alike. Without the key nothing is deleted."""
    ckpt = tmp_path / "ckpt"
    common = {"train_data_paths": [packs["pack_a"]], "train_iters": 30, "checkpoint_factor": 10}
    config = write_config(tmp_path / "c" / "a.yml", model, **common, keep_last_n_checkpoints=1,
                          save=str(ckpt), load=str(ckpt))  # fmt: skip
    proc = run_trainer(config)
    assert saved_steps(ckpt) == [30] and "keep_last_n_checkpoints 1: deleted" in proc.stdout
    kept = tmp_path / "kept"
    config = write_config(tmp_path / "c" / "b.yml", model, **common, keep_last_n_checkpoints=None,
                          save=str(kept), load=str(kept))  # fmt: skip
    run_trainer(config)
    assert saved_steps(kept) == [10, 20, 30]


def test_a_llama_imported_from_hugging_face_is_fine_tuned_strictly(
    tmp_path: Path, model: Path, packs: dict[str, str]
) -> None:
    """``snakepack hf-import --pipe`` (GPT-NeoX's pipeline files, as the sample's pipe_parallel_size 1
    wants) is a start the trainer loads with the LLaMA keys the import derives; a config of another shape
    fails on the weights, as GPT-NeoX's strict load does."""
    hf = hf_folder(tmp_path / "hf", model)
    start = tmp_path / "imported" / "global_step0"
    args = ["--hf", str(hf), "--tokenizer-model", str(model), "--out", str(start), "--pipe"]
    assert snakepack(["hf-import", *args, "--check", str(tmp_path / "imported" / "import.json")]) == 0
    keys = hf_config.neox_model_keys(json.loads((hf / "config.json").read_text()))

    def run(name: str, **shape: Any) -> subprocess.CompletedProcess:
        ckpt = tmp_path / name
        finetune.prepare(str(ckpt), str(start))
        config = write_config(
            tmp_path / f"{name}.yml",
            model,
            train_data_paths=[packs["pack_a"]],
            train_iters=4,
            finetune=True,
            save=str(ckpt),
            load=str(ckpt),
            **(keys | shape),
        )
        return run_trainer(config, ok=not shape)

    proc = run("run")
    assert "finetune: weights of global_step0" in proc.output
    notes = [line.strip() for line in proc.output.splitlines() if "not implemented" in line]
    assert notes == ["not implemented: ignored: test_data_paths"], notes  # every LLaMA key is built
    assert (tmp_path / "run" / "global_step4").is_dir()
    wrong = run("wrong", num_kv_heads=4)
    assert wrong.returncode != 0
    assert "size mismatch for sequential.2.attention.query_key_value" in wrong.output, tail(wrong.output)
