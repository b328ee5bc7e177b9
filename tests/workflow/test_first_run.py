"""A user's first real run: their own config with the schema's defaults, damaged and huge inputs, a deleted
stage, the README's commands as written, and the setup's profile links."""

from __future__ import annotations

import gzip
import hashlib
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
import yaml

from tests.utils import REPO, Workflow, snakemake_env, tail, train_tokenizer, web_source
from workflow_scripts.datapacks import plan_table
from workflow_scripts.datapacks.plan import Plan
from workflow_scripts.ingest.sample import generate

pytestmark = pytest.mark.workflow  # the test tiers: tests/conftest.py


def digests(root: Path, *patterns: str) -> dict[str, str]:
    """sha256 of every file matching ``patterns`` under ``root``, by relative path."""
    files = sorted(p for pattern in patterns for p in root.glob(pattern) if p.is_file())
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


def test_a_minimal_user_config_gets_the_schema_defaults(workflow: Workflow, tmp_path: Path) -> None:
    """Sources, a tokenizer, a mixture and a phase: the plan has the schema's defaults and none of the
    sample's values, and the run goes end to end without training.model_params (no time estimate)."""
    raw = tmp_path / "raw"
    generate(raw, seed=5, scale=0.6)  # ~120k tokens: one iteration of the schema's batch reads it 40 times
    model = train_tokenizer(raw, tmp_path / "spm")
    config = {
        "sources": [web_source(raw)],
        "tokenizer": {"model": f"{model}.model"},
        "mixtures": {"only": {"lang_prob": {"en": 1}}},
        "datapacks": {"phases": [{"name": "all", "iters": 1, "mixture": "only"}]},
    }
    (workflow.root / "mine.yaml").write_text(yaml.safe_dump(config))
    out = workflow.ok("plan", "--profile", "profiles/local", "--cores", "2", "--configfile", "mine.yaml")
    results = workflow.root / "results"
    plan_md = (results / "plan.md").read_text()
    assert (
        "4,718,592 (seq_length 8192 x global batch 576)" in plan_md
    )  # the schema's, not the sample's 512 x 8
    assert "no time estimate (set training.model_params" in plan_md
    assert plan_md in out  # `snakemake plan` prints the plan
    plan = orjson.loads((results / "plan.json").read_bytes())
    assert [p["name"] for p in plan["packs"]] == ["all_0"] and plan["validation"] == []
    assert plan["packs"][0]["wall_hours"] is None
    assert not (results / "sample").exists() and not (results / "mixtures" / "main.json").exists()

    workflow.ok("--profile", "profiles/local", "--cores", "2", "--configfile", "mine.yaml")
    assert (results / "merged" / "all_0" / "all_0.bin").is_file()
    assert (results / "report" / "plan" / "schedule.png").is_file()
    assert not (results / "train").exists()  # no train.base_config: no trainer configs
    shard = next((results / "shards" / "en_web_cc").glob("*_split_*.jsonl"))
    assert shard.name == "en_web_cc_split_0000.jsonl"  # the schema's 1 GB shards: one shard for the group
    again = workflow.ok("-n", "plan", "--profile", "profiles/local", "--configfile", "mine.yaml")
    assert "Nothing to be done" in again and plan_md in again  # printed on a finished tree too


def test_a_deleted_stage_is_rebuilt_byte_identically(sample_run: Workflow, tmp_path: Path) -> None:
    """`rm -rf results/tokenized` on a finished tree, then the README's run command: the tokenized files
    and their lists come back, and the merged packs are the same bytes."""
    wf = sample_run.clone(tmp_path / "wf")
    before = digests(
        wf.root / "results", "merged/*/*.bin", "merged/*/*.idx", "tokenized/*_document.[bi][id]*"
    )
    assert len(before) > 60
    subprocess.run(["rm", "-rf", str(wf.root / "results" / "tokenized")], check=True)
    out = wf.ok("--profile", "profiles/local", "--cores", "2")
    batches = len(list((wf.root / "results" / "dedup" / "_batches").glob("*.json")))  # one per group here
    assert re.search(rf"^tokenize\s+{batches}$", out, re.M), tail(out)
    assert (
        digests(wf.root / "results", "merged/*/*.bin", "merged/*/*.idx", "tokenized/*_document.[bi][id]*")
        == before
    )
    assert "Nothing to be done" in wf.ok("-n", "--cores", "1")


