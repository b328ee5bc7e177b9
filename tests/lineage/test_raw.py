"""``snakepack lineage`` down to the raw input, through the sources' ledgers (tokens/ledger.py): a planted
document found by its raw file and line, by its hash and by its text lands at exactly the steps a
brute-force replay of the trainer's sample order gives; ``--steps`` names each document's raw line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.datapacks.test_packer import plan_for
from tests.lineage.packs import trained_pack, write_plan
from tests.train.conftest import model  # noqa: F401 (a fixture)
from workflow_scripts.cli import main as snakepack
from workflow_scripts.core.indexed_dataset import IndexedDataset
from workflow_scripts.datapacks.plan import Plan
from workflow_scripts.lineage.sources import PackSources, document_of
from workflow_scripts.lineage.steps import StepMap
from workflow_scripts.tokens.ledger import LedgerBuilder, text_hash
from workflow_scripts.train.reference.config import load_config

pytestmark = pytest.mark.fast


def raw_of(source: str, doc: int) -> tuple[str | None, int | None]:
    """The raw file and line the ledgers below give a source's document: two files, a quarantined line
    (a gap) and, for the German source, an unknown stretch."""
    if source == "de_web_a":
        return (None, None) if 10 <= doc < 15 else ("de.txt", doc + 1)
    if doc < 80:
        return "en_a.jsonl", doc + 1 + (doc >= 40)  # line 41 was quarantined
    return "en_b.jsonl.zst", doc - 79


def text_of(source: str, doc: int) -> str:
    return f"{source} document {doc} \u00e9"


def write_ledgers(tmp: Path) -> None:
    """Ledgers for ``plan_for``'s two sources."""
    for name in ("en_web_a", "de_web_a"):
        prefix = str(tmp / name)
        builder = LedgerBuilder()
        for doc in range(IndexedDataset(prefix).num_documents):
            file, line = raw_of(name, doc)
            builder.add([file], [-1 if line is None else line], [text_hash(text_of(name, doc))])
        builder.write(prefix)


