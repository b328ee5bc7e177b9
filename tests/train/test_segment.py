"""A pack's segments (train-segment), their evaluation, retention, the pack check and the curve, driven by a
small stand-in trainer with GPT-NeoX's checkpoint layout (the real trainer runs in test_chain_slurm.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from workflow_scripts.core.fsio import read_json
from workflow_scripts.train import curve, detach, finished, progress_lines, retention, segment
from workflow_scripts.train.settings import TrainSettings

# Resumes from `latest`, trains to the next multiple of exit_interval (local) or the end, saves every
# `save_every` global steps and at its exit, and on SIGUSR1/SIGTERM saves and exits 0 -- the contract of
# train.launch. Prints GPT-NeoX-style lines (loss LOSS_SCALE / step). FAIL_AT makes it crash at a global step.
STAND_IN = textwrap.dedent(
    """
    import os, signal, sys, time, yaml
    cfg = {}
    for path in sys.argv[1:]:
        cfg.update(yaml.safe_load(open(path)))
    ckpt, offset, iters = cfg["save"], cfg["iteration_offset"], cfg["train_iters"]
    exit_interval = cfg["exit_interval"]
    stop = []
    signal.signal(signal.SIGUSR1, lambda *a: stop.append(1))
    signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
    def save(step):
        os.makedirs(f"{ckpt}/global_step{step}", exist_ok=True)
        open(f"{ckpt}/global_step{step}/state", "w").write(str(step))
        open(f"{ckpt}/latest.tmp", "w").write(f"global_step{step}\\n")
        os.replace(f"{ckpt}/latest.tmp", f"{ckpt}/latest")
    latest = open(f"{ckpt}/latest").read().strip() if os.path.exists(f"{ckpt}/latest") else None
    step = int(latest[len("global_step"):]) if latest else offset
    print(f"finetune={cfg.get('finetune')} SFT_ENABLED={os.environ.get('SFT_ENABLED')}", flush=True)
    local = step - offset
    while local < iters:
        time.sleep(float(os.environ.get("STEP_S", "0.01")))
        local += 1
        step = offset + local
        if os.environ.get("FAIL_AT") == str(step):
            sys.exit(3)
        scale = float(os.environ.get("LOSS_SCALE", "10"))
        print(f" iteration {step:>8}/{offset + iters} | lm_loss: {scale / step:.4E} |", flush=True)
        if step % 4 == 0 or local == iters or local % exit_interval == 0 or stop:
            save(step)
        if stop and os.environ.get("DIE_AFTER_SAVE"):  # its handler gone once it saved: the notice kills it
            signal.signal(signal.SIGUSR1, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGUSR1)
        if stop or local % exit_interval == 0:
            break
    print(f" validation results at iteration {step} | lm_loss value: {11 / step:.4E} |", flush=True)
    """
)


@pytest.fixture
def pack(tmp_path: Path) -> dict:
    """A pack of global steps 10 -> 35 (exit_interval 10: three segments) and its keys.json."""
    ckpt = tmp_path / "checkpoints"
    ckpt.mkdir()
    config = tmp_path / "p.yml"
    config.write_text(f"save: {ckpt}\niteration_offset: 10\ntrain_iters: 25\nexit_interval: 10\n")
    keys = tmp_path / "keys.json"
    values = {"iteration_offset": 10, "train_iters": 25, "exit_interval": 10, "save": str(ckpt)}
    keys.write_text(
        json.dumps(
            {
                "config": str(config),
                "summary": {
                    "pack": "p",
                    "segments": 4,
                    "iteration_offset": 10,
                    "train_iters": 25,
                    "exit_interval": 10,
                    "hours": 0.01,
                },
                "set": {k: {"value": v} for k, v in values.items()},
                "environment": {"SFT_ENABLED": "1"},
            }
        )
    )
    trainer = tmp_path / "stand_in.py"
    trainer.write_text(STAND_IN)
    (ckpt / "global_step10").mkdir()  # the previous pack's end
    (ckpt / "latest").write_text("global_step10\n")
    return {
        "dir": tmp_path,
        "keys": str(keys),
        "ckpt": ckpt,
        "launch": f"{sys.executable} {trainer} {{config}}",
    }


def run_segment(pack: dict, k: int, n: int = 4, env: dict | None = None, *extra: str) -> subprocess.Popen:
    record = pack["dir"] / "segments" / f"{k}.json"
    cmd = [
        sys.executable,
        "-m",
        "workflow_scripts",
        "train-segment",
        "--keys",
        pack["keys"],
        "--segment",
        str(k),
    ]
    cmd += ["--segments", str(n), "--record", str(record), "--launch", pack["launch"], *extra]
    return subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env={**os.environ, **(env or {})}
    )


def segment_ok(pack: dict, k: int, n: int = 4, env: dict | None = None, *extra: str) -> dict:
    proc = run_segment(pack, k, n, env, *extra)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    return read_json(pack["dir"] / "segments" / f"{k}.json")


def test_segments_reach_their_boundaries_and_a_spare_only_verifies(pack):
    records = [segment_ok(pack, k) for k in range(4)]
    assert [(r["first_step"], r["last_step"]) for r in records] == [(10, 20), (20, 30), (30, 35), (35, 35)]
    assert [r["finished"] for r in records] == [False, False, True, True]
    assert records[3]["iterations"] == 0 and records[3]["exit"] == "pack finished"
    assert records[0]["losses"] == [[s, pytest.approx(10 / s, rel=1e-4)] for s in range(11, 21)]
    assert records[0]["valid_losses"] == [[20, pytest.approx(11 / 20, rel=1e-4)]]
    assert records[0]["train_loss"] == pytest.approx(0.5) and records[0]["s_per_iter"] > 0
    done = pack["dir"] / "done.json"
    finished.main(
        [
            "--keys",
            pack["keys"],
            "--out",
            str(done),
            *map(str, sorted((pack["dir"] / "segments").glob("*.json"))),
        ]
    )
    assert read_json(done)["iterations_recorded"] == 25 and read_json(done)["segments_training"] == 3


def stop_at_12(pack, signum):
    """A segment stopped by ``signum`` after its trainer saved global_step12; its output."""
    proc = run_segment(pack, 0, 4, {"STEP_S": "0.2"})
    deadline = time.time() + 60
    while time.time() < deadline and not (pack["ckpt"] / "global_step12").exists():
        time.sleep(0.05)
    proc.send_signal(signum)
    out, _ = proc.communicate(timeout=60)
    return proc.returncode, out


def test_a_signal_stops_the_trainer_which_saves_and_a_retry_resumes(pack):
    rc, out = stop_at_12(pack, signal.SIGUSR1)  # a time limit's notice: the segment did its share
    assert rc == 0, out
    first = read_json(pack["dir"] / "segments" / "0.json")
    assert first["exit"] == f"signal {int(signal.SIGUSR1)}"
    assert 12 <= first["last_step"] < 20
    second = segment_ok(pack, 1)  # to the same boundary: local iterations are multiples of exit_interval
    assert (second["first_step"], second["last_step"]) == (first["last_step"], 20)


def test_a_trainer_killed_by_the_notice_after_its_save_ends_the_segment(pack):
    """Megatron-LM restores SIGUSR1's default once its loop ends: a notice that comes during its last
    evaluation or its exit kills it (exit 138) after it saved; the segment stands on that save."""
    proc = run_segment(pack, 0, 4, {"STEP_S": "0.2", "DIE_AFTER_SAVE": "1"})
    deadline = time.time() + 60
    while time.time() < deadline and not (pack["ckpt"] / "global_step12").exists():
        time.sleep(0.05)
    proc.send_signal(signal.SIGUSR1)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0 and "died of the notice (signal 10) after saving" in out, out
    first = read_json(pack["dir"] / "segments" / "0.json")
    assert first["exit"] == f"signal {int(signal.SIGUSR1)}" and 12 <= first["last_step"] < 20


def test_a_cancelled_segment_saves_leaves_no_record_and_its_retry_resumes(pack):
    """SIGTERM (scancel, preemption): the trainer saves, the segment fails (no record, its attempt says
    why), so a retry of the same segment resumes from what was saved."""
    rc, out = stop_at_12(pack, signal.SIGTERM)
    assert rc != 0 and "stopped by SIGTERM" in out
    assert not (pack["dir"] / "segments" / "0.json").exists()
    (attempt,) = [read_json(p) for p in (pack["dir"] / "segments" / "attempts").glob("0.*.json")]
    assert "stopped by SIGTERM" in attempt["exit"] and attempt["last_step"] >= 12
    retry = segment_ok(pack, 0)
    assert (retry["first_step"], retry["last_step"]) == (attempt["last_step"], 20)


def test_the_watchdog_stops_the_trainer_before_the_time_limit(pack, monkeypatch):
    # outside Slurm there is no time limit: the deadline is given directly
    monkeypatch.setattr(segment, "deadline_of", lambda margin: time.time() + 1.0)
    monkeypatch.setenv("STEP_S", "0.2")
    record = pack["dir"] / "0.json"
    args = ["--keys", pack["keys"], "--segment", "0", "--segments", "4", "--record", str(record)]
    assert segment.main([*args, "--launch", pack["launch"]]) == 0
    assert read_json(record)["exit"] == "time limit margin reached"
    assert 10 < read_json(record)["last_step"] < 20


def test_failures_leave_no_record_but_an_attempt(pack):
    failures = [
        ({"FAIL_AT": "12"}, 0, 4, "the trainer exited with 3"),
        ({}, 0, 1, "its last segment (1) ended before the pack's end (latest is global_step20 of 35)"),
    ]
    for env, k, n, why in failures:
        proc = run_segment(pack, k, n, env)
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 2 and why in out, out
        assert not (pack["dir"] / "segments" / f"{k}.json").exists()
    exits = sorted(read_json(p)["exit"] for p in (pack["dir"] / "segments" / "attempts").glob("0.*.json"))
    assert len(exits) == 2 and all(any(why in e for e in exits) for *_, why in failures), exits


def test_the_curve_takes_a_killed_attempts_iterations(pack):
    proc = run_segment(pack, 0, 4, {"FAIL_AT": "15"})
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 2, out
    (killed,) = map(read_json, (pack["dir"] / "segments" / "attempts").glob("0.*.json"))
    assert "the trainer exited with 3; latest is global_step12" in killed["exit"]
    assert [step for step, _ in killed["losses"]] == [11, 12, 13, 14] and killed["last_step"] == 12
    paths = []
    for k in range(4):
        segment_ok(pack, k, 4, {"LOSS_SCALE": "20"})  # the retry resumes from global_step12
        paths.append(str(pack["dir"] / "segments" / f"{k}.json"))
    out_dir = pack["dir"] / "curve"
    assert curve.main(["--out-dir", str(out_dir), "--segments", *paths]) == 0
    rows = [line.split(",") for line in (out_dir / "loss.csv").read_text().splitlines()[1:]]
    assert [int(r[0]) for r in rows] == list(range(11, 36))
    losses = {int(r[0]): float(r[3]) for r in rows}
    assert losses[12] == pytest.approx(10 / 12, rel=1e-4)  # trained only by the killed attempt
    assert losses[13] == pytest.approx(20 / 13, rel=1e-4)  # lost by the crash, trained again by the retry
    assert read_json(out_dir / "stats.json")["failed_attempts"] == 1


def test_finetune_is_turned_off_once_the_run_has_its_own_checkpoint(pack):
    start = str(pack["ckpt"] / "global_step10")
    config = Path(json.loads(Path(pack["keys"]).read_text())["config"])
    config.write_text(config.read_text() + "finetune: true\n")
    first = run_segment(pack, 0, 4, None, "--finetune-from", start)
    out, _ = first.communicate(timeout=120)
    assert "finetune=True SFT_ENABLED=1" in out  # the pack's config as is, and the pack's environment
    second = run_segment(pack, 1, 4, None, "--finetune-from", start)
    out, _ = second.communicate(timeout=120)
    assert "finetune=False SFT_ENABLED=1" in out


def test_retention_keeps_latest_milestones_protected_and_later_checkpoints(tmp_path):
    ckpt = tmp_path / "ckpt"
    for step in (4, 8, 10, 12, 16, 20, 24):
        (ckpt / f"global_step{step}").mkdir(parents=True)
        (ckpt / f"global_step{step}" / "w").write_bytes(b"x" * 100)
    (ckpt / "latest").write_text("global_step24\n")
    result = retention.prune(str(ckpt), up_to=20, keep_last=1, milestones=[8], protect=[10])
    assert result["deleted"] == [4, 12, 16] and result["bytes_freed"] == 300
    assert sorted(int(p.name[11:]) for p in ckpt.glob("global_step*")) == [8, 10, 20, 24]
    assert retention.prune(str(ckpt), 24, keep_last=0, milestones=[], protect=[])["deleted"] == []


def test_the_pack_check_reads_the_checkpoint(pack):
    segment_ok(pack, 0)
    with pytest.raises(finished.UserError, match=r"latest .* is global_step20, its end is global_step35"):
        finished.main(["--keys", pack["keys"], "--out", str(pack["dir"] / "d.json"), "x.json"])


def test_curve_and_tables(pack):
    paths = []
    for k in range(4):
        segment_ok(pack, k)
        paths.append(str(pack["dir"] / "segments" / f"{k}.json"))
    evals = pack["dir"] / "e.json"
    evals.write_text(json.dumps({"pack": "p", "segment": 0, "checkpoint": "global_step20", "iteration": 20,
                                 "valid_loss": 0.55}))  # fmt: skip
    out = pack["dir"] / "curve"
    assert curve.main(["--out-dir", str(out), "--segments", *paths, "--evals", str(evals)]) == 0
    rows = (out / "loss.csv").read_text().splitlines()
    assert rows[0] == "iteration,pack,segment,loss" and len(rows) == 1 + 25
    assert [int(r.split(",")[0]) for r in rows[1:]] == list(range(11, 36))
    assert (out / "loss.png").read_bytes()[:4] == b"\x89PNG"
    assert read_json(out / "stats.json")["iterations"] == 25
    assert len((out / "segments.csv").read_text().splitlines()) == 5


@pytest.mark.parametrize(
    ("line", "train", "valid"),
    [
        ("iteration       12/40 | loss 7.100000 | lr 1.0e-03 | 5000 tokens/s", (12, 7.1), None),
        (" iteration       12/      40 | time per iteration (ms): 5.1 | lm_loss: 7.1E+00 |", (12, 7.1), None),
        (" iteration       12/      40 | consumed samples: 96 | lm loss: 7.100000E+00 |", (12, 7.1), None),
        ("  validation at 12: loss 7.300000 ppl 1480.3", None, (12, 7.3)),
        (" validation results at iteration 12 | lm_loss value: 7.3E+00 | lm_loss_ppl value: 1.4E+03", None,
         (12, 7.3)),
        (" validation loss at iteration 12 | lm loss value: 7.300000E+00 | lm loss PPL: 1.4E+03", None,
         (12, 7.3)),
        ("  saved results/train/checkpoints/global_step12", None, None),
    ],
)  # fmt: skip
def test_progress_lines_of_the_three_trainers(line, train, valid):
    assert progress_lines.iteration_loss(line) == train
    assert progress_lines.validation_loss(line) == valid


def test_detached_chain_order_and_dependencies(pack, tmp_path):
    settings = TrainSettings.from_config({"keep_last": 2})
    units = detach.chain([pack["keys"]], settings, str(tmp_path / "train"), str(tmp_path / "logs"), sft=False)
    names = [u.name for u in units]
    segments = [f"p/{kind}/{k}" for k in range(4) for kind in ("segment", "after")]
    assert names == [*segments, "p/finished", "curve"]
    assert units[2].after_any == ["p/segment/0"] and units[3].after_ok == ["p/segment/1"]
    assert "train-eval" in units[1].command and "train-prune" in units[1].command
    assert units[8].after_any == ["p/segment/3"] and "train-finished" in units[8].command
    assert not [u for u in units[:8] if "train-finished" in u.command]
    assert units[-1].after_any == [f"p/after/{k}" for k in range(4)]


def test_a_folder_above_latest_is_removed_before_the_trainer_starts(pack, tmp_path):
    """A save cut short (global_step14 above latest global_step10) is removed, printed and recorded; a link
    above latest (a fine-tune's start, which Megatron-LM's runs name past their end) is left alone. The kill
    itself: tests/train/test_neox_in_the_loop.py."""
    (pack["ckpt"] / "global_step14").mkdir()
    (pack["ckpt"] / "global_step14" / "mp_rank_00_model_states.pt").write_bytes(b"cut")
    (tmp_path / "start").mkdir()
    (pack["ckpt"] / "global_step99").symlink_to(tmp_path / "start")
    proc = run_segment(pack, 0)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    record = read_json(pack["dir"] / "segments" / "0.json")
    assert record["removed_partial"] == ["global_step14"] and record["first_step"] == 10
    assert "removed global_step14" in out and (pack["ckpt"] / "global_step99").is_symlink()
