"""What a rerun recomputes: every target is a no-op on a finished tree, and each change of the README's
change -> rerun table reruns exactly what depends on it (judged by which outputs were rewritten)."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import orjson
import pandas as pd
import pytest
import yaml

from tests.report.conftest import write_training_records
from tests.utils import REPO, Workflow
from workflow_scripts.datapacks import plan_table
from workflow_scripts.datapacks.plan import Plan
from workflow_scripts.datapacks.planner import shuffle_permutation
from workflow_scripts.tokens.ledger import Ledger

pytestmark = pytest.mark.workflow  # the test tiers: tests/conftest.py

RUN = ("--profile", "profiles/local", "--cores", "2")
EXTRA = "en_extra_x"  # the group of the user source added to the sample
WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "epsilon",
    "zeta",
    "eta",
    "theta",
    "iota",
    "kappa",
    "lambda",
    "sigma",
    "tau",
    "omega",
]
CONFIG = ("--configfile", "config/sample.yaml", "user.yaml")


def extra_file(path: Path, seed: int, docs: int = 30) -> None:
    """Unique English-like documents (no duplicates of anything else)."""
    rng = random.Random(seed)
    lines = [
        {
            "id": f"x{seed}-{i}",
            "text": " ".join(rng.choice(WORDS) + str(rng.randint(0, 999)) for _ in range(60)),
        }
        for i in range(docs)
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in lines))


def train_model(prefix: Path, corpus: Path, vocab: int) -> Path:
    """A SentencePiece model trained with the project's CLI on the sample's raw jsonl files."""
    cli = [sys.executable, "-m", "workflow_scripts"]
    subprocess.run([*cli, "sample", "--output-dir", str(corpus)], check=True, cwd=REPO, capture_output=True)
    shards = sorted(map(str, corpus.glob("*.jsonl")))
    train = [*cli, "train-tokenizer", *shards, "--model-prefix", str(prefix), "--vocab-size", str(vocab)]
    subprocess.run(train, check=True, cwd=REPO, capture_output=True)
    return prefix.with_suffix(".model")


def user_config(model: Path, extra: bool = True) -> dict:
    """The sample plus one user source, with a fixed tokenizer (the production setting)."""
    source = {"name": "extra", "paths": ["extra/*.jsonl"], "lang": "en", "domain": "extra", "subdomain": "x"}
    return {"tokenizer": {"model": str(model)}, "sources": [source] if extra else []}


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Workflow:
    """The sample plus a user source, run to the end once; tests work on clones of it."""
    root = tmp_path_factory.mktemp("reruns")
    model = train_model(root / "spm", root / "corpus", 2000)
    wf = Workflow(root / "wf")
    extra_file(wf.root / "extra" / f"{EXTRA}_part-1.jsonl", seed=1)
    (wf.root / "user.yaml").write_text(yaml.safe_dump(user_config(model)))
    wf.ok(*RUN, *CONFIG)
    return wf


@pytest.fixture
def clone(finished: Workflow, tmp_path: Path) -> Workflow:
    return finished.clone(tmp_path / "wf")


def snapshot(wf: Workflow) -> dict[str, int]:
    results = wf.root / "results"
    patterns = [
        "shards/*/*_split_*.jsonl",
        "dedup/*/*_split_*.jsonl",
        "dedup/_work/assign/*.json",
        "tokenized/*_text_document.bin",
        "datapacks/_specs/*.json",
        "merged/*/*.bin",
        "train/*/*.yml",
        "plan.json",
    ]
    return {str(p.relative_to(results)): p.stat().st_mtime_ns for pat in patterns for p in results.glob(pat)}


def changed(before: dict[str, int], after: dict[str, int]) -> dict[str, set[str]]:
    """Rewritten or new outputs by kind: the shard group for per-shard outputs, the pack for packs."""
    kinds: dict[str, set[str]] = {}
    for path, mtime in after.items():
        if before.get(path) == mtime:
            continue
        parts = Path(path).parts
        kind = "assign" if parts[:3] == ("dedup", "_work", "assign") else parts[0]
        name = Path(path).name
        key = name.split("_split_")[0] if "_split_" in name else name.split(".")[0]
        kinds.setdefault(kind, set()).add(key)
    return kinds


def rerun(wf: Workflow, *configfiles: str) -> dict[str, set[str]]:
    before = snapshot(wf)
    wf.ok(*RUN, *CONFIG, *configfiles)
    assert "Nothing to be done" in wf.ok(*RUN, "-n", *CONFIG, *configfiles)
    return changed(before, snapshot(wf))


def all_groups(wf: Workflow) -> set[str]:
    return {p.name for p in (wf.root / "results" / "shards").iterdir() if p.is_dir()}


# -- every target is a no-op on a finished tree -----------------------------------------------------------

TARGETS = [
    (),
    ("--", "plan"),
    ("--", "results/shards/stats.json"),
    ("--", "results/dedup/stats.json"),
    ("--", "results/tokenized/stats.json"),
    ("--", "results/tokenized/signature.json"),
    ("--", "results/merged/main_1/main_1.bin"),
    ("--", f"results/tokenized/_batches/{EXTRA}.0.json"),
    ("--", "results/train/configs.md"),
    ("--until", "dedup_filter"),
    ("--until", "tokenize"),
]


def test_every_target_is_a_no_op_on_a_finished_tree(clone: Workflow) -> None:
    for target in TARGETS:
        out = clone.ok(*RUN, "-n", *CONFIG, *target)
        assert "Nothing to be done" in out, (target, out[-2000:])
    for target in TARGETS[1:4] + TARGETS[6:8]:  # running one target must not leave the others to do
        clone.ok(*RUN, *CONFIG, *target)
        out = clone.ok(*RUN, "-n", *CONFIG)
        assert "Nothing to be done" in out, (target, out[-2000:])


# -- the change -> rerun table ---------------------------------------------------------------------------


def test_new_raw_file_reruns_its_group_only(clone: Workflow) -> None:
    extra_file(clone.root / "extra" / f"{EXTRA}_part-2.jsonl", seed=2)
    kinds = rerun(clone)
    assert kinds["shards"] == kinds["dedup"] == kinds["tokenized"] == {EXTRA}
    assert kinds.get("assign", set()) <= {EXTRA}
    assert "plan.json" in kinds


def test_changed_raw_file_reruns_its_group_only(clone: Workflow) -> None:
    extra_file(clone.root / "extra" / f"{EXTRA}_part-1.jsonl", seed=5)
    kinds = rerun(clone)
    assert kinds["shards"] == kinds["dedup"] == kinds["tokenized"] == {EXTRA}


def test_mixture_change_replans_and_reslices_only(clone: Workflow) -> None:
    kinds = rerun(clone, mixture_change(clone))
    assert set(kinds) == {"plan.json", "datapacks", "merged", "train"}
    assert "main_1" in kinds["merged"]
    assert kinds["merged"] == kinds["datapacks"], "the packs whose spec changed are written again, only they"


def mixture_change(wf: Workflow) -> str:
    """A config file giving English a probability of 0.8 in the main mixture; its name."""
    mixtures = yaml.safe_load((REPO / "config" / "sample.yaml").read_text())["mixtures"]
    mixtures["main"]["lang_prob"]["en"] = 0.8  # a user's mixtures replace the sample's: give them all
    (wf.root / "mix.yaml").write_text(yaml.safe_dump({"mixtures": mixtures}))
    return "mix.yaml"


def test_a_remix_after_two_packs_started_replans_only_the_others(clone: Workflow) -> None:
    results = clone.root / "results"
    plan = Plan.read(results / "plan.json")
    started = {p.name for p in plan.packs[:2]}
    # the segment records the chain leaves after training them (no trainer needed: the plan reads no more)
    write_training_records(results / "train", orjson.loads((results / "plan.json").read_bytes()))
    kinds = rerun(clone, mixture_change(clone))
    assert kinds["datapacks"] == kinds["merged"] and kinds["merged"], "the others are planned again"
    assert not kinds["merged"] & started, "the started packs' specs and bins stay as they were"
    assert kinds["train"] and not kinds["train"] & started, "their trainer configs too"
    after = Plan.read(results / "plan.json")
    for name in started:
        assert plan_table.pack_rows(after, name) == plan_table.pack_rows(plan, name)
    assert [(p.train_iters, p.iteration_offset) for p in after.packs[:2]] == [
        (p.train_iters, p.iteration_offset) for p in plan.packs[:2]
    ]
    audit = subprocess.run(
        [sys.executable, "-m", "workflow_scripts", "audit-packs", "--plan", "results/plan.json"],
        cwd=clone.root,
        capture_output=True,
        text=True,
    )
    assert audit.returncode == 0 and orjson.loads(audit.stdout)["ok"], audit.stdout[-2000:]
    (clone.root / "size.yaml").write_text(yaml.safe_dump({"datapacks": {"max_iters_per_pack": 20}}))
    refused = clone.run(*RUN, *CONFIG, "mix.yaml", "size.yaml")
    assert refused.returncode != 0
    assert "pack main_1 has started training" in refused.output and "replan_started" in refused.output
    forced = {"datapacks": {"max_iters_per_pack": 20, "replan_started": True}}
    (clone.root / "size.yaml").write_text(yaml.safe_dump(forced))
    assert "main_1" in rerun(clone, "mix.yaml", "size.yaml")["merged"], "forced: planned again"


def test_min_tokens_change_retokenizes_but_keeps_identical_packs(clone: Workflow) -> None:
    (clone.root / "min.yaml").write_text(yaml.safe_dump({"tokenize": {"min_tokens": 1}}))
    kinds = rerun(clone, "min.yaml")
    assert kinds["tokenized"] == all_groups(clone)
    assert "merged" not in kinds and "datapacks" not in kinds, "the same tokens make the same packs"


def test_new_tokenizer_retokenizes_and_reslices_everything(clone: Workflow, tmp_path: Path) -> None:
    model = train_model(tmp_path / "other", tmp_path / "corpus", 1500)
    (clone.root / "tok.yaml").write_text(yaml.safe_dump({"tokenizer": {"model": str(model)}}))
    kinds = rerun(clone, "tok.yaml")
    assert kinds["tokenized"] == all_groups(clone)
    packs = {p.name for p in (clone.root / "results" / "merged").iterdir()}
    assert kinds["merged"] == packs
    assert "shards" not in kinds and "dedup" not in kinds


def test_train_setting_change_rewrites_the_configs_only(clone: Workflow) -> None:
    train = yaml.safe_load((REPO / "config" / "sample.yaml").read_text())["train"]
    (clone.root / "tr.yaml").write_text(yaml.safe_dump({"train": {**train, "checkpoint_hours": 0.005}}))
    kinds = rerun(clone, "tr.yaml")
    packs = {p.name for p in (clone.root / "results" / "merged").iterdir() if not p.name.startswith("valid_")}
    assert set(kinds) == {"plan.json", "train"} and kinds["train"] == packs
    config = yaml.safe_load((clone.root / "results" / "train" / "main_1" / "main_1.yml").read_text())
    assert config["checkpoint_factor"] == 18


def test_train_run_setting_change_reruns_nothing(clone: Workflow) -> None:
    train = yaml.safe_load((REPO / "config" / "sample.yaml").read_text())["train"]
    run = {"launch": "srun python -m workflow_scripts train-reference --config {config}", "detach": True}
    (clone.root / "tr.yaml").write_text(yaml.safe_dump({"train": {**train, **run, "eval_launch": None}}))
    assert rerun(clone, "tr.yaml") == {}


def test_dedup_threshold_change_refilters_only_the_shards_it_changes(clone: Workflow) -> None:
    (clone.root / "dd.yaml").write_text(yaml.safe_dump({"dedup": {"threshold": 0.7}}))
    kinds = rerun(clone, "dd.yaml")
    assert "shards" not in kinds
    assert kinds["assign"], "a lower threshold finds more near duplicates"
    assert kinds["dedup"] == kinds["tokenized"] == kinds["assign"] != all_groups(clone)


def test_removed_source_leaves_no_trace_in_the_packs(clone: Workflow, finished: Workflow) -> None:
    model = yaml.safe_load((clone.root / "user.yaml").read_text())["tokenizer"]["model"]
    (clone.root / "user.yaml").write_text(yaml.safe_dump(user_config(Path(model), extra=False)))
    rerun(clone)
    results = clone.root / "results"
    signature = orjson.loads((results / "tokenized" / "signature.json").read_bytes())
    assert all(EXTRA not in e["name"] for e in signature["prefixes"])
    plan = Plan.read(results / "plan.json")
    for pack in plan.packs:
        assert all(EXTRA not in s["source"] for s in plan_table.pack_rows(plan, pack.name))
        stats = orjson.loads((results / "datapacks" / pack.name / "stats.json").read_bytes())
        assert all(EXTRA not in s["source"] for s in stats["sources"])
    before = plan_table.slice_frame(Plan.read(finished.root / "results" / "plan.json"))
    assert before["source"].str.contains(EXTRA).any(), "it was in the packs"


# -- stuck and stale states ------------------------------------------------------------------------------


def test_new_source_after_a_partial_run_does_not_get_stuck(clone: Workflow) -> None:
    source = {"name": "more", "paths": ["more/*.jsonl"], "lang": "de", "domain": "extra", "subdomain": "y"}
    config = yaml.safe_load((clone.root / "user.yaml").read_text())
    config["sources"].append(source)
    (clone.root / "user.yaml").write_text(yaml.safe_dump(config))
    extra_file(clone.root / "more" / "de_extra_y_part-1.jsonl", seed=9)
    clone.ok(*RUN, *CONFIG, "--", "results/shards/stats.json")
    clone.ok(*RUN, "--until", "dedup_signatures", *CONFIG)
    out = clone.ok(*RUN, "-n", *CONFIG)
    assert "Traceback" not in out and "Error" not in out
    clone.ok(*RUN, *CONFIG)
    assert (clone.root / "results" / "tokenized" / "de_extra_y_split_0000_text_document.bin").is_file()


def test_a_killed_runs_temporary_files_do_not_linger(clone: Workflow) -> None:
    """A tokenize job killed after its input changed leaves a temporary file and no output; the rerun
    replaces the temporary file and leaves none behind."""
    shard = clone.root / "results" / "dedup" / EXTRA / f"{EXTRA}_split_0000.jsonl"
    shard.write_bytes(b"".join(shard.read_bytes().splitlines(keepends=True)[1:]))
    manifest = clone.root / "results" / "dedup" / "_batches" / f"{EXTRA}.0.json"
    manifest.write_bytes(manifest.read_bytes() + b"\n")  # the job's trigger: its filter batch ran
    tokenized = clone.root / "results" / "tokenized"
    final = tokenized / f"{EXTRA}_split_0000_text_document.bin"
    final.unlink()
    (tokenized / f".tmp.{final.name}").write_bytes(b"half a file")  # what the killed job leaves
    clone.ok(*RUN, *CONFIG)
    assert final.is_file()
    assert not list((clone.root / "results").rglob(".tmp.*"))


def test_a_shorter_plan_names_the_stale_packs(clone: Workflow) -> None:
    config = yaml.safe_load((REPO / "config" / "sample.yaml").read_text())
    phases = [p for p in config["datapacks"]["phases"] if p["name"] != "cooldown"]
    (clone.root / "short.yaml").write_text(yaml.safe_dump({"datapacks": {"phases": phases}}))
    proc = clone.run(*RUN, *CONFIG, "short.yaml")
    assert proc.returncode == 0, proc.output[-3000:]
    plan_md = (clone.root / "results" / "plan.md").read_text()
    assert "**Stale packs**" in plan_md and "cooldown_4" in plan_md
    assert "cooldown_4" in proc.output and "do not train on them" in proc.output


def document(plan: Plan, ledger: Ledger, row: dict, place: int) -> int:
    """The source's own number of the document at ``place`` of its reading order in ``plan``."""
    if not plan.shuffle:
        return place
    return int(shuffle_permutation(ledger.documents, plan.seed, row["source"])[place])


