"""The lines a run ends with: what was read, kept and rejected (with the worst files), where the outputs
are and the next command; on failure, the failed job's log and its error; nothing on a dry run or a run
with nothing to do."""

from __future__ import annotations

import gzip
import random
import re
import shutil
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from tests.utils import Workflow, tail, write_jsonl
from workflow_scripts.core import run_summary, stage_stats, train_layout
from workflow_scripts.ingest.shards import IngestSettings, ingest

pytestmark = pytest.mark.workflow  # the test tiers: tests/conftest.py

SHARDS = "results/shards/stats.json"  # the ingest stage alone: seconds


def corpus(raw: Path) -> None:
    """Two good files, a .jsonl.gz cut short, a binary file named .jsonl and a 0-byte .jsonl.gz."""
    raw.mkdir()
    for part in ("a", "b"):
        write_jsonl(
            raw / f"en_web_{part}.jsonl", [{"text": f"text {part} {i} of the corpus"} for i in range(20)]
        )
    whole = gzip.compress(b"".join(orjson.dumps({"text": f"cut text {i}"}) + b"\n" for i in range(3000)))
    (raw / "en_web_cut.jsonl.gz").write_bytes(whole[: len(whole) // 2])
    (raw / "en_web_image.jsonl").write_bytes(random.Random(1).randbytes(4000))
    (raw / "en_web_void.jsonl.gz").write_bytes(b"")


def configure(workflow: Workflow, raw: Path, *files: str, **ingest: object) -> str:
    source = {"name": "web", "paths": [str(raw / f) for f in files], "lang": "en", "domain": "web"}
    config = {"sources": [source | {"subdomain": "cc"}], "ingest": {"shard_size": 100_000, **ingest}}
    (workflow.root / "mine.yaml").write_text(yaml.safe_dump(config))
    return "mine.yaml"


def summary(output: str) -> list[str]:
    """The run's summary: its lines from the first `snakepack:` line on, up to Snakemake's log hint."""
    lines = output.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("snakepack: ")), len(lines))
    return [line for line in lines[start:] if line.startswith(("snakepack: ", "  "))]


def test_a_run_with_bad_files_says_what_was_rejected_and_what_comes_next(
    workflow: Workflow, tmp_path: Path
) -> None:
    corpus(tmp_path / "raw")
    mine = configure(workflow, tmp_path / "raw", "en_web_*.jsonl", "en_web_*.jsonl.gz")
    options = ("--profile", "profiles/local", "--cores", "1", "--configfile", mine)
    mark = Path(train_layout.TrainLayout(str(workflow.root / "results" / "train"), "logs").detach_flag)
    mark.parent.mkdir(parents=True)
    mark.touch()  # a detached chain's submission mark: rules/train.smk's onsuccess (now the Snakefile's)
    out = workflow.ok(SHARDS, *options)
    assert not mark.exists()
    lines = summary(out)
    assert lines, tail(out)
    assert lines[0] == "snakepack: done; outputs under results/"
    read = re.fullmatch(
        r"  ingest    5 files, ([\d,]+) docs read: ([\d,]+) kept, 3 rejected \(unreadable_rest 3\)", lines[1]
    )
    n_in, n_out = (int(n.replace(",", "")) for n in read.groups()) if read else (0, 0)
    assert n_in == n_out + 3 and n_out > 40, lines  # the cut file's start too
    worst = lines[2:5]
    assert {line.split(":")[0].strip() for line in worst} == {
        f"{tmp_path}/raw/en_web_{name}" for name in ("cut.jsonl.gz", "image.jsonl", "void.jsonl.gz")
    }
    void, image, cut = (
        f"    {tmp_path}/raw/en_web_{n}: " for n in ("void.jsonl.gz", "image.jsonl", "cut.jsonl.gz")
    )
    assert void + "unreadable from the start: empty file: 0 bytes is no gzip stream" in worst
    assert any(line.startswith(image + "unreadable from the start: binary data, not text") for line in worst)
    assert any(
        re.match(re.escape(cut) + r"unreadable from line [\d,]+: truncated gzip", line) for line in worst
    )
    assert lines[5] == "    quarantined: results/shards/<group>/quarantine.jsonl (file, line, reason)"
    assert lines[-2] == "  logs      logs/ (one per job)"
    assert lines[-1].startswith(
        "  next      snakemake --configfile"
    )  # the tests' runs give the sample's first
    assert lines[-1].endswith(f" --profile profiles/local --configfile {mine} (the rest of the run)")
    assert len(lines) <= 15

    again = workflow.ok(SHARDS, *options)
    assert "Nothing to be done" in again and not summary(again)
    dry = workflow.ok("-n", *options)
    assert not summary(dry)


