"""Typed settings: defaults only in config/schema.yaml, options derived from the dataclasses, round trips."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from workflow_scripts.core import settings
from workflow_scripts.datapacks.settings import DatapacksSettings, Phase, PlanSettings, TrainingSettings
from workflow_scripts.dedup.settings import DedupSettings
from workflow_scripts.ingest.settings import IngestSettings
from workflow_scripts.tokens.settings import TokenizerSettings, TokenizeSettings

STAGE_SETTINGS = [IngestSettings, DedupSettings, TokenizerSettings, TokenizeSettings]
ALL_SETTINGS = [*STAGE_SETTINGS, TrainingSettings, Phase, DatapacksSettings]
# Keys that shape the DAG (what runs), not what a command computes: the rules read them.
WORKFLOW_KEYS = {
    "ingest": set(),
    "dedup": {"enabled", "band_groups", "partitions", "threads"},
    "tokenizer": {"model", "type", "merges", "kind"},
    "tokenize": set(),
    "training": set(),
    "datapacks": {"phases"},
}


def _entry(field: dataclasses.Field) -> dict:
    return settings.schema_entry(field.metadata["section"], field.metadata["key"])


@pytest.mark.parametrize("cls", ALL_SETTINGS, ids=lambda c: c.__name__)
def test_every_default_is_the_schemas(cls: type) -> None:
    for field in dataclasses.fields(cls):
        if "section" not in field.metadata:
            continue
        expected = _entry(field).get("default")
        default = field.default if field.default is not dataclasses.MISSING else field.default_factory()
        if isinstance(expected, list):
            expected = tuple(expected)
        assert default == expected, f"{cls.__name__}.{field.name}: {default!r} != schema {expected!r}"


def test_every_config_setting_reaches_a_settings_field() -> None:
    covered: dict[str, set[str]] = {}
    for cls in ALL_SETTINGS:
        for field in dataclasses.fields(cls):
            if "section" in field.metadata:
                covered.setdefault(field.metadata["section"], set()).add(field.metadata["key"])
    for section, workflow_keys in WORKFLOW_KEYS.items():
        keys = set(settings.schema()["properties"][section]["properties"])
        assert keys - workflow_keys == covered.get(section, set()), section


@pytest.mark.parametrize("cls", STAGE_SETTINGS, ids=lambda c: c.__name__)
def test_options_are_derived_and_round_trip(cls: type) -> None:
    parser = argparse.ArgumentParser()
    settings.add_arguments(parser, cls)
    group = ["--lang", "en", "--domain", "web", "--subdomain", "cc"] if cls is IngestSettings else []
    defaults = settings.from_args(cls, parser.parse_args(group))
    assert defaults == cls(**{k: getattr(defaults, k) for k in ("lang", "domain", "subdomain") if group})
    flags = {a.dest for a in parser._actions if a.dest != "help"}
    assert flags == {f.name for f in dataclasses.fields(cls)}
    changed = {
        DedupSettings: {"threshold": 0.7, "char_langs": ("zh",), "exact": False, "scope": "lang"},
        IngestSettings: {"shard_size": 5, "compress": True, "text_key": ("a", "b"), "lang": "de"},
        TokenizerSettings: {"vocab_size": 999, "control_symbols": ()},
        TokenizeSettings: {"mode": "sft", "append_eod": False, "sft_markers": {"<<a>>": "<a>"}},
    }[cls]
    custom = dataclasses.replace(defaults, **changed)
    assert settings.from_args(cls, parser.parse_args(settings.to_args(custom))) == custom


def test_config_sections_build_settings() -> None:
    dedup = settings.from_config(DedupSettings, {"threshold": 0.9, "char_langs": ["zh", "ja"]}, seed=7)
    assert (dedup.threshold, dedup.char_langs, dedup.seed, dedup.num_perm) == (0.9, ("ja", "zh"), 7, 128)
    plan = PlanSettings.from_config({"datapacks": {"phases": [{"name": "a", "mixture": "m", "iters": 3}]}})
    assert plan.datapacks.phases == (Phase(name="a", mixture="m", iters=3),)
    assert plan.training == TrainingSettings() and plan.seed == settings.schema_entry("", "seed")["default"]


def test_invalid_settings_are_user_errors() -> None:
    from workflow_scripts.core.cli import UserError

    with pytest.raises(UserError, match="threshold"):
        DedupSettings(threshold=1.5)
    with pytest.raises(UserError, match="give --lang"):
        IngestSettings(lang="en")