def test_a_pack_missing_its_idx_is_rebuilt(sample_run: Workflow, tmp_path: Path) -> None:
    """A merged pack's ``.idx`` deleted on a finished tree: the default target plans that pack again (the
    ``.bin`` alone is not a pack), and the rerun gives back the same bytes."""
    wf = sample_run.clone(tmp_path / "wf")
    idx = next((wf.root / "results" / "merged").glob("*/*.idx"))
    before = digests(wf.root / "results", "merged/*/*.bin", "merged/*/*.idx")
    idx.unlink()
    dry = wf.ok("-n", "--cores", "1")
    assert re.search(r"^pack\s+1$", dry, re.M), tail(dry)
    wf.ok("--profile", "profiles/local", "--cores", "2")
    assert digests(wf.root / "results", "merged/*/*.bin", "merged/*/*.idx") == before


def english_texts(raw: Path) -> list[str]:
    """The texts of the generated English web files (without the generator's planted bad records)."""
    texts = []
    for line in (line for f in sorted(raw.glob("en_web_*.jsonl")) for line in f.read_bytes().splitlines()):
        try:
            texts.append(orjson.loads(line)["text"])
        except (orjson.JSONDecodeError, KeyError, TypeError):
            continue
    return [t for t in texts if isinstance(t, str) and t.strip()]


