"""The embedded sample: deterministic, multilingual, vendor-like, with planted duplicates and bad records."""

import hashlib
import unicodedata
from pathlib import Path

import orjson
import pytest

from workflow_scripts.core.fsio import open_binary
from workflow_scripts.ingest.sample import generate, near_duplicate, plan


@pytest.fixture(scope="module")
def sample_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("sample")
    generate(out, seed=7, scale=0.5)
    return out


def digest(d: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.iterdir())}


def test_same_seed_same_bytes_other_seed_other_bytes(sample_dir: Path, tmp_path: Path) -> None:
    generate(tmp_path / "again", seed=7, scale=0.5)
    generate(tmp_path / "other", seed=8, scale=0.5)
    assert digest(tmp_path / "again") == digest(sample_dir)
    assert (
        digest(tmp_path / "other")["de_web_cc_part-00001.jsonl"]
        != digest(sample_dir)["de_web_cc_part-00001.jsonl"]
    )


def test_languages_domains_formats_and_sizes() -> None:
    files = plan()
    assert {f.lang for f in files} >= {"en", "de", "fr", "ru", "zh", "ja"}
    assert len({f.domain for f in files}) >= 4
    assert {f.ext for f in files} == {"jsonl", "jsonl.gz", "jsonl.zst", "txt", "parquet"}
    sizes = sorted(f.docs for f in files)
    assert sizes[-1] >= 10 * sizes[0], "a vendor delivery mixes small and large shards"


def read_records(path: Path) -> list[dict]:
    """The well-formed records of a jsonl file (the sample plants one malformed line)."""
    records = []
    with open_binary(path) as fh:
        for line in fh:
            try:
                records.append(orjson.loads(line))
            except orjson.JSONDecodeError:
                continue
    return records


def test_text_is_language_in_its_script(sample_dir: Path) -> None:
    def share(text: str, pred) -> float:
        letters = [c for c in text if c.isalpha()]
        return sum(map(pred, letters)) / len(letters)

    ru = read_records(sample_dir / "ru_news_wire_part-00001.jsonl")
    zh = read_records(sample_dir / "zh_wiki_zhwiki_part-00001.jsonl")
    en = read_records(sample_dir / "fr_books_pd_part-00001.jsonl")
    assert share(ru[0]["text"], lambda c: "CYRILLIC" in unicodedata.name(c)) > 0.9
    assert share(zh[0]["text"], lambda c: "CJK" in unicodedata.name(c)) > 0.9
    words = en[0]["text"].split()
    assert len(words) > 100 and len(set(words)) > 50, "documents are long, with a real vocabulary"


def test_manifest_lists_planted_items(sample_dir: Path) -> None:
    manifest = orjson.loads((sample_dir / "manifest.json").read_bytes())
    assert {b["reason"] for b in manifest["bad_records"]} == {"malformed_json", "missing_text", "empty_text"}
    for bad in manifest["bad_records"]:
        lines = (sample_dir / bad["file"]).read_bytes().split(b"\n")
        assert b"bad-" in lines[bad["line"] - 1], "manifest line numbers are 1-based and exact"
    assert manifest["exact_duplicates"] and manifest["near_duplicates"]
    for dup in [d for d in manifest["exact_duplicates"] if ".jsonl" in d["file"]][:5]:
        target = {r["id"]: r for r in read_records(sample_dir / dup["file"]) if "text" in r}
        assert dup["id"] in target


@pytest.mark.parametrize("rate", [0.03, 0.1])
def test_near_duplicate_edits_at_rate(rate: float) -> None:
    """The share of edited words (deleted, replaced or doubled, by an alignment) is the rate asked for."""
    import difflib
    import random

    words = [f"w{i}" for i in range(4000)]
    for seed in range(3):
        edited = near_duplicate(" ".join(words), rate, random.Random(seed), "en").split()
        ops = difflib.SequenceMatcher(a=words, b=edited, autojunk=False).get_opcodes()
        edits = sum(max(i2 - i1, j2 - j1) for tag, i1, i2, j1, j2 in ops if tag != "equal")
        assert 0.7 * rate <= edits / len(words) <= 1.3 * rate, (seed, edits)
    assert near_duplicate("一二三四五六七八九十" * 50, 0.05, random.Random(1), "zh").count(" ") == 0
