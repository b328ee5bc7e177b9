"""Phases to packs: budgets, exact document ranges from a persistent cursor, single-epoch iteration math."""

import numpy as np
import pytest

from workflow_scripts.core.settings import schema_entry
from workflow_scripts.datapacks.iterations import NO_ESTIMATE, neox_samples, tokens_for_iters, train_iters
from workflow_scripts.datapacks.plan import Plan
from workflow_scripts.datapacks.plan_files import add_training, markdown, plan_rows, training_lines
from workflow_scripts.datapacks.planner import PlanError, make_plan, phase_budgets, split_budget
from workflow_scripts.datapacks.settings import Phase, PlanSettings, TrainingSettings

SEED000 = {"seq_length": 8192, "global_batch_size": 576, "epoch_rule": "neox"}


def plan_of(config: dict, signature: list, lengths) -> dict:
    """The plan of a config given as a dict (as in config.yaml)."""
    return make_plan(PlanSettings.from_config(config), signature, lengths)


def sources(plan: dict) -> dict[str, dict]:
    """The plan's sources' table (its ``sources`` columns) by source: available, taken, epochs, held_out."""
    columns = plan["sources"]
    return {name: {k: v[i] for k, v in columns.items()} for i, name in enumerate(columns["source"])}


def signature(sizes: dict[str, int], doc_tokens: int) -> tuple[list[dict], dict[str, np.ndarray]]:
    sig, lengths = [], {}
    for name, docs in sizes.items():
        lang, domain = name.split("_")[:2]
        lengths[name] = np.full(docs, doc_tokens, dtype=np.int32)
        sig.append(
            {"prefix": name, "name": name, "lang": lang, "domain": domain, "tokens": docs * doc_tokens}
        )
    return sig, lengths


def config(phases: list[dict], training: dict | None = None, **datapacks) -> dict:
    return {
        "seed": 1,
        "training": training or {"seq_length": 128, "global_batch_size": 4, "epoch_rule": "neox"},
        "datapacks": {"max_iters_per_pack": 50, **datapacks, "phases": [dict(p) for p in phases]},  # a copy
        "mixtures": {"main": {"lang_prob": {"en": 0.75, "de": 0.25}}, "en": {"lang_prob": {"en": 1.0}}},
    }


