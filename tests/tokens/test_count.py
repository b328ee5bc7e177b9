"""COUNT stage: counts from the index, count-carrying relative links, the data signature."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.utils import build_dataset
from workflow_scripts.cli import main as snakepack
from workflow_scripts.core import naming
from workflow_scripts.core.fsio import read_json
from workflow_scripts.core.indexed_dataset import IndexedDataset
from workflow_scripts.tokens import count


@pytest.fixture
def tokenized(tmp_path: Path) -> list[str]:
    root = tmp_path / "results" / "tokenized"
    return [
        build_dataset(root / "en_web_cc_split_0002_text_document", [[[1, 2, 3]], [[4, 5]]]),
        build_dataset(root / "de_news_wire_split_0001_text_document", [[[1], [2, 3]], [], [[4, 5, 6, 7]]]),
    ]


def test_name_parsing() -> None:
    assert count.parse_name("a/b/zh_wiki_zhwiki_split_0012_text_document") == {
        "lang": "zh",
        "domain": "wiki",
        "subdomain": "zhwiki",
        "split": "0012",
        "key": "text",
    }
    for bad in (
        "en_web_split_0001_text_document",
        "en_web_cc_split_0001_text_document.bin",
        "en_web_cc_0001",
    ):
        with pytest.raises(ValueError, match="does not match"):
            count.parse_name(bad)


def test_counts_from_index(tokenized: list[str]) -> None:
    entry = count.count_prefix(tokenized[1])
    # 3 documents (one empty), 3 sequences, 7 tokens
    assert (entry["documents"], entry["sequences"], entry["tokens"]) == (3, 3, 7)
    assert entry["name"] == "de_news_wire_split_0001_text_document_dc=3_sc=3_tc=7"
    assert naming.counted_name("x", 1, 2, 3) == "x_dc=1_sc=2_tc=3"


def test_cli_links_and_signature(tokenized: list[str], tmp_path: Path) -> None:
    links = tmp_path / "results" / "counted"
    signature = tmp_path / "results" / "signature.json"
    argv = ["--prefixes", *tokenized, "--links-dir", str(links), "--signature", str(signature)]
    assert count.main(argv) == 0
    sig = read_json(signature)
    names = [e["name"] for e in sig["prefixes"]]
    assert names == [
        "de_news_wire_split_0001_text_document_dc=3_sc=3_tc=7",
        "en_web_cc_split_0002_text_document_dc=2_sc=2_tc=5",
    ]
    de = sig["prefixes"][0]
    assert {
        k: de[k] for k in ("lang", "domain", "subdomain", "split", "documents", "sequences", "tokens")
    } == {
        "lang": "de",
        "domain": "news",
        "subdomain": "wire",
        "split": "0001",
        "documents": 3,
        "sequences": 3,
        "tokens": 7,
    }
    assert de["prefix"] == os.path.join(str(links), de["name"]) and de["source"] == tokenized[1]
    assert sig["totals"] == {"prefixes": 2, "documents": 5, "sequences": 5, "tokens": 12}
    assert sorted(p.name for p in links.iterdir()) == sorted(
        f"{n}{ext}" for n in names for ext in (".bin", ".idx")
    )
    for e in sig["prefixes"]:
        for ext in (".bin", ".idx"):
            link = Path(e["prefix"] + ext)
            assert link.is_symlink() and not os.path.isabs(os.readlink(link))
            assert link.resolve() == Path(e["source"] + ext).resolve()
        assert IndexedDataset(e["prefix"]).num_tokens == e["tokens"]


def test_links_survive_moving_the_tree_and_rebuilds_drop_stale_links(
    tokenized: list[str], tmp_path: Path
) -> None:
    links = tmp_path / "results" / "counted"
    sig = count.build_signature(tokenized, str(links))
    count.make_links(sig["prefixes"], str(links))
    moved = tmp_path / "moved"
    shutil.copytree(tmp_path / "results", moved, symlinks=True)
    name = sig["prefixes"][1]["name"]
    assert IndexedDataset(moved / "counted" / name).document(1).tolist() == [4, 5]

    # The English shard is re-tokenized with one more document: the old count name must disappear.
    build_dataset(Path(tokenized[0]), [[[1, 2, 3]], [[4, 5]], [[6]]])
    sig = count.build_signature(tokenized, str(links))
    count.make_links(sig["prefixes"], str(links))
    assert sorted(p.name for p in links.iterdir() if p.name.startswith("en_")) == [
        "en_web_cc_split_0002_text_document_dc=3_sc=3_tc=6.bin",
        "en_web_cc_split_0002_text_document_dc=3_sc=3_tc=6.idx",
    ]
    assert sorted(p.name for p in links.parent.iterdir()) == ["counted", "tokenized"]  # no temporary left


def test_errors(tokenized: list[str], tmp_path: Path) -> None:
    copy = tmp_path / "other" / "en_web_cc_split_0002_text_document"
    copy.parent.mkdir()
    for ext in (".bin", ".idx"):
        shutil.copy(tokenized[0] + ext, str(copy) + ext)
    with pytest.raises(ValueError, match="share a name"):
        count.build_signature([tokenized[0], str(copy)], str(tmp_path / "links"))
    sig = count.build_signature(tokenized, str(tmp_path / "results" / "tokenized"))
    with pytest.raises(ValueError, match="not links"):  # --links-dir pointing at the data
        count.make_links(sig["prefixes"], str(tmp_path / "results" / "tokenized"))
    assert all(Path(p + ".bin").is_file() for p in tokenized)
    Path(tokenized[1] + ".bin").write_bytes(b"\0")  # truncated data
    argv = [
        "--prefixes",
        *tokenized,
        "--links-dir",
        str(tmp_path / "l"),
        "--signature",
        str(tmp_path / "s.json"),
    ]
    assert snakepack(["count", *argv]) == 2
    assert not (tmp_path / "s.json").exists() and not (tmp_path / "l").exists()
