"""One naming module: every name pattern is built and parsed there, and only there."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from workflow_scripts.core import naming

REPO = Path(__file__).resolve().parents[2]


def test_build_and_parse_round_trip() -> None:
    group = naming.group_name("en", "web", "cc")
    shard = naming.shard_name(group, 3)
    assert (group, shard) == ("en_web_cc", "en_web_cc_split_0003")
    assert naming.parse_group(group) == {"lang": "en", "domain": "web", "subdomain": "cc"}
    assert naming.parse_shard(shard + ".jsonl.zst") == {
        "group": "en_web_cc",
        "split": "0003",
        "lang": "en",
        "domain": "web",
        "subdomain": "cc",
    }
    prefix = naming.tokenized_prefix(shard)
    assert prefix == "en_web_cc_split_0003_text_document"
    assert naming.parse_prefix(f"a/b/{prefix}")["shard"] == shard
    counted = naming.counted_name(prefix, 9, 9, 812)
    assert counted == "en_web_cc_split_0003_text_document_dc=9_sc=9_tc=812"
    assert naming.source_name(counted) == naming.source_name(prefix) == shard
    assert naming.slice_name(shard, 2, 0, 4096) == "en_web_cc_split_0003_slice2_0_4096"
    assert naming.pack_name("warmup", 0) == "warmup_0"
    assert naming.shard_name("{group}", "{split}") == "{group}_split_{split}"  # the rules' wildcard form


def test_files_stems_and_groups() -> None:
    assert naming.shard_stem("x/de_news_wire_split_0001.jsonl.gz") == "de_news_wire_split_0001"
    assert naming.shard_suffix(True) == ".jsonl.zst" and naming.shard_suffix(False) == ".jsonl"
    pattern = naming.shard_file_pattern("de_news_wire")
    assert pattern.fullmatch("de_news_wire_split_0001.jsonl")
    assert not pattern.fullmatch("de_news_wire_split_0001.jsonl.tmp")
    assert not pattern.fullmatch("de_news_wirex_split_0001.jsonl")
    assert naming.shard_group("de_news_wire_split_12345.jsonl") == "de_news_wire"
    assert naming.shard_group("any.jsonl") == "any"  # standalone dedup of files not named like shards


@pytest.mark.parametrize(
    ("parse", "bad"),
    [
        (naming.parse_group, "en_web"),
        (naming.parse_group, "EN_web_cc"),
        (naming.parse_shard, "en_web_cc_0001"),
        (naming.parse_prefix, "en_web_split_0001_text_document"),
        (naming.parse_prefix, "en_web_cc_split_0001_text_document.bin"),
    ],
)
def test_bad_names_are_user_errors(parse, bad: str) -> None:
    with pytest.raises(naming.BadName, match="does not match"):
        parse(bad)
    with pytest.raises(naming.BadName, match=r"lang 'e-n' must match \[a-z0-9\]\+"):
        naming.check_part("lang", "e-n", "here")


def test_wildcards_match_the_names_they_stand_for() -> None:
    examples = {
        "group": "en_web_cc",
        "batch": "12",
        "shard": "en_web_cc_split_0003",
        "pack": "warmup_0",
        "mixture": "main",
    }
    for key, value in examples.items():
        assert re.fullmatch(naming.WILDCARDS[key], value), key
    assert not re.fullmatch(naming.WILDCARDS["group"], "en_web_cc_split_0003")


# f-strings or regexes that build or parse one of the names, outside the naming module
BUILDERS = re.compile(r"""f["'][^"']*(_split_\{|\}_document|_\{\w+\}_document|_dc=\{|_slice\{)|_split_\\d""")


def test_each_name_pattern_lives_in_the_naming_module_only() -> None:
    files = [REPO / "Snakefile", *(REPO / "rules").glob("*.smk"), *(REPO / "workflow_scripts").rglob("*.py")]
    offenders = [
        f"{path.relative_to(REPO)}:{n}: {line.strip()}"
        for path in files
        if path.name != "naming.py"
        for n, line in enumerate(path.read_text().splitlines(), start=1)
        if BUILDERS.search(line)
    ]
    assert offenders == []
    assert BUILDERS.search((REPO / "workflow_scripts" / "core" / "naming.py").read_text())