def test_seed000_numbers() -> None:
    sig, lengths = signature({"en_web_a": 2000, "de_web_a": 2000}, 50_000_000)
    cfg = config(
        [
            {"name": "warmup", "iters": 2000, "mixture": "main"},
            {"name": "U1", "tokens": 400_000_000_000, "mixture": "main"},
        ],
        training=SEED000,
        max_iters_per_pack=35000,
    )
    plan = plan_of(cfg, sig, lengths.__getitem__)
    assert plan["tokens_per_iter"] == 4_718_592
    assert plan["max_tokens_per_pack"] == 165_150_720_000
    warmup, *u1 = plan["packs"]
    assert warmup["name"] == "warmup_0" and warmup["train_iters"] == 2000
    assert [p["budget"] for p in u1] == [
        165_150_720_000,
        165_150_720_000,
        400_000_000_000 - 2 * 165_150_720_000,
    ]
    assert [p["iteration_offset"] for p in plan["packs"]] == [
        0,
        2000,
        2000 + u1[0]["train_iters"],
        2000 + u1[0]["train_iters"] + u1[1]["train_iters"],
    ]
    # The hand estimate tokens/(8192*576) rounded up would read a pack twice under GPT-NeoX:
    assert u1[0]["train_iters"] < -(-u1[0]["tokens"] // 4_718_592)


def test_cooldown_fraction_is_carved_from_the_phase_before() -> None:
    budgets = phase_budgets(
        TrainingSettings(**SEED000), [Phase(name="U3", tokens=1000), Phase(name="cd", fraction=0.2)], 10**12
    )
    assert budgets == [800, 200]
    with pytest.raises(PlanError):
        phase_budgets(TrainingSettings(**SEED000), [Phase(name="cd", fraction=0.2)], 10**12)


@pytest.mark.parametrize("rule", ["neox", "megatron"])
@pytest.mark.parametrize(("seq", "batch"), [(8192, 576), (2048, 7), (128, 1)])
def test_single_epoch_train_iters_at_its_boundary(rule: str, seq: int, batch: int) -> None:
    for n in (1, 2, 999, 2000, 29789):
        tokens = tokens_for_iters(n, seq, batch, rule)
        assert train_iters(tokens, seq, batch, rule) == n
        assert train_iters(tokens - 1, seq, batch, rule) == n - 1
    if rule == "neox":  # GPT-NeoX: one epoch iff (T - 1) // seq covers ceil(1.005 * n * B) samples
        tokens = tokens_for_iters(2000, seq, batch, rule)
        assert (tokens - 1) // seq == neox_samples(2000, batch)
        assert train_iters(2000 * seq * batch, seq, batch) < 2000
    else:  # Megatron-LM: n * B * seq + 1 tokens
        assert tokens_for_iters(3, seq, batch, rule) == 3 * batch * seq + 1


def test_cursor_chain_is_contiguous_and_within_one_document() -> None:
    sig, lengths = signature({"en_web_a": 400, "de_web_a": 400}, 1)
    rng = np.random.default_rng(3)
    for entry in sig:
        lengths[entry["name"]] = rng.integers(50, 400, size=400).astype(np.int32)
        entry["tokens"] = int(lengths[entry["name"]].sum())
    plan = plan_of(config([{"name": "main", "tokens": 60_000, "mixture": "main"}]), sig, lengths.__getitem__)
    assert len(plan["packs"]) == 3  # 50 iters * 512 tokens = 25,600 per pack
    cursor = {"en_web_a": (0, 0), "de_web_a": (0, 0)}
    for pack in plan["packs"]:
        for s in pack["slices"]:
            ((epoch, start, stop),) = s["ranges"]
            assert (epoch, start) == cursor[s["source"]]
            cursor[s["source"]] = (epoch, stop)
            taken = int(lengths[s["source"]][start:stop].sum())
            assert taken == s["tokens"] and 0 <= taken - s["target"] < lengths[s["source"]][stop - 1]
        # the targets are the shares less what the sources before gave over theirs: the pack passes its
        # budget by less than its last document
        assert 0 <= pack["tokens"] - pack["budget"] < lengths[s["source"]][stop - 1]


def test_wrap_around_is_reported_as_upsampling() -> None:
    sig, lengths = signature({"en_web_a": 100, "de_web_a": 10}, 100)
    plan = plan_of(
        config([{"name": "main", "tokens": 20_000, "mixture": "main"}], max_iters_per_pack=100),
        sig,
        lengths.__getitem__,
    )
    de = next(s for s in plan["packs"][0]["slices"] if s["source"] == "de_web_a")
    assert de["upsampled"] and de["ranges"][0] == [0, 0, 10] and de["ranges"][1][0] == 1
    assert sources(plan)["de_web_a"]["epochs"] == pytest.approx(5.0)
    assert sources(plan)["en_web_a"]["epochs"] == pytest.approx(1.5)
    de = sources(plan)["de_web_a"]
    assert (de["available"], de["taken"], de["epochs"]) == (1000, 5000, 5.0)
    assert sum(plan["sources"]["taken"]) == sum(p["tokens"] for p in plan["packs"])


def test_appending_a_pack_leaves_earlier_packs_unchanged() -> None:
    sig, lengths = signature({"en_web_a": 500, "de_web_a": 500}, 100)
    phases = [
        {"name": "warmup", "iters": 5, "mixture": "main"},
        {"name": "main", "tokens": 30_000, "mixture": "main"},
    ]
    before = plan_of(config(phases), sig, lengths.__getitem__)
    after = plan_of(
        config([*phases, {"name": "ext", "tokens": 9_000, "mixture": "en"}]), sig, lengths.__getitem__
    )
    assert after["packs"][: len(before["packs"])] == before["packs"]
    assert after["packs"][-1]["iteration_offset"] == before["total_train_iters"]


def test_split_budget_adds_up_exactly() -> None:
    shares = split_budget(1_000_003, [1 / 3, 1 / 3, 1 / 3])
    assert sum(shares) == 1_000_003 and max(shares) - min(shares) <= 1


def test_an_iters_phase_longer_than_a_pack_is_cut_in_iterations() -> None:
    sig, lengths = signature({"en_web_a": 400, "de_web_a": 400}, 100)
    plan = plan_of(config([{"name": "warmup", "iters": 120, "mixture": "main"}]), sig, lengths.__getitem__)
    assert [p["train_iters"] for p in plan["packs"]] == [50, 50, 20]
    assert plan["total_train_iters"] == 120


def test_a_source_without_documents_does_not_break_the_plan() -> None:
    sig, lengths = signature({"en_web_a": 300, "de_web_a": 300, "en_web_empty": 0}, 100)
    plan = plan_of(config([{"name": "main", "tokens": 20_000, "mixture": "main"}]), sig, lengths.__getitem__)
    assert sources(plan)["en_web_empty"]["epochs"] == 0.0
    assert all(s["source"] != "en_web_empty" for p in plan["packs"] for s in p["slices"])


def test_sources_of_different_tokenizers_are_refused() -> None:
    from workflow_scripts.datapacks.planner import check_one_tokenizer

    def entry(name: str, sha: str) -> dict:
        tokenizer = {"tokenizer_sha256": sha, "eod_id": 3, "bos_id": None}
        return {"name": name, "identity": {"tokenizer": tokenizer}}

    check_one_tokenizer([entry("a", "x"), entry("b", "x"), {"name": "byo", "identity": {"tokenizer": None}}])
    with pytest.raises(PlanError, match="different tokenizers"):
        check_one_tokenizer([entry("a", "x"), entry("b", "y")])


def _training_config(**train: object) -> dict:
    defaults = {k: v.get("default") for k, v in schema_entry("", "train")["properties"].items()}
    return {"training": {"model_params": 13e9}, "train": {**defaults, "base_config": "base.yml", **train}}


def test_plan_shows_training_cadence_and_refuses_checkpoints_over_quota() -> None:
    def plan() -> dict:
        sig, lengths = signature({"en_web_a": 2000, "de_web_a": 2000}, 50_000_000)
        phases = [
            {"name": "warmup", "iters": 2000, "mixture": "main"},
            {"name": "U1", "iters": 29640, "mixture": "main"},
        ]
        planned = plan_of(
            config(phases, training=SEED000, max_iters_per_pack=35000), sig, lengths.__getitem__
        )
        packs = [(p["name"], p["phase"], p["train_iters"], p["iteration_offset"]) for p in planned["packs"]]
        assert packs == [("warmup_0", "warmup", 2000, 0), ("U1_1", "U1", 29640, 2000)]
        return planned

    train = {"seconds_per_iter": 17, "checkpoint_hours": 2.125, "time_limit_minutes": 2520, "keep_last": 3}
    planned = plan()
    add_training(planned, _training_config(**train, phase_overrides={"warmup": {"checkpoint_factor": 1750}}))
    warmup, u1 = (p["training"] for p in planned["packs"])
    assert (warmup["checkpoint_factor"], warmup["exit_interval"], warmup["segments"]) == (1750, 8750, 2)
    assert (u1["config"], u1["checkpoint_factor"], u1["exit_interval"], u1["segments"]) == (
        "train/U1_1/U1_1.yml",
        450,
        8550,
        5,
    )
    disk = planned["checkpoint_disk"]
    assert disk["checkpoints_kept"] == 3 and disk["tb_needed"] == 0.182 * 4
    assert "disk needed: 0.728 TB" in "\n".join(training_lines(Plan.from_dict(planned)))
    with pytest.raises(PlanError, match=r"need 0.728 TB \(3 kept \+ 1 being written, 0.182 TB each\), over"):
        add_training(plan(), _training_config(**train, checkpoint_quota_tb=0.5))


def test_validation_is_held_out_of_every_pack_even_when_sources_wrap() -> None:
    sig, lengths = signature({"en_web_a": 100, "en_web_b": 40, "de_web_a": 10}, 100)
    plan = plan_of(
        config(
            [{"name": "main", "tokens": 20_000, "mixture": "main"}],
            max_iters_per_pack=10,
            validation_tokens=250,
        ),
        sig,
        lengths.__getitem__,
    )
    assert [(v["name"], v["tokens"], v["slices"][0]["ranges"]) for v in plan["validation"]] == [
        ("valid_de", 300, [[0, 7, 10]]),  # whole documents from the end of the language's largest source
        ("valid_en", 300, [[0, 97, 100]]),
    ]
    for pack in plan["packs"]:  # de wraps around several times and still never reads documents 7..9
        for s in pack["slices"]:
            held = {"de_web_a": 7, "en_web_a": 97}.get(s["source"])
            assert held is None or all(b <= held for _, _, b in s["ranges"]), (pack["name"], s)
    de = sources(plan)["de_web_a"]
    assert (de["available"], de["held_out"]) == (700, 300) and de["epochs"] > 2
    with pytest.raises(PlanError, match="would leave less than half for training"):
        plan_of(
            config([{"name": "m", "tokens": 1000, "mixture": "main"}], validation_tokens=600),
            sig,
            lengths.__getitem__,
        )


def test_a_20_mb_document_in_a_small_shard_language_still_leaves_a_hold_out() -> None:
    """Small shards: one shard is a single 20 MB document (its own largest source); it is skipped, with a
    note, and the two ordinary shards give the hold-out between them, each keeping half for training. The
    document is longer than a pack may pass its budget by: a mixture that reads it is refused (naming it),
    one that leaves it out plans."""
    rng = np.random.default_rng(7)
    lengths = {
        "en_web_big": np.array([10_485_758], dtype=np.int32),
        "en_web_a": rng.integers(200, 2000, size=400).astype(np.int32),
        "en_web_b": rng.integers(200, 2000, size=380).astype(np.int32),
        "de_web_a": rng.integers(200, 2000, size=800).astype(np.int32),
    }
    sig = [
        {"prefix": n, "name": n, "lang": n[:2], "domain": "web", "tokens": int(v.sum())}
        for n, v in lengths.items()
    ]
    cfg = config([{"name": "main", "tokens": 200_000, "mixture": "main"}], validation_tokens=300_000)
    with pytest.raises(PlanError, match="document 0 of en_web_big, has 10,485,758 tokens"):
        plan_of(cfg, sig, lengths.__getitem__)
    cfg["mixtures"]["main"]["exclude"] = ["en_web_big"]
    plan = plan_of(cfg, sig, lengths.__getitem__)
    valid = {v["lang"]: v for v in plan["validation"]}
    assert [s["source"] for s in valid["de"]["slices"]] == ["de_web_a"]  # as before: the largest source
    en = valid["en"]
    assert [s["source"] for s in en["slices"]] == ["en_web_a", "en_web_b"]
    assert 300_000 <= en["tokens"] < 300_000 + 2000
    first = {}
    for s in en["slices"]:
        ((_, start, stop),) = s["ranges"]
        first[s["source"]] = start
        total = int(lengths[s["source"]].sum())
        assert stop == len(lengths[s["source"]]) and s["tokens"] == int(lengths[s["source"]][start:].sum())
        assert s["tokens"] <= total // 2 and sources(plan)[s["source"]]["held_out"] == s["tokens"]
    assert plan["notes"] == [
        "valid_en: source en_web_big skipped: holding out even its last document (10485758 of its 10485758 "
        "tokens) would leave less than half of it for training; held out from en_web_a, en_web_b instead"
    ]
    for pack in plan["packs"]:  # no pack reads the held-out documents
        for s in pack["slices"]:
            assert all(b <= first.get(s["source"], b) for _, _, b in s["ranges"]), (pack["name"], s)
    assert "## Notes\n\n- valid_en: source en_web_big skipped" in markdown(Plan.from_dict(plan))


def test_a_hold_out_no_source_can_give_is_refused_with_what_would_work() -> None:
    sig, lengths = signature({"en_web_a": 100, "de_web_a": 10}, 100)
    phases = [{"name": "m", "tokens": 1000, "mixture": "main"}]
    with pytest.raises(PlanError) as refused:
        plan_of(config(phases, validation_tokens=600), sig, lengths.__getitem__)
    assert str(refused.value) == (
        "datapacks.validation_tokens 600: language de's 1 source(s) can hold out at most 500 tokens in whole "
        "documents from their ends (more would leave less than half for training): set validation_tokens "
        "to 500 or less, or to 0 to hold out nothing"
    )
    assert plan_of(config(phases, validation_tokens=500), sig, lengths.__getitem__)["validation"]
    sig, lengths = signature({"en_web_a": 100, "de_web_a": 1, "de_web_b": 1}, 100)
    with pytest.raises(
        PlanError, match=r"at most 0 tokens .*: set validation_tokens to 0 to hold out nothing"
    ):
        plan_of(config(phases, validation_tokens=10), sig, lengths.__getitem__)
    assert plan_of(config(phases, validation_tokens=0), sig, lengths.__getitem__)["validation"] == []


def test_a_plan_without_a_time_estimate() -> None:
    """No ``training.model_params``: null hours in the plan, empty cells in plan.csv, one line in plan.md."""
    sig, lengths = signature({"en_web_a": 500, "de_web_a": 500}, 100)
    training = {"seq_length": 128, "global_batch_size": 4, "model_params": None, "gpus": 8}
    plan = plan_of(
        config([{"name": "main", "tokens": 60_000, "mixture": "main"}], training), sig, lengths.__getitem__
    )
    assert [p["wall_hours"] for p in plan["packs"]] == [None, None, None]
    rows = plan_rows(Plan.from_dict(plan))
    assert rows["wall_hours"].isna().all()
    assert rows.to_csv(index=False).splitlines()[1].startswith("main_0,main,main,en,web,49,0,,")
    text = markdown(Plan.from_dict(plan))
    assert text.count(NO_ESTIMATE) == 1 and "wall_hours" not in text
    add_training(plan, {**_training_config(), "training": {}})
    assert "disk needed: unknown (set training.model_params)" in markdown(Plan.from_dict(plan))