def test_an_excluded_document_leaves_only_the_unstarted_packs(clone: Workflow) -> None:
    results = clone.root / "results"
    plan = Plan.read(results / "plan.json")
    started = {p.name for p in plan.packs[:2]}
    write_training_records(results / "train", orjson.loads((results / "plan.json").read_bytes()))
    first = plan_table.pack_rows(plan, plan.packs[0].name)[0]  # a document the first pack trained on
    later = plan_table.pack_rows(plan, plan.packs[2].name)[-1]  # one an unstarted pack reads
    planted = [(first["source"], first["ranges"][0][1]), (later["source"], later["ranges"][0][1])]
    ledgers = [Ledger.read(str(clone.root / row["prefix"])) for row in (first, later)]
    by_hash = ledgers[0].hex(document(plan, ledgers[0], first, planted[0][1]))
    raw = ledgers[1].position(document(plan, ledgers[1], later, planted[1][1]))
    exclude = {"datapacks": {"exclude": [by_hash, f"{raw.file}:{raw.line}"]}}
    (clone.root / "ex.yaml").write_text(yaml.safe_dump(exclude))
    kinds = rerun(clone, "ex.yaml")
    assert kinds["merged"] and not kinds["merged"] & started, "only the unstarted packs are made again"
    after = Plan.read(results / "plan.json")
    for pack in after.packs[2:]:
        for row in plan_table.pack_rows(after, pack.name):
            held = {(row["source"], d) for _, a, b in row["ranges"] for d in range(a, b)}
            assert not held & set(planted), pack.name
    note = (results / "plan.md").read_text().split("**Excluded**")[1].split("\n")[0]
    assert note.startswith(": 2 documents") and plan.packs[0].name in note
    chart = pd.read_csv(results / "report" / "plan" / "excluded.csv")  # a declared output with exclude set
    assert chart["documents"].sum() == 2 and plan.packs[0].name in " ".join(chart["started_packs"].dropna())
    audit = subprocess.run(
        [sys.executable, "-m", "workflow_scripts", "audit-packs", "--plan", "results/plan.json"],
        cwd=clone.root,
        capture_output=True,
        text=True,
    )
    assert audit.returncode == 0 and orjson.loads(audit.stdout)["excluded"] == 2, audit.stdout[-2000:]
