"""The workflow end to end on real data: the embedded sample, and a user's own sources."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import orjson
import pytest
import yaml

from tests.utils import REPO, Workflow, build_dataset, sft_config, train_tokenizer, web_source
from workflow_scripts.core.dataset_verify import verify
from workflow_scripts.core.indexed_dataset import IndexedDataset
from workflow_scripts.datapacks import pack_index, plan_table
from workflow_scripts.datapacks.plan import Plan
from workflow_scripts.datapacks.planner import shuffle_permutation
from workflow_scripts.dedup.settings import DedupSettings
from workflow_scripts.dedup.text import Shingler
from workflow_scripts.ingest.sample import generate

pytestmark = pytest.mark.workflow  # the test tiers: tests/conftest.py

# A user's own small run: one mixture, one phase, iterations sized for a few MB of text.
SMALL_PLAN = {
    "training": {"seq_length": 128, "global_batch_size": 4},
    "mixtures": {"all": {}},
    "datapacks": {"phases": [{"name": "all", "tokens": 20000, "mixture": "all"}]},
}


def jsonl(path: Path) -> list[dict]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line]


def test_bad_records_land_in_quarantine(sample_run: Workflow) -> None:
    results = sample_run.root / "results"
    manifest = orjson.loads((results / "sample" / "manifest.json").read_bytes())
    quarantined = [
        (q["file"], q["line"], q["reason"])
        for f in (results / "shards").glob("*/quarantine.jsonl")
        for q in jsonl(f)
    ]
    expected = [(b["file"], b["line"], b["reason"]) for b in manifest["bad_records"]]
    assert sorted(quarantined) == sorted(expected)


def test_ingest_stats_add_up(sample_run: Workflow) -> None:
    results = sample_run.root / "results"
    manifest = orjson.loads((results / "sample" / "manifest.json").read_bytes())
    stats = orjson.loads((results / "shards" / "stats.json").read_bytes())
    good = sum(f["docs"] for f in manifest["files"])
    assert stats["docs_out"] == good
    assert stats["docs_in"] == good + len(manifest["bad_records"])
    assert stats["docs_in"] == stats["docs_out"] + sum(stats["rejected"].values())
    shards = sorted(p.name for p in (results / "shards").glob("*/*_split_*.jsonl"))
    assert "en_web_cc_split_0000.jsonl" in shards and "zh_wiki_zhwiki_split_0000.jsonl" in shards
    assert sum(len(jsonl(p)) for p in (results / "shards").glob("*/*_split_*.jsonl")) == good


def test_rerun_is_a_no_op(sample_run: Workflow) -> None:
    out = sample_run.ok("--profile", "profiles/local", "--cores", "2", "-n")
    assert "Nothing to be done" in out


def test_a_new_raw_file_recomputes_only_its_group(workflow: Workflow, tmp_path: Path) -> None:
    """With a fixed tokenizer (the production setting), a new file of one group reruns only that group's
    shards, kept shards and tokenized files (and the global dedup steps, plan and packs)."""
    raw = tmp_path / "raw"
    generate(raw, seed=3, scale=0.2)
    (raw / "manifest.json").unlink()
    model = tmp_path / "spm"
    shards = map(str, sorted(raw.glob("*.jsonl")))
    train = [sys.executable, "-m", "workflow_scripts", "train-tokenizer", *shards]
    subprocess.run([*train, "--model-prefix", str(model), "--vocab-size", "2000"], check=True, cwd=REPO)
    config = {
        "sample": {"enabled": False},
        "tokenizer": {"model": f"{model}.model"},
        "sources": [
            {
                "name": "vendor",
                "paths": [f"{raw}/*_part-*"],
                "name_regex": r"^(?P<lang>[a-z]{2})_(?P<domain>[a-z]+)_(?P<subdomain>[a-z0-9]+)_part-\d+",
            }
        ],
        **SMALL_PLAN,
    }
    (workflow.root / "extra.yaml").write_text(yaml.safe_dump(config))
    args = ("--profile", "profiles/local", "--cores", "2", "--configfile", "extra.yaml")
    workflow.ok(*args)
    results = workflow.root / "results"
    patterns = ["shards/*/*_split_*.jsonl", "dedup/*/*_split_*.jsonl", "tokenized/*_text_document.bin"]

    def mtimes() -> dict[Path, int]:
        return {p: p.stat().st_mtime_ns for pattern in patterns for p in results.glob(pattern)}

    before = mtimes()
    (raw / "de_news_wire_part-00002.jsonl").write_bytes((raw / "de_news_wire_part-00001.jsonl").read_bytes())
    workflow.ok(*args)
    after = mtimes()
    changed = {p.relative_to(results).parts[0]: set() for p in after}
    for p in after:
        if after[p] != before.get(p):
            changed[p.relative_to(results).parts[0]].add(p.name.split("_split_")[0])
    assert changed == {"shards": {"de_news_wire"}, "dedup": {"de_news_wire"}, "tokenized": {"de_news_wire"}}
    stats = orjson.loads((results / "shards" / "de_news_wire" / "stats.json").read_bytes())
    assert stats["files"] == 2 and stats["docs_out"] == 2 * stats["inputs"][0]["docs_out"]
    dedup = orjson.loads((results / "dedup" / "stats.json").read_bytes())
    assert dedup["shards"]["de_news_wire_split_0000.jsonl"]["exact"] >= stats["inputs"][0]["docs_out"]


def load_plan(wf: Workflow) -> dict:
    return orjson.loads((wf.root / "results" / "plan.json").read_bytes())


def pack_rows(wf: Workflow, pack: str) -> list[dict]:
    """A pack's slices, from the plan's table."""
    return plan_table.pack_rows(Plan.read(wf.root / "results" / "plan.json"), pack)


def test_merged_packs_hold_the_planned_documents(sample_run: Workflow) -> None:
    results = sample_run.root / "results"
    plan = load_plan(sample_run)
    assert [p["name"] for p in plan["packs"]][:2] == ["warmup_0", "main_1"]
    assert len(plan["validation"]) == 6  # one held-out set per language of the sample
    for pack in [*plan["packs"], *plan["validation"]]:
        merged = IndexedDataset(results / "merged" / pack["name"] / pack["name"])
        verify(merged.prefix)
        assert pack["merged_prefix"] == str((results / "merged" / pack["name"] / pack["name"]).resolve())
        assert pack.get("neox", pack)["train_iters" if "neox" in pack else "tokens"] > 0
        assert merged.num_tokens == pack["tokens"] and merged.num_documents == pack["documents"]
        i = 0
        for s in pack_rows(sample_run, pack["name"]):
            source = IndexedDataset(sample_run.root / s["prefix"])
            for _, a, b in s["ranges"]:
                for doc in (a, b - 1):  # the first and last document of every range, by content
                    j = i + doc - a
                    assert np.array_equal(merged.document(j), source.document(doc)), (pack["name"], s["name"])
                i += b - a
    offsets = [p["iteration_offset"] for p in plan["packs"]]
    assert offsets == [sum(p["train_iters"] for p in plan["packs"][:k]) for k in range(len(offsets))]


def test_train_configs_follow_the_plan(sample_run: Workflow) -> None:
    results = sample_run.root / "results"
    plan = load_plan(sample_run)
    valid = [v["merged_prefix"] for v in plan["validation"]]
    for pack in plan["packs"]:
        config = yaml.safe_load((results / "train" / pack["name"] / f"{pack['name']}.yml").read_text())
        assert config["train_data_paths"] == [pack["merged_prefix"]] and config["valid_data_paths"] == valid
        assert (config["train_iters"], config["iteration_offset"]) == (
            pack["train_iters"],
            pack["iteration_offset"],
        )
        assert config["exit_interval"] % config["checkpoint_factor"] == 0
        first = pack["name"] == "warmup_0"
        assert (config["warmup"], config.get("override_lr_scheduler")) == ((1, None) if first else (0, True))
    table = (results / "train" / "configs.md").read_text()
    assert all(p["name"] in table for p in plan["packs"])
    assert "## Training" in (results / "plan.md").read_text()


def test_appending_a_phase_leaves_earlier_packs_untouched(sample_run: Workflow) -> None:
    results = sample_run.root / "results"
    before = load_plan(sample_run)
    files = {p: p.stat().st_mtime_ns for p in (results / "merged").rglob("*") if p.is_file()}
    files |= {p: p.stat().st_mtime_ns for p in (results / "datapacks").rglob("*") if p.is_file()}
    index = results / "datapacks" / "_specs" / pack_index.NAME  # names the packs: gains the new one
    del files[index]
    config = yaml.safe_load((sample_run.root / "config" / "sample.yaml").read_text())
    config["datapacks"]["phases"].append({"name": "ext", "tokens": 20000, "mixture": "main"})
    (sample_run.root / "more.yaml").write_text(yaml.safe_dump({"datapacks": config["datapacks"]}))
    sample_run.ok(
        "--profile", "profiles/local", "--cores", "2", "--configfile", "config/sample.yaml", "more.yaml"
    )
    after = load_plan(sample_run)
    assert after["packs"][:-1] == before["packs"] and after["packs"][-1]["name"] == "ext_5"
    assert all(p.stat().st_mtime_ns == t for p, t in files.items()), "an earlier pack was rewritten"
    assert orjson.loads(index.read_bytes())["packs"] == [p["name"] for p in after["packs"]]
    assert (results / "merged" / "ext_5" / "ext_5.bin").is_file()
    state = orjson.loads((results / "datapacks" / "ext_5" / "state.json").read_bytes())
    assert state["cursors"] == list(plan_table.states(Plan.read(results / "plan.json")))[-1]


def test_shuffled_sources_feed_the_packs(sample_run: Workflow, tmp_path: Path) -> None:
    """With ``datapacks.shuffle``, each pack reads its sources' documents in the plan's seeded order of
    each source, gathered from the tokenized sources themselves: no shuffled copy, no job per source."""
    wf = sample_run.clone(tmp_path / "wf")
    config = yaml.safe_load((wf.root / "config" / "sample.yaml").read_text())
    shuffled = {"datapacks": {**config["datapacks"], "shuffle": True}}
    (wf.root / "shuffle.yaml").write_text(yaml.safe_dump(shuffled))
    args = ("--profile", "profiles/local", "--cores", "2", "--configfile", "config/sample.yaml")
    args += ("shuffle.yaml",)
    wf.ok(*args)
    results, plan = wf.root / "results", load_plan(wf)
    assert plan["shuffle"] and not (results / "datapacks" / "sources").exists()
    for pack in [*plan["packs"], *plan["validation"]]:
        merged, i = IndexedDataset(results / "merged" / pack["name"] / pack["name"]), 0
        for s in pack_rows(wf, pack["name"]):
            source = IndexedDataset(wf.root / s["prefix"])
            order = shuffle_permutation(source.num_documents, plan["seed"], s["source"])
            for _, a, b in s["ranges"]:
                for j in order[a:b]:
                    assert np.array_equal(merged.document(i), source.document(j)), (pack["name"], s["name"])
                    i += 1
        assert i == merged.num_documents
    assert "Nothing to be done" in wf.ok(*args, "-n")


def shingle_jaccard(a: str, b: str, lang: str) -> float:
    """Exact Jaccard of two texts' shingle sets, with dedup's own normalization and shingling."""
    shingler = Shingler()
    char = np.array([lang in DedupSettings().char_langs] * 2)
    units, offsets = shingler.units([a, b], char)
    hashes, off = shingler.shingles(units, offsets, char)
    values = (hashes >> np.uint64(32)).astype(np.uint32)
    sa, sb = set(values[off[0] : off[1]].tolist()), set(values[off[1] : off[2]].tolist())
    return len(sa & sb) / len(sa | sb)


def test_dedup_removes_the_planted_duplicates(sample_run: Workflow) -> None:
    results = sample_run.root / "results"
    manifest = orjson.loads((results / "sample" / "manifest.json").read_bytes())
    docs = {r["id"]: r for f in (results / "shards").glob("*/*_split_*.jsonl") for r in jsonl(f)}
    removed = {r["id"]: r for f in (results / "dedup").glob("*/removed/*.jsonl") for r in jsonl(f)}
    kept = {r["id"] for f in (results / "dedup").glob("*/*_split_*.jsonl") for r in jsonl(f)}
    assert len(kept) + len(removed) == len(docs) and not kept & set(removed)
    planted = manifest["exact_duplicates"] + manifest["near_duplicates"]
    expected = [
        d
        for d in planted
        if shingle_jaccard(docs[d["id"]]["text"], docs[d["original"]]["text"], docs[d["id"]]["lang"]) >= 0.85
    ]
    assert len(expected) >= len(manifest["exact_duplicates"]) + 5, "some near duplicates are above 0.85"
    assert len(expected) < len(planted), "and some are below it"
    for d in expected:  # one of the pair goes (the later one), pointing into the other's cluster
        pair = {d["id"], d["original"]}
        assert len(pair & set(removed)) == 1, d
    for d in planted:
        if d not in expected:
            assert d["id"] not in removed, f"{d['id']} is below the threshold but was removed"
    involved = {x for d in planted for x in (d["id"], d["original"])}
    assert set(removed) <= involved, "only planted copies or their originals are removed"
    stats = orjson.loads((results / "dedup" / "stats.json").read_bytes())
    assert stats["docs_in"] == len(docs) and stats["docs_out"] == len(kept)
    assert stats["docs_in"] == stats["docs_out"] + stats["removed"]["exact"] + stats["removed"]["near"]
    tokenized = orjson.loads((results / "tokenized" / "stats.json").read_bytes())
    assert tokenized["docs_in"] == len(kept), "the tokenizer reads the deduplicated shards"


def test_sft_mode_through_the_workflow(workflow: Workflow, tmp_path: Path) -> None:
    """SFT data (seed 003 markers) through ingest, dedup and tokenize: markers become their control tokens."""
    import sentencepiece as spm

    config = sft_config(tmp_path / "raw")
    (workflow.root / "sft.yaml").write_text(yaml.safe_dump(config))
    workflow.ok(
        "--profile",
        "profiles/local",
        "--cores",
        "2",
        "--configfile",
        "sft.yaml",
        "--",
        "results/tokenized/signature.json",
        "results/tokenized/stats.json",
    )
    tok = workflow.root / "results" / "tokenized"
    sp = spm.SentencePieceProcessor(model_file=str(workflow.root / "results" / "tokenizer" / "spm.model"))
    user, assistant, eod = (sp.piece_to_id(p) for p in ("<|user|>", "<|assistant|>", "<|endoftext|>"))
    assert len({user, assistant, eod, sp.unk_id()}) == 4
    ds = IndexedDataset(tok / "en_sft_chat_split_0000_text_document")
    assert ds.num_documents == 300
    first = ds.document(0).tolist()
    assert first.count(user) == 2 and first.count(assistant) == 2 and first[-1] == eod
    assert first[0] == user and first[-2] == assistant
    quarantine = jsonl(tok / "en_sft_chat_split_0000_text_document.quarantine.jsonl")
    assert [(q["id"], q["reason"]) for q in quarantine] == [("plain", "no_sft_marker")]


def test_tokenized_sources_plan_beside_raw_sources(workflow: Workflow, tmp_path: Path) -> None:
    """Prefixes tokenized elsewhere (by the tokenize CLI, and an index built by hand) enter at the count
    stage, verified, and are planned with a raw source that shares their tokenizer."""
    import sentencepiece as spm

    raw = tmp_path / "raw"
    generate(raw, seed=6, scale=0.2)
    model = train_tokenizer(raw, tmp_path / "spm")
    theirs = tmp_path / "theirs"
    de_files = sorted(raw.glob("de_*.jsonl"))
    tokenize = [sys.executable, "-m", "workflow_scripts", "tokenize", "--tokenizer-model", f"{model}.model"]
    args = ["--input", str(de_files[0]), "--output-prefix", str(theirs / "corpus"), "--append-eod"]
    subprocess.run([*tokenize, *args], check=True, cwd=REPO, capture_output=True)
    sp = spm.SentencePieceProcessor(model_file=f"{model}.model")
    texts = [json.loads(line)["text"] for line in de_files[0].read_text(encoding="utf-8").splitlines()[:40]]
    build_dataset(theirs / "fr_books_hand_x", [[[*sp.encode(t), sp.eos_id()]] for t in texts])
    config = {
        "sample": {"enabled": False},
        "sources": [web_source(raw)],
        "tokenized_sources": [
            {
                "name": "old",
                "prefixes": [f"{theirs}/corpus_*"],
                "lang": "de",
                "domain": "news",
                "subdomain": "old",
            },
            {"name": "hand", "prefixes": [f"{theirs}/fr_books_hand_x.idx"]},
        ],
        "tokenizer": {"model": f"{model}.model"},
        "mixtures": {"mix": {"lang_prob": {"en": 0.5, "de": 0.3, "fr": 0.2}}},
        "datapacks": {"phases": [{"name": "all", "tokens": 20000, "mixture": "mix"}]},
    }
    (workflow.root / "byo.yaml").write_text(yaml.safe_dump(config))
    run = ["--profile", "profiles/local", "--cores", "2", "--configfile", "byo.yaml"]
    workflow.ok(*run, "--", "plan")
    tok = workflow.root / "results" / "tokenized"
    assert os.path.islink(tok / "de_news_old_split_old-0000_text_document.bin")
    assert not list((workflow.root / "results" / "shards").glob("de_*"))  # not ingested
    names = {
        e["name"].split("_text_document")[0]
        for e in json.loads((tok / "signature.json").read_text())["prefixes"]
    }
    assert {"de_news_old_split_old-0000", "fr_books_hand_split_hand-0000"} <= names
    first = load_plan(workflow)["packs"][0]["name"]
    assert {s["lang"] for s in pack_rows(workflow, first)} == {"en", "de", "fr"}
    assert "Nothing to be done" in workflow.ok(*run, "-n", "--", "plan")


def _sample_mixtures(**changes: dict) -> dict:
    mixtures = yaml.safe_load((REPO / "config" / "sample.yaml").read_text())["mixtures"]
    return {"mixtures": {name: changes.get(name, m) for name, m in mixtures.items()}}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"datapacks": {"phases": [{"name": "x", "tokens": 10, "mixture": "nope"}]}},
            "datapacks.phases[0] (x)",
        ),
        (_sample_mixtures(main={"lang_prob": {"xx": 1}}), "mixtures.main.lang_prob names xx"),
        (
            _sample_mixtures(main={"data_ratio": {"en": {"podcasts": 2}}}),
            "mixtures.main: data_ratio names domain",
        ),
        (
            {"tokenizer": {"model": "/does/not/exist.model"}},
            "tokenizer.model: /does/not/exist.model is not a file",
        ),
        ({"ingset": {"shard_size": 1}}, "config: unknown key ingset (did you mean ingest?)"),
        (
            {"ingest": {"shard_sise": 1}},
            "config: unknown key ingest.shard_sise (did you mean ingest.shard_size?)",
        ),
        (
            {"datapacks": {"max_iters_per_pack": "many"}},
            "config: datapacks.max_iters_per_pack: 'many' is not of",
        ),
        (
            {"sources": [{"name": "v", "paths": ["config/*.yaml", "config/typo*.yml"], "lang": "en"}]},
            "config: source v: no file matches 'config/typo*.yml'",
        ),
        (
            {"train": {"launch": "srun python deepy.py train.py {config}"}},
            "config: train.eval_launch is the reference trainer's evaluation",
        ),
    ],
)
def test_config_errors_stop_the_run_at_start(workflow: Workflow, change: dict, message: str) -> None:
    """Each error is one line near the top (after Snakemake's own first lines), not a dump of the schema."""
    (workflow.root / "bad.yaml").write_text(yaml.safe_dump(change))
    proc = workflow.run("-n", "--cores", "1", "--configfile", "config/sample.yaml", "bad.yaml")
    assert proc.returncode != 0 and message in "\n".join(proc.output.splitlines()[:3]), proc.output[-2000:]
    assert "Building DAG" not in proc.output and len(proc.output.splitlines()) < 25


def test_a_config_without_input_says_so(workflow: Workflow) -> None:
    """The template config alone (no sources, the sample off): one line saying what to give."""
    proc = workflow.run("-n", "--cores", "1", "--configfile", "config/config.yaml")
    assert proc.returncode != 0
    assert "config: no input: give `sources` (raw files) or `tokenized_sources`" in proc.output, proc.output


def test_paths_with_spaces_and_shell_syntax_are_safe(workflow: Workflow, tmp_path: Path) -> None:
    """Output and log roots and a source path holding spaces and `$(...)` are used as names, never run."""
    odd = "odd dir $(touch PWNED) `touch PWNED2`"
    raw = tmp_path / odd / "raw"
    generate(raw, seed=6, scale=0.1)
    config = {
        "output_root": f"{odd}/results",
        "log_root": f"{odd}/logs",
        "sources": [
            {
                "name": "odd",
                "paths": [f"{raw}/en_web_*.jsonl"],
                "lang": "en",
                "domain": "odd",
                "subdomain": "x",
            }
        ],
        "sample": {"scale": 0.1},
        **SMALL_PLAN,
    }
    (workflow.root / "odd.yaml").write_text(yaml.safe_dump(config))
    workflow.ok("--profile", "profiles/local", "--cores", "2", "--configfile", "odd.yaml")
    assert (workflow.root / odd / "results" / "plan.json").is_file()
    assert (workflow.root / odd / "results" / "tokenized" / "en_odd_x_split_0000_text_document.bin").is_file()
    assert (workflow.root / odd / "logs" / "plan.log").is_file()
    assert not list(workflow.root.rglob("PWNED*")) and not list(tmp_path.rglob("PWNED*"))