def test_a_strict_run_fails_on_an_empty_gz_and_names_the_log_and_the_error(
    workflow: Workflow, tmp_path: Path
) -> None:
    corpus(tmp_path / "raw")
    mine = configure(workflow, tmp_path / "raw", "en_web_a.jsonl", "en_web_void.jsonl.gz", strict=True)
    proc = workflow.run(SHARDS, "--profile", "profiles/local", "--cores", "1", "--configfile", mine)
    assert proc.returncode != 0
    lines = summary(proc.output)
    assert lines[0] == "snakepack: the run failed", tail(proc.output)
    assert lines[1] == (
        "  failed    logs/ingest/en_web_cc.log: snakepack ingest: error: "
        f"{tmp_path}/raw/en_web_void.jsonl.gz: cannot read as jsonl.gz at byte 0 (line 1): "
        "empty file: 0 bytes is no gzip stream"
    )
    assert lines[2] == "  logs      logs/ (one per job)"
    assert re.fullmatch(r"  snakemake \.snakemake/log/\S+\.snakemake\.log", lines[3]), lines


def test_a_finished_tree_names_plan_packs_configs_and_the_training_command(
    sample_run: Workflow, tmp_path: Path
) -> None:
    """The finished sample: every stage, the plan, the packs made, the trainer configs, then `train`."""
    root = sample_run.clone(tmp_path / "wf").root
    places = run_summary.Places(
        *(str(root / name) for name in ("results", "logs", "results/shards", "results/dedup")),
        *(str(root / name) for name in ("results/tokenized", "results/merged")),
        str(root / "results" / "train" / train_layout.CONFIGS_MD),
        str(root / "results" / "report"),
    )
    argv = ["snakemake", "--profile", "profiles/local", "--cores", "2", "--configfile=config/sample.yaml"]
    lines = run_summary.done(places, argv, [])
    said = "\n".join(lines)
    plan = orjson.loads((root / "results" / "plan.json").read_bytes())
    packs = len(plan["packs"]) + len(plan["validation"])
    starts = [
        "snakepack:",
        "ingest",
        "dedup",
        "tokenize",
        "plan",
        "packs",
        "configs",
        "report",
        "logs",
        "next",
    ]
    assert [line.split()[0] for line in lines if not line.startswith("    ")] == starts, said
    assert f"{len(plan['packs'])} packs, {plan['total_train_iters']:,} iterations" in said
    assert (
        f"merged/<pack>/<pack>.bin,.idx: {len(plan['packs'])} + {len(plan['validation'])} validation" in said
    )
    assert lines[-1] == (
        "  next      snakemake train --profile profiles/local --configfile=config/sample.yaml (training)"
    )
    shutil.rmtree(root / "results" / "merged" / plan["packs"][-1]["name"])
    # a pack missing: counted, and a run of some target (here `plan`) is told to go on
    lines = run_summary.done(places, ["snakemake", "plan", "--profile", "profiles/local"], ["plan"])
    assert f"{packs - 1} of {len(plan['packs'])} + {len(plan['validation'])} validation made" in "\n".join(
        lines
    )
    assert lines[-1] == "  next      snakemake --profile profiles/local (the rest of the run)"
    assert len(lines) <= 15


def test_files_that_gave_nothing_come_first_and_a_parquet_without_the_text_key_is_told_so(
    tmp_path: Path,
) -> None:
    """Real ingest stats: a parquet whose column is not the text key, a binary .jsonl, a cut .gz."""
    raw = tmp_path / "raw"
    corpus(raw)
    pq.write_table(pa.table({"content": ["one", "two", "three"]}), raw / "en_web_rows.parquet")
    shards = tmp_path / "results" / "shards"
    files = sorted(p for p in raw.iterdir() if p.name != "en_web_void.jsonl.gz")
    ingest(
        files,
        shards / "en_web_cc",
        IngestSettings(shard_size=1 << 20, lang="en", domain="web", subdomain="cc"),
    )
    parts = {"en_web_cc": orjson.loads((shards / "en_web_cc" / "stats.json").read_bytes())}
    (shards / "stats.json").write_bytes(orjson.dumps(stage_stats.combine("ingest", parts)))
    places = run_summary.Places(*(str(tmp_path / n) for n in ("results", "logs", "results/shards")), *"abcde")
    lines = run_summary.done(places, ["snakemake"], [])
    assert lines[1].endswith(" 5 rejected (missing_text 3, unreadable_rest 2)"), lines
    assert lines[2] == (
        f"    {raw}/en_web_rows.parquet: 3 of 3 records rejected (missing_text 3);"
        " no record has a text key: is the source's text_key right?"
    )
    assert lines[3].startswith(f"    {raw}/en_web_image.jsonl: unreadable from the start: binary data")
    assert lines[4].startswith(f"    {raw}/en_web_cut.jsonl.gz: unreadable from line ")
    assert "truncated gzip" in lines[4]
