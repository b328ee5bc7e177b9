"""The plan keeps its limits or refuses: a pack passes its budget by less than its allowance (one
iteration's tokens or a tenth of the pack size) and trains at most ``max_iters_per_pack``, a phase by less
than an allowance per pack; a document no pack can hold so is named, with a pack size that holds it, if
any."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson
import pytest

from workflow_scripts import cli
from workflow_scripts.core.fsio import read_json, write_json
from workflow_scripts.core.indexed_dataset import IndexedDatasetBuilder
from workflow_scripts.datapacks.planner import PlanError, make_plan
from workflow_scripts.datapacks.settings import PlanSettings

HUGE = 10 * 1024 * 1024  # tokens: a 20 MiB document in a uint16 .bin (a 20 MB text is about as many)
SEQ, BATCH = 2048, 8  # 16,384 tokens per iteration: 40 iterations are 655,360 tokens, as in the issue


def write_sources(root: Path, huge_at: int | None, big_docs: int = 600) -> Path:
    """Three tokenized sources of ordinary documents (200 to 2,000 tokens), ``en_web_big`` of ``big_docs``
    of them, its document ``huge_at`` of ``HUGE`` tokens. The signature's path."""
    rng = np.random.default_rng(5)
    signature = []
    for name, docs in {"en_web_a": 1500, "en_web_big": big_docs, "de_web_a": 1500}.items():
        lengths = rng.integers(200, 2000, size=docs)
        if name == "en_web_big" and huge_at is not None:
            lengths[huge_at] = HUGE
        prefix = root / "tokenized" / name
        prefix.parent.mkdir(parents=True, exist_ok=True)
        with IndexedDatasetBuilder(prefix, np.uint16) as builder:
            for n in lengths:
                builder.add_document(np.full(n, 7, dtype=np.uint16))
        lang, domain = name.split("_")[:2]
        signature.append(
            {
                "prefix": str(prefix),
                "name": name,
                "source": f"results/tokenized/{name}_text_document",
                "lang": lang,
                "domain": domain,
                "tokens": int(lengths.sum()),
            }
        )
    write_json(root / "signature.json", {"prefixes": signature})
    return root / "signature.json"


def issue_config(**datapacks: object) -> dict:
    return {
        "seed": 3,
        "training": {"seq_length": SEQ, "global_batch_size": BATCH},
        "datapacks": {
            "max_iters_per_pack": 40,
            "phases": [
                {"name": "warmup", "iters": 10, "mixture": "main"},
                {"name": "U1", "tokens": 1_500_000, "mixture": "main"},
                {"name": "cooldown", "fraction": 0.2, "mixture": "main"},
            ],
            **datapacks,
        },
        "mixtures": {"main": {"lang_prob": {"en": 0.7, "de": 0.3}}},
    }


def snakepack_plan(root: Path, signature: Path, config: dict) -> int:
    """``snakepack plan`` as the plan rule runs it; its exit status."""
    out = root / "out"
    return cli.main(
        [
            "plan",
            *("--config-json", orjson.dumps(config).decode(), "--signature", str(signature)),
            *("--json", str(out / "plan.json"), "--csv", str(out / "plan.csv"), "--md", str(out / "plan.md")),
            *("--merged-dir", str(out / "merged"), "--specs-dir", str(out / "specs")),
        ]
    )


def test_a_20_mb_document_is_refused_naming_it_where_it_breaks_the_limits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    signature = write_sources(tmp_path, huge_at=123)
    assert snakepack_plan(tmp_path, signature, issue_config()) == 2
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert lines[0].startswith("snakepack plan: error: the plan breaks its limits")
    pack = next(line for line in lines if line.startswith("- pack U1_"))
    assert "iterations to read it, max_iters_per_pack 40" in pack and "less than 65,536 is allowed" in pack
    assert f"document 123 of results/tokenized/en_web_big_text_document, has {HUGE:,} tokens" in pack
    assert any(line.startswith("- phase U1: ") for line in lines)
    assert lines[-1].startswith("- no datapacks.max_iters_per_pack up to ")  # the phases are smaller than it
    assert "remove or split the document" in lines[-1]
    assert "Traceback" not in err and not (tmp_path / "out" / "plan.json").exists()


def test_a_setting_named_as_holding_the_document_holds_it(tmp_path: Path) -> None:
    """A phase far larger than the document, whose source is read once: packs of 8 x 200 iterations hold it
    inside the source's share; the message names that value, and it plans."""
    signature = read_json(write_sources(tmp_path, huge_at=300, big_docs=12_000))["prefixes"]
    config = issue_config(max_iters_per_pack=200)
    config["datapacks"]["phases"] = [{"name": "U1", "tokens": 30_000_000, "mixture": "main"}]

    def lengths(prefix: str) -> np.ndarray:
        from workflow_scripts.core.indexed_dataset import IndexedDataset

        return IndexedDataset(prefix).lengths

    with pytest.raises(PlanError) as refused:
        make_plan(PlanSettings.from_config(config), signature, lengths)
    fix = str(refused.value).splitlines()[-1]
    assert fix.startswith("- datapacks.max_iters_per_pack: ") and "holds every document" in fix
    fitting = int(fix.split(": ")[1].split()[0])
    assert fitting > 200
    config["datapacks"]["max_iters_per_pack"] = fitting
    plan = make_plan(PlanSettings.from_config(config), signature, lengths)
    assert all(p["train_iters"] <= fitting for p in plan["packs"])


def test_ordinary_documents_keep_every_pack_within_one_iteration_of_its_budget(tmp_path: Path) -> None:
    """The same corpus without the long document plans; every pack passes its budget by less than its last
    document (at most 2,000 tokens), trains at most max_iters_per_pack, and the phases keep theirs as well."""
    signature = read_json(write_sources(tmp_path, huge_at=None))["prefixes"]
    from workflow_scripts.core.indexed_dataset import IndexedDataset

    plan = make_plan(PlanSettings.from_config(issue_config()), signature, lambda p: IndexedDataset(p).lengths)
    tpi = SEQ * BATCH
    for pack in plan["packs"]:
        assert 0 <= pack["tokens"] - pack["budget"] < 2000 and pack["train_iters"] <= 40, pack["name"]
    for phase in plan["phases"]:
        packs = [p for p in plan["packs"] if p["phase"] == phase["name"]]
        assert 0 <= sum(p["tokens"] for p in packs) - phase["tokens"] < len(packs) * 2000
    assert plan["total_train_iters"] <= 10 + (1_500_000 // tpi) + 1