def lineage(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    assert snakepack(["lineage", *args]) == 0
    return json.loads(capsys.readouterr().out)


def brute_force_steps(config: Path, sources: PackSources, prefix: Path, source: str, doc: int) -> list[int]:
    """Every global step whose samples read any token of ``source``'s document ``doc``: each step's samples
    replayed through ``StepMap.sample_spans``, each span's pack document named by the plan."""
    cfg = load_config([str(config)])
    steps, doc_idx = StepMap(cfg), IndexedDataset(prefix).doc_idx
    found = []
    for step in range(cfg.offset + 1, cfg.end + 1):
        first = (step - cfg.offset - 1) * cfg.batch
        for k in range(first, first + cfg.batch):
            for _, sequence, _, _ in steps.sample_spans(k):
                where = sources.source_of(document_of(doc_idx, sequence))
                if (where.source, where.doc) == (source, doc) and step not in found:
                    found.append(step)
    return found


def pack_and_config(tmp: Path, tokenizer_model: Path) -> tuple[Plan, Path, Path]:
    """``plan_for``'s second pack, written, and its GPT-NeoX config (from global step 11; checkpoints in
    ``tmp/checkpoints``); the plan's JSON and table in ``tmp``."""
    plan = plan_for(tmp, shuffle=True, sequences=1)
    write_plan(plan, tmp / "plan.json")
    prefix, config, _ = trained_pack(plan, 1, tokenizer_model, tmp, 10, save=tmp / "checkpoints")
    return plan, prefix, config


def test_a_planted_document_by_raw_line_hash_and_text(
    tmp_path: Path,
    model: Path,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    plan, prefix, config = pack_and_config(tmp_path, model)
    plan_json, name = tmp_path / "plan.json", prefix.name
    args = ("--config", str(config), "--plan", str(plan_json))
    assert snakepack(["lineage", *args, "--doc", "en_a.jsonl:42"]) == 2  # tokenized before ledgers
    assert "tokenized before tokenize wrote ledgers" in capsys.readouterr().err
    write_ledgers(tmp_path)
    sources = PackSources.of_plan(plan, name)

    out = lineage(capsys, *args, "--steps", "11:12")
    assert out["documents"]
    for d in out["documents"]:
        file, line = raw_of(d["source"], d["source_document"])
        assert d["raw"] == (None if file is None else f"{file}:{line}")
        assert d["hash"] == f"{text_hash(text_of(d['source'], d['source_document'])):016x}"

    planted = next(
        w for w in map(sources.source_of, range(sources.documents)) if w.source == "en_web_a" and w.doc >= 41
    )
    file, line = raw_of(planted.source, planted.doc)
    expected = brute_force_steps(config, sources, prefix, planted.source, planted.doc)
    assert expected
    (tmp_path / "checkpoints" / f"global_step{expected[0]}").mkdir(parents=True)
    text = text_of(planted.source, planted.doc)
    for query in (["--doc", f"{file}:{line}"], ["--hash", f"{text_hash(text):016x}"], ["--text", text]):
        (match,) = lineage(capsys, *args, *query)["matches"]
        assert (match["source"], match["source_document"]) == (planted.source, planted.doc), query
        assert match["raw"] == f"{file}:{line}"
        (pack,) = match["packs"]
        assert pack["steps"] == expected, query
        assert pack["checkpoints"] == [f"global_step{expected[0]}"]
    assert lineage(capsys, *args, "--doc", "en_a.jsonl:41")["matches"] == []  # the quarantined line
    assert lineage(capsys, *args, "--text", "no such text")["matches"] == []
    assert snakepack(["lineage", *args, "--hash", "xyz"]) == 2


def brute_force_read(config: Path, sources: PackSources, prefix: Path, last: int) -> set[tuple[str, int]]:
    """The (source, document) pairs steps up to ``last`` read a token of, replayed sample by sample."""
    cfg = load_config([str(config)])
    steps, doc_idx = StepMap(cfg), IndexedDataset(prefix).doc_idx
    read = set()
    for k in range((last - cfg.offset) * cfg.batch):
        for _, sequence, _, _ in steps.sample_spans(k):
            where = sources.source_of(document_of(doc_idx, sequence))
            read.add((where.source, where.doc))
    return read


def test_how_much_of_a_source_and_of_a_raw_file_each_checkpoint_read(
    tmp_path: Path,
    model: Path,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    plan, prefix, config = pack_and_config(tmp_path, model)
    write_ledgers(tmp_path)
    args = ("--config", str(config), "--plan", str(tmp_path / "plan.json"))
    cfg = load_config([str(config)])
    marks = [cfg.offset + 2, (cfg.offset + cfg.end) // 2]
    for step in marks:
        (tmp_path / "checkpoints" / f"global_step{step}").mkdir(parents=True)
    sources = PackSources.of_plan(plan, prefix.name)
    held = {(w.source, w.doc) for w in map(sources.source_of, range(sources.documents))}
    for query, wanted, total in (
        (["--source", "de_web_a"], lambda s, d: s == "de_web_a", 40),
        (["--file", "raw/en_a.jsonl"], lambda s, d: raw_of(s, d)[0] == "en_a.jsonl", 80),
    ):
        out = lineage(capsys, *args, *query)
        (pack,) = out["packs"]
        assert out["documents"] == total
        assert pack["distinct"] == len({key for key in held if wanted(*key)})
        assert pack["documents"] >= pack["distinct"] > 0, "a pack holds some of it (the German: twice)"
        for got, last in zip([*pack["checkpoints"], pack["end"]], [*marks, cfg.end], strict=True):
            expected = {key for key in brute_force_read(config, sources, prefix, last) if wanted(*key)}
            assert got["step"] == last and got["read"] == len(expected), (query, last)
            assert got["fraction"] == round(len(expected) / total, 6)
        assert 0 < pack["checkpoints"][0]["read"] < pack["end"]["read"]
    assert snakepack(["lineage", *args, "--source", "xx_none"]) == 2


def test_several_configs_answer_each_pack(
    tmp_path: Path,
    model: Path,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Every pack's config at once: which packs hold a document, and a range of steps across a pack
    boundary split between the two packs."""
    plan = plan_for(tmp_path, shuffle=True, sequences=1)
    plan_json = write_plan(plan, tmp_path / "plan.json")
    _, first, iters = trained_pack(plan, 0, model, tmp_path, 0)
    _, second, _ = trained_pack(plan, 1, model, tmp_path, iters)
    write_ledgers(tmp_path)
    held_first = PackSources.of_plan(plan, plan.packs[0].name).source_of(0)
    configs, text = [str(first), str(second)], text_of(held_first.source, held_first.doc)
    each = [lineage(capsys, "--config", c, "--plan", str(plan_json), "--text", text) for c in configs]
    both = lineage(capsys, "--config", *configs, "--plan", str(plan_json), "--text", text)
    assert both == {"packs": [{"config": c, **a} for c, a in zip(configs, each, strict=True)]}
    held = [p["config"] for p in both["packs"] for m in p["matches"] for q in m["packs"] if q["documents"]]
    assert held[0] == configs[0]  # the first pack's first document
    steps = lineage(capsys, "--config", *configs, "--plan", str(plan_json), "--steps", f"{iters}:{iters + 1}")
    assert [(p["config"], p["steps"]) for p in steps["packs"]] == [
        (configs[0], [iters, iters]),
        (configs[1], [iters + 1, iters + 1]),
    ]
    assert snakepack(["lineage", "--config", *configs, "--steps", "0:0"]) == 2
    assert "no step of the configs' packs" in capsys.readouterr().err
    assert snakepack(["lineage", "--config", *configs, "--doc", "0:3"]) == 2
