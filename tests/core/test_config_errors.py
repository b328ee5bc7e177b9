"""Configuration errors in one line naming the key (workflow_scripts.core.config_errors)."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest

from workflow_scripts.core.config_errors import explain
from workflow_scripts.core.settings import schema


def error_of(config: dict[str, Any]) -> str:
    """The explanation of the error jsonschema raises for ``config`` against the project's schema."""
    with pytest.raises(jsonschema.ValidationError) as caught:
        jsonschema.validate(config, schema(), cls=jsonschema.Draft202012Validator)
    return explain(caught.value)


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (
            {"ingset": {}},
            "config: unknown key ingset (did you mean ingest?); config/schema.yaml lists every key",
        ),
        (
            {"ingest": {"shard_sise": 3}},
            "config: unknown key ingest.shard_sise (did you mean ingest.shard_size?)",
        ),
        ({"zzz": 1}, "config: unknown key zzz; config/schema.yaml"),
        ({"ingest": {"shard_size": "abc"}}, "config: ingest.shard_size: 'abc' is not of type 'integer'"),
        (
            {"datapacks": {"phases": [{"name": "a", "mixture": "m"}]}},
            "config: datapacks.phases[0]: {'name': 'a', 'mixture': 'm'} needs exactly one of"
            " iters, tokens, fraction",
        ),
        ({"sources": [{"name": "x"}]}, "config: sources[0]: 'paths' is a required property"),
    ],
)
def test_one_line_names_the_key(config: dict[str, Any], message: str) -> None:
    text = error_of(config)
    assert text.startswith(message) and "\n" not in text


def test_long_values_are_cut() -> None:
    text = error_of({"sources": [{"name": "x", "paths": "y" * 500}]})
    assert len(text) < 250 and "..." in text
