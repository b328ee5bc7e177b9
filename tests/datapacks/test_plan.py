"""The typed plan: plan.json reads into a ``Plan`` and writes back byte for byte; a plan without a key it
needs, or with a value of another type, is refused, naming the file, the entry and the key. plan.json is a
header whose size does not grow with the sources; the rows are in its table, and each pack's spec holds the
slices and cursors the plan of one JSON gave (plan_specs.json, written by it)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import orjson
import pyarrow.parquet as pq
import pytest

from workflow_scripts.core.fsio import dumps_json, read_json, write_json
from workflow_scripts.core.indexed_dataset import IndexedDatasetBuilder
from workflow_scripts.core.settings import schema_entry
from workflow_scripts.datapacks import plan_files, plan_table
from workflow_scripts.datapacks.plan import Plan, PlanFormatError
from workflow_scripts.datapacks.specs import pack_start

GOLDEN = Path(__file__).with_name("plan_specs.json")


def write_plan(tmp_path: Path, train: bool, shuffle: bool = False) -> Path:
    """``snakepack plan`` over three small sources (one of them a single long document, skipped for the
    hold-out with a note and left out of the mixture), with or without the training cadence, its sources
    read in order or shuffled; the path of its plan.json."""
    rng = np.random.default_rng(4)
    sizes = {"en_web_big": [3000], "en_web_a": [40] * 60, "de_news_a": [25] * 90}
    signature = []
    for name, docs in sizes.items():
        prefix = str(tmp_path / "tokenized" / name)
        with IndexedDatasetBuilder(prefix, np.uint16) as builder:
            for n in docs:
                builder.add_document(rng.integers(0, 60000, size=n, dtype=np.uint16))
        lang, domain = name.split("_")[:2]
        signature.append(
            {"prefix": prefix, "name": name, "lang": lang, "domain": domain, "tokens": sum(docs)}
        )
    write_json(tmp_path / "signature.json", {"prefixes": signature})
    config = {
        "seed": 7,
        "training": {"seq_length": 16, "global_batch_size": 2, "model_params": 1e8, "gpus": 1},
        "datapacks": {
            "max_iters_per_pack": 40,
            "validation_tokens": 200,
            "shuffle": shuffle,
            "phases": [
                {"name": "warmup", "iters": 30, "mixture": "m"},
                {"name": "main", "tokens": 3000, "mixture": "m"},
            ],
        },
        # en_web_big's one document is longer than a pack may pass its budget by: no pack reads it
        "mixtures": {"m": {"lang_prob": {"en": 0.6, "de": 0.4}, "exclude": ["en_web_big"]}},
    }
    if train:
        defaults = {k: v.get("default") for k, v in schema_entry("", "train")["properties"].items()}
        config["train"] = {**defaults, "base_config": "base.yml"}
    out = tmp_path / ("trained" if train else "plain") / ("shuffled" if shuffle else "ordered")
    plan_files.main(
        [
            *("--config-json", orjson.dumps(config).decode()),
            *("--signature", str(tmp_path / "signature.json")),
            *("--json", str(out / "plan.json"), "--csv", str(out / "plan.csv"), "--md", str(out / "plan.md")),
            *("--merged-dir", str(out / "merged"), "--specs-dir", str(out / "specs")),
        ]
    )
    return out / "plan.json"


@pytest.mark.parametrize("train", [True, False])
def test_a_plan_reads_and_writes_back_byte_for_byte(tmp_path: Path, train: bool) -> None:
    path = write_plan(tmp_path, train)
    plan = Plan.read(path)
    assert dumps_json(plan.to_dict()) == path.read_bytes()
    assert plan.to_dict() == read_json(path)
    assert [p.name for p in plan.packs] == ["warmup_0", "main_1", "main_2", "main_3"]
    assert [v.name for v in plan.validation] == ["valid_de", "valid_en"]
    assert plan.notes and plan.notes[0].startswith("valid_en: source en_web_big skipped")
    assert all(p.merged_prefix and p.neox and p.megatron_data_args for p in plan.packs)
    assert (plan.checkpoint_disk is not None) == train == all(p.training for p in plan.packs)
    assert plan.packs[1].iteration_offset == plan.packs[0].train_iters
    assert plan_table.pack_slices(plan, "warmup_0")[0].start.to_dict() == {"epoch": 0, "doc": 0}
    sources = plan_table.source_frame(plan).set_index("source")
    assert sources.loc["en_web_a", "held_out"] == plan.validation[1].tokens


def test_a_plan_without_a_key_names_the_file_the_entry_and_the_key(tmp_path: Path) -> None:
    raw = read_json(write_plan(tmp_path, False))
    tokens = raw["packs"][1].pop("tokens")
    write_json(tmp_path / "old.json", raw)
    with pytest.raises(PlanFormatError) as refused:
        Plan.read(tmp_path / "old.json")
    assert str(refused.value).startswith(f"{tmp_path / 'old.json'}: packs[1] has no 'tokens' (")
    # one key missing at a time: which of two is named first is the reader's order
    raw["packs"][1]["tokens"] = tokens
    del raw["seq_length"]
    with pytest.raises(PlanFormatError, match=r"^the plan has no 'seq_length' \("):
        Plan.from_dict(raw)


def test_a_plan_with_a_value_of_another_type_names_the_file_the_entry_and_the_key(tmp_path: Path) -> None:
    raw = read_json(write_plan(tmp_path, False))
    raw["packs"][0]["budget"] = "many"
    write_json(tmp_path / "edited.json", raw)
    with pytest.raises(PlanFormatError) as refused:
        Plan.read(tmp_path / "edited.json")
    assert str(refused.value).startswith(
        f"{tmp_path / 'edited.json'}: packs[0].budget: expected `int`, got `str` ("
    )
    assert "snakemake --forcerun plan" in str(refused.value)


def test_a_plan_keeps_its_numbers_as_written(tmp_path: Path) -> None:
    """A float field given an int (a config's ``checkpoint_quota_tb: 10``) is written back as 10, not 10.0."""
    raw = read_json(write_plan(tmp_path, True))
    raw["checkpoint_disk"]["quota_tb"] = 10
    assert dumps_json(Plan.from_dict(raw).to_dict()) == dumps_json(raw)


def test_a_plan_is_frozen(tmp_path: Path) -> None:
    plan = Plan.read(write_plan(tmp_path, False))
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.packs[0].train_iters = 1  # type: ignore[misc]


def many_sources_plan(tmp_path: Path, n: int) -> Path:
    """``snakepack plan`` over ``n`` sources of three documents each (their tokens the same whatever ``n``);
    the path of its plan.json."""
    signature = []
    for i in range(n):
        name = f"{['en', 'de'][i % 2]}_web_s_split_{i:06d}_text_document"
        prefix = str(tmp_path / "tokenized" / name)
        with IndexedDatasetBuilder(prefix, np.uint16, durable=False) as builder:
            for _ in range(3):
                builder.add_document(np.ones(12_000 // n, dtype=np.uint16))
        signature.append(
            {"prefix": prefix, "name": name, "lang": name[:2], "domain": "web", "tokens": 36_000 // n}
        )
    write_json(tmp_path / "signature.json", {"prefixes": signature})
    config = {
        "seed": 1,
        "training": {"seq_length": 16, "global_batch_size": 2},
        "datapacks": {
            "max_tokens_per_pack": 9000,
            "phases": [{"name": "main", "tokens": 18000, "mixture": "m"}],
        },
        "mixtures": {"m": {"lang_prob": {"en": 0.5, "de": 0.5}}},
    }
    out = tmp_path / "out"
    plan_files.main(
        [
            *("--config-json", orjson.dumps(config).decode()),
            *("--signature", str(tmp_path / "signature.json")),
            *("--json", str(out / "plan.json"), "--csv", str(out / "plan.csv"), "--md", str(out / "plan.md")),
            *("--merged-dir", str(out / "merged"), "--specs-dir", str(out / "specs")),
        ]
    )
    return out / "plan.json"


def test_the_plan_json_does_not_grow_with_the_sources(tmp_path: Path) -> None:
    """Ten times the sources, the same tokens: plan.json, plan.csv and plan.md keep their size (within the
    digits of the counts); the sources' rows are in the plan's table and each pack's spec holds its own."""
    small, large = many_sources_plan(tmp_path / "small", 20), many_sources_plan(tmp_path / "large", 200)
    for name in ("plan.json", "plan.csv", "plan.md"):
        grown = (large.parent / name).stat().st_size - (small.parent / name).stat().st_size
        assert grown < 400, name
    plan = Plan.read(large)
    assert len(plan_table.source_frame(plan)) == 200
    assert sum(p.sources for p in plan.packs) > 200  # rows that the plan of 20 sources could not hold
    for pack in plan.packs:
        spec = read_json(large.parent / "specs" / f"{pack.name}.json")
        assert len(spec["slices"]) == pack.sources and len(spec["state_after"]) == 200


@pytest.mark.parametrize("shuffle", [False, True])
def test_the_specs_and_the_typed_slices_are_those_of_the_plan_of_one_json(
    tmp_path: Path, shuffle: bool
) -> None:
    path = write_plan(tmp_path, False, shuffle)
    golden = read_json(GOLDEN)["shuffled" if shuffle else "ordered"]

    def relative(value: object) -> object:
        return orjson.loads(orjson.dumps(value).replace(str(tmp_path).encode(), b"TMP"))

    specs = {f.name: read_json(f) for f in sorted((path.parent / "specs").glob("*.json"))}
    assert relative(specs) == golden
    plan = Plan.read(path)
    for name, spec in golden.items():
        typed = plan_table.pack_slices(plan, name.removesuffix(".json"))
        assert relative([s.to_dict() for s in typed]) == spec["slices"]
    for index, pack in enumerate(plan.packs):
        assert pack_start(plan, index) == golden[f"{pack.name}.json"]["start"]
        assert pack.sources == len(golden[f"{pack.name}.json"]["slices"])


def test_a_table_without_a_column_is_named(tmp_path: Path) -> None:
    path = write_plan(tmp_path, False)
    slices, _ = plan_table.paths(path)
    pq.write_table(pq.read_table(slices).drop_columns(["tokens"]), slices)
    with pytest.raises(PlanFormatError, match=rf"^{slices}: has no column 'tokens' \(.*--forcerun plan\)"):
        plan_table.pack_slices(Plan.read(path), "main_1")
    slices.unlink()
    with pytest.raises(PlanFormatError, match=rf"^{slices}: missing \("):
        plan_table.source_frame(Plan.read(path))