def test_damaged_and_huge_files_do_not_stop_a_delivery(workflow: Workflow, tmp_path: Path) -> None:
    """A .jsonl.gz cut at 60% keeps its readable records and quarantines the rest (file, offset, reason);
    a 20 MB document that fills a shard on its own does not block the validation hold-out; strict mode
    fails on the cut file, naming it and the offset."""
    raw = tmp_path / "raw"
    generate(raw, seed=7, scale=0.3)
    model = train_tokenizer(raw, tmp_path / "spm")
    texts = english_texts(raw)
    records = b"".join(orjson.dumps({"id": f"cut-{i}", "text": t}) + b"\n" for i, t in enumerate(texts))
    whole = gzip.compress(records, mtime=0)
    (raw / "en_web_cut.jsonl.gz").write_bytes(whole[: len(whole) * 6 // 10])
    block = " ".join(texts)
    huge = block * (20 * 2**20 // len(block.encode()) + 1)  # one 20 MB document: a shard of its own
    (raw / "en_web_huge.jsonl").write_bytes(orjson.dumps({"id": "huge", "text": huge}) + b"\n")
    source = web_source(raw) | {"paths": [f"{raw}/en_web_*.jsonl", f"{raw}/en_web_cut.jsonl.gz"]}
    config = {
        "sources": [source],
        "tokenizer": {"model": f"{model}.model"},
        "ingest": {"shard_size": 200_000},
        "training": {"seq_length": 256, "global_batch_size": 4},
        "mixtures": {"only": {}},
        "datapacks": {
            "validation_tokens": 2000,
            "phases": [{"name": "all", "tokens": 20_000, "mixture": "only"}],
        },
    }
    (workflow.root / "mine.yaml").write_text(yaml.safe_dump(config))
    refused = workflow.run("--profile", "profiles/local", "--cores", "2", "--configfile", "mine.yaml")
    results = workflow.root / "results"
    # The 20 MB document alone is far over the phase's 20,000 tokens: the plan refuses, naming it and a fix.
    fix = re.search(r"datapacks\.max_iters_per_pack: (\d+) holds every document", refused.output)
    assert refused.returncode != 0 and "the plan breaks its limits" in refused.output and fix, refused.output
    assert re.search(r"longest document, document 0 of \S*en_web_\S+, has [\d,]+ tokens", refused.output)
    assert not (results / "plan.json").exists()
    config["datapacks"]["max_iters_per_pack"] = int(fix[1])
    (workflow.root / "mine.yaml").write_text(yaml.safe_dump(config))
    workflow.ok("--profile", "profiles/local", "--cores", "2", "--configfile", "mine.yaml")

    group = results / "shards" / "en_web_cc"
    quarantine = [orjson.loads(line) for line in (group / "quarantine.jsonl").open("rb")]
    cut = [q for q in quarantine if q["reason"] == "unreadable_rest"]
    assert len(cut) == 1 and cut[0]["file"].endswith("en_web_cut.jsonl.gz")
    assert 0 < cut[0]["offset"] <= len(whole) * 6 // 10 and "truncated gzip stream" in cut[0]["error"]
    assert orjson.loads((results / "shards" / "stats.json").read_bytes())["rejected"]["unreadable_rest"] == 1
    stats = orjson.loads((group / "stats.json").read_bytes())
    kept = [i for i in stats["inputs"] if i["path"].endswith("en_web_cut.jsonl.gz")]
    assert kept[0]["docs_out"] > 0  # the records before the cut

    plan = orjson.loads((results / "plan.json").read_bytes())
    (valid,) = plan["validation"]
    huge_shard = max(group.glob("*_split_*.jsonl"), key=os.path.getsize)
    assert os.path.getsize(huge_shard) > 20 * 2**20
    held = plan_table.pack_rows(Plan.read(results / "plan.json"), valid["name"])
    assert valid["tokens"] >= 2000 and huge_shard.stem not in {s["source"] for s in held}
    assert any(f"source {huge_shard.stem} skipped" in note for note in plan["notes"]), plan.get("notes")
    assert "## Notes" in (results / "plan.md").read_text()
    assert (results / "merged" / "valid_en" / "valid_en.bin").is_file()

    cut_only = web_source(raw) | {"paths": [f"{raw}/en_web_cut.jsonl.gz"], "subdomain": "cut"}
    strict = {"ingest": {"strict": True}, "sources": [cut_only]}
    (workflow.root / "strict.yaml").write_text(yaml.safe_dump(strict))
    failed = workflow.run(
        "--profile", "profiles/local", "--cores", "2", "--configfile", "mine.yaml", "strict.yaml"
    )
    assert failed.returncode != 0
    assert re.search(
        r"en_web_cut\.jsonl\.gz: cannot read as jsonl\.gz at byte \d+ \(line \d+\)", failed.output
    )


def readme_commands(*targets: str) -> list[str]:
    """The README's code-block command lines that run one of ``targets``."""
    blocks = re.findall(r"^```bash\n(.*?)^```", (REPO / "README.md").read_text(), re.M | re.S)
    lines = [line.split("  #")[0].strip() for block in blocks for line in block.splitlines()]
    return [line for line in lines if line.startswith(".venv/bin/snakemake ") and line.split()[1] in targets]


def test_the_readmes_plan_and_status_commands_work_as_written(sample_run: Workflow, tmp_path: Path) -> None:
    """`snakemake plan` and `status` exactly as the README writes them (but for the interpreter's path):
    on a finished tree, the plan table is printed although no job runs."""
    wf = sample_run.clone(tmp_path / "wf")
    commands = readme_commands("plan", "status")
    assert len(commands) >= 3, commands
    plan_md = (wf.root / "results" / "plan.md").read_text()
    for command in commands:
        args = shlex.split(command)[1:]
        if "mine.yaml" in args:  # the README's example of a user's own config: the sample's stands in
            args[args.index("mine.yaml")] = "config/sample.yaml"
        proc = subprocess.run(
            [sys.executable, "-m", "snakemake", *args],
            cwd=wf.root,
            env=snakemake_env(),
            capture_output=True,
            text=True,
        )
        output = proc.stdout + proc.stderr
        assert proc.returncode == 0, f"{command}:\n{tail(output)}"
        if args[0] == "plan":
            assert plan_md in output and "| warmup_0" in output, command
        else:
            assert re.search(r"warmup_0\s+0-10\s", output), command
