"""Tests of the ingest stage (workflow_scripts.ingest.shards): formats, rejects, grouping, sharding, CLI."""

from __future__ import annotations

import collections
import gzip
import itertools
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from tests.utils import shard_records, write_jsonl, write_lines
from workflow_scripts.core.fsio import read_json
from workflow_scripts.core.stage_stats import UnbalancedStats
from workflow_scripts.ingest import shards as ingest_mod
from workflow_scripts.ingest.shards import (
    REJECT_REASONS,
    IngestError,
    IngestSettings,
    RejectedRecordError,
    check_counts,
    group_files,
    ingest,
    parse_name,
)

ROOT = Path(__file__).resolve().parents[2]
REGEX = r"^(?P<lang>[a-z]{2})_(?P<domain>[a-z]+)_(?P<subdomain>[a-z0-9]+)_part"
TEXTS = ["Hello world", "Grüße aus Köln", "Привет, мир", "東京は晴れ", "مرحبا بالعالم"]


def options(**kw: Any) -> IngestSettings:
    group = {} if "name_regex" in kw else {"lang": "en", "domain": "web", "subdomain": "cc"}
    return IngestSettings(**{"shard_size": 1 << 20, **group, **kw})


def quarantine(out: Path) -> list[tuple[str, int, str]]:
    lines = (out / "quarantine.jsonl").read_bytes().splitlines()
    return [(e["file"], e["line"], e["reason"]) for e in map(orjson.loads, lines)]


def make_input(directory: Path, fmt: str, texts: list[str]) -> Path:
    directory.mkdir(exist_ok=True)
    path = directory / f"en_web_cc_part-1.{fmt}"
    if fmt == "parquet":
        pq.write_table(pa.table({"text": texts}), path)
        return path
    if fmt == "txt":
        return write_lines(path, [t.encode() for t in texts])
    return write_jsonl(path, [{"text": t} for t in texts])


# --- formats ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["jsonl", "jsonl.gz", "jsonl.zst", "txt", "parquet"])
def test_every_format_gives_the_same_records(tmp_path: Path, fmt: str) -> None:
    path = make_input(tmp_path, fmt, TEXTS)
    stats = ingest([path], tmp_path / "out", options())
    source = path.name
    expected = [
        {
            "id": f"{source}:{i}",
            "text": text,
            "lang": "en",
            "domain": "web",
            "subdomain": "cc",
            "source": source,
            "line": i,
            "meta": {},
        }
        for i, text in enumerate(TEXTS, 1)
    ]
    assert shard_records(tmp_path / "out") == expected
    assert stats["inputs"][0]["format"] == fmt
    assert (stats["docs_in"], stats["docs_out"]) == (5, 5)


def test_format_inference_and_override(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "vendor.ndjson", [{"text": "a doc"}])
    with pytest.raises(IngestError, match=r"vendor\.ndjson: cannot infer the format"):
        ingest([path], tmp_path / "out", options())
    assert ingest([path], tmp_path / "out", options(format="jsonl"))["docs_out"] == 1
    with pytest.raises(IngestError, match=r"format 'jsonl\.gz' does not match"):
        ingest([path], tmp_path / "out", options(format="jsonl.gz"))


def test_parquet_rows_numbered_across_batches_and_extra_columns_kept(tmp_path: Path) -> None:
    n = 2500
    table = pa.table({"id": list(range(n)), "text": [f"row {i}" for i in range(n)], "score": [0.5] * n})
    path = tmp_path / "en_web_cc_part-1.parquet"
    pq.write_table(table, path, row_group_size=1000)
    ingest([path], tmp_path / "out", options())
    records = shard_records(tmp_path / "out")
    assert [r["line"] for r in records] == list(range(1, n + 1))
    assert records[1234] | {"source": None} == {
        "id": "1234",
        "text": "row 1234",
        "lang": "en",
        "domain": "web",
        "subdomain": "cc",
        "source": None,
        "line": 1235,
        "meta": {"score": 0.5},
    }


# --- rejects and counts ----------------------------------------------------------------------------------


def test_every_reject_reason_is_quarantined_and_counted(tmp_path: Path) -> None:
    jsonl = write_lines(
        tmp_path / "en_web_cc_part-1.jsonl",
        [
            b'{"id": "g1", "text": "good one"}',
            b'{"text": "cut off',
            b'{"text": "\xff\xfe"}',
            b"[1, 2]",
            b'{"body": "under another key"}',
            b'{"text": 42}',
            b'{"id": {"nested": 1}, "text": "bad id"}',
            b'{"text": " \\n\\t "}',
            b'{"text": "hi"}',
            b'{"text": "good two"}',
            b"   ",
        ],
    )
    txt = write_lines(tmp_path / "en_web_cc_part-2.txt", [b"good three", b"\xc3\x28 broken", b"   "])
    stats = ingest([txt, jsonl], tmp_path / "out", options(min_chars=3))
    expected = [
        ("en_web_cc_part-1.jsonl", 2, "malformed_json"),
        ("en_web_cc_part-1.jsonl", 3, "invalid_utf8"),
        ("en_web_cc_part-1.jsonl", 4, "not_object"),
        ("en_web_cc_part-1.jsonl", 5, "missing_text"),
        ("en_web_cc_part-1.jsonl", 6, "non_string_text"),
        ("en_web_cc_part-1.jsonl", 7, "invalid_id"),
        ("en_web_cc_part-1.jsonl", 8, "empty_text"),
        ("en_web_cc_part-1.jsonl", 9, "too_short"),
        ("en_web_cc_part-1.jsonl", 11, "blank_line"),
        ("en_web_cc_part-2.txt", 2, "invalid_utf8"),
        ("en_web_cc_part-2.txt", 3, "empty_text"),
    ]
    assert quarantine(tmp_path / "out") == expected
    assert {reason for _, _, reason in expected} | {"unreadable_rest"} == set(REJECT_REASONS)  # test_readers
    assert stats["rejected"] == dict(collections.Counter(r for _, _, r in expected), unreadable_rest=0)
    assert (stats["docs_in"], stats["docs_out"]) == (14, 3)
    assert stats["docs_in"] == stats["docs_out"] + sum(stats["rejected"].values())
    assert [r["text"] for r in shard_records(tmp_path / "out")] == ["good one", "good two", "good three"]
    first = orjson.loads((tmp_path / "out" / "quarantine.jsonl").read_bytes().splitlines()[0])
    assert first["raw"] == '{"text": "cut off\n'
    assert orjson.loads((tmp_path / "out" / "quarantine.jsonl").read_bytes().splitlines()[1])["raw"] == (
        '{"text": "\\xff\\xfe"}\n'
    )


def test_parquet_rejects_and_truncated_raw(tmp_path: Path) -> None:
    path = tmp_path / "en_web_cc_part-1.parquet"
    pq.write_table(pa.table({"text": ["fine", None, "x" * 5000]}), path)
    ingest([path], tmp_path / "out", options(min_words=2))
    assert quarantine(tmp_path / "out") == [
        (path.name, 1, "too_short"),
        (path.name, 2, "non_string_text"),
        (path.name, 3, "too_short"),
    ]
    last = orjson.loads((tmp_path / "out" / "quarantine.jsonl").read_bytes().splitlines()[-1])
    assert len(last["raw"]) == ingest_mod.RAW_PREVIEW_BYTES
    assert last["raw"].startswith('{"text":"xxx')


def test_check_counts_raises_on_mismatch() -> None:
    good = {"docs_in": 5, "docs_out": 3, "rejected": {"too_short": 2}, "shards": [{"docs": 3}]}
    check_counts(good)
    with pytest.raises(UnbalancedStats, match=r"docs_in 5 != docs_out 3 \+ rejected 1"):
        check_counts(good | {"rejected": {"too_short": 1}})
    with pytest.raises(UnbalancedStats, match=r"2 docs in shards != docs_out 3"):
        check_counts(good | {"shards": [{"docs": 2}]})


def test_strict_mode_names_file_line_and_reason_and_leaves_nothing(tmp_path: Path) -> None:
    lines = [orjson.dumps({"text": f"doc {i}"}) for i in range(1, 5)] + [b"{oops"]
    path = write_lines(tmp_path / "en_web_cc_part-1.jsonl", lines)
    out = tmp_path / "out"
    with pytest.raises(RejectedRecordError, match=rf"^{path}:5: rejected record \(malformed_json\)$") as err:
        ingest([path], out, options(strict=True, shard_size=10))
    assert (err.value.line, err.value.reason) == (5, "malformed_json")
    assert list(out.iterdir()) == []


def test_no_final_file_before_the_run_succeeds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_jsonl(tmp_path / "en_web_cc_part-1.jsonl", [{"text": f"doc {i}"} for i in range(40)])
    out, listing = tmp_path / "out", []
    real = ingest_mod.iter_units

    def spy(path: str, fmt: str) -> Any:
        for i, unit in enumerate(real(path, fmt)):
            if i == 30:
                listing.extend(p.name for p in out.iterdir())
            yield unit

    monkeypatch.setattr(ingest_mod, "iter_units", spy)
    stats = ingest([path], out, options(shard_size=300))
    assert len(listing) > 3 and all(name.startswith(".") for name in listing)
    names = sorted(p.name for p in out.iterdir())
    assert names == sorted([s["name"] for s in stats["shards"]] + ["quarantine.jsonl", "stats.json"])


# --- names and groups ------------------------------------------------------------------------------------


def test_group_files_from_names() -> None:
    paths = ["b/en_web_cc_part-2.jsonl", "a/de_news_wire_part-1.txt", "a/en_web_cc_part-1.parquet"]
    assert group_files(paths, REGEX) == {
        "de_news_wire": ["a/de_news_wire_part-1.txt"],
        "en_web_cc": ["a/en_web_cc_part-1.parquet", "b/en_web_cc_part-2.jsonl"],
    }
    assert parse_name("x/fr_wiki_frwiki_part-9.jsonl", REGEX) == ("fr", "wiki", "frwiki")


def test_name_errors() -> None:
    with pytest.raises(IngestError, match=r"raw/README\.md: file name 'README\.md' does not match --name-re"):
        group_files(["raw/en_web_cc_part-1.jsonl", "raw/README.md"], REGEX)
    with pytest.raises(IngestError, match="lacks the named group"):
        group_files(["en_web_cc_part-1.jsonl"], r"(?P<lang>\w+)_(?P<domain>\w+)")
    with pytest.raises(IngestError, match=r"subdomain 'c_c' must match"):
        parse_name("en_web_c_c_part-1.jsonl", r"^(?P<lang>en)_(?P<domain>web)_(?P<subdomain>.+)_part")


def test_ingest_with_name_regex_and_mixed_groups(tmp_path: Path) -> None:
    a = write_jsonl(tmp_path / "de_news_wire_part-1.jsonl", [{"text": "Nachricht"}])
    b = write_jsonl(tmp_path / "de_news_wire_part-2.jsonl", [{"text": "Meldung"}])
    stats = ingest([b, a], tmp_path / "out", options(name_regex=REGEX))
    assert [s["name"] for s in stats["shards"]] == ["de_news_wire_split_0000.jsonl"]
    assert {(r["lang"], r["domain"], r["subdomain"]) for r in shard_records(tmp_path / "out")} == {
        ("de", "news", "wire")
    }
    other = write_jsonl(tmp_path / "de_web_cc_part-1.jsonl", [{"text": "Seite"}])
    with pytest.raises(IngestError, match=r"de_web_cc_part-1\.jsonl: group de_web_cc differs from de_news"):
        ingest([a, other], tmp_path / "out2", options(name_regex=REGEX))


def test_option_and_input_errors(tmp_path: Path) -> None:
    with pytest.raises(IngestError, match="--name-regex excludes"):
        IngestSettings(shard_size=10, lang="en", name_regex=REGEX)
    with pytest.raises(IngestError, match="give --lang, --domain and --subdomain"):
        IngestSettings(shard_size=10, lang="en", domain="web")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = write_jsonl(tmp_path / "a" / "en_web_cc_part-1.jsonl", [{"text": "x"}])
    b = write_jsonl(tmp_path / "b" / "en_web_cc_part-1.jsonl", [{"text": "y"}])
    with pytest.raises(IngestError, match="must be unique"):
        ingest([a, b], tmp_path / "out", options())
    with pytest.raises(IngestError, match=r"options: lang 'EN' must match"):
        ingest([a], tmp_path / "out", options(lang="EN"))
    with pytest.raises(IngestError, match=r"not found: .*nope\.jsonl"):
        ingest([a, tmp_path / "nope.jsonl"], tmp_path / "out", options())
    cut = tmp_path / "en_web_cc_part-2.jsonl.gz"
    cut.write_bytes(gzip.compress(b'{"text": "x"}\n' * 100)[:20])
    with pytest.raises(IngestError, match=r"part-2\.jsonl\.gz: cannot read as jsonl\.gz at byte 20 "):
        ingest([a, cut], tmp_path / "out", options(strict=True))
    assert not (tmp_path / "out").exists() or list((tmp_path / "out").iterdir()) == []


# --- records ---------------------------------------------------------------------------------------------


def test_vendor_id_kept_else_file_and_line(tmp_path: Path) -> None:
    records = [{"id": "v-1", "text": "a"}, {"id": 7, "text": "b"}, {"text": "c"}, {"id": None, "text": "d"}]
    path = write_jsonl(tmp_path / "en_web_cc_part-1.jsonl", [*records, {"id": "", "text": "e"}])
    ingest([path], tmp_path / "out", options())
    ids = [r["id"] for r in shard_records(tmp_path / "out")]
    assert ids == ["v-1", "7", f"{path.name}:3", f"{path.name}:4", f"{path.name}:5"]
    path = write_jsonl(tmp_path / "en_web_cc_part-2.jsonl", [{"doc_id": "d-9", "id": "other", "text": "a"}])
    ingest([path], tmp_path / "out2", options(id_key="doc_id"))
    assert [(r["id"], r["meta"]) for r in shard_records(tmp_path / "out2")] == [("d-9", {"id": "other"})]


def test_several_text_keys_joined_and_meta_kept(tmp_path: Path) -> None:
    records = [
        {"title": "Title", "body": "Body text", "url": "https://x.org", "tags": ["a"]},
        {"body": "Only a body", "url": "https://y.org"},
        {"title": "   ", "body": "Blank title"},
    ]
    path = write_jsonl(tmp_path / "en_web_cc_part-1.jsonl", records)
    ingest([path], tmp_path / "out", options(text_key=("title", "body")))
    got = [(r["text"], r["meta"]) for r in shard_records(tmp_path / "out")]
    assert got == [
        ("Title\n\nBody text", {"url": "https://x.org", "tags": ["a"]}),
        ("Only a body", {"url": "https://y.org"}),
        ("Blank title", {}),
    ]


def test_nfc_on_and_off(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "en_web_cc_part-1.jsonl", [{"text": "Cafe\u0301 cre\u0300me"}])
    ingest([path], tmp_path / "on", options())
    ingest([path], tmp_path / "off", options(nfc=False))
    assert shard_records(tmp_path / "on")[0]["text"] == "Caf\u00e9 cr\u00e8me"
    assert shard_records(tmp_path / "off")[0]["text"] == "Cafe\u0301 cre\u0300me"


@pytest.mark.parametrize(
    ("kw", "kept"),
    [({"min_chars": 5}, ["one two three", " abcde "]), ({"min_words": 3}, ["one two three"])],
)
def test_min_chars_and_min_words(tmp_path: Path, kw: dict[str, int], kept: list[str]) -> None:
    texts = ["one two three", "a b", "  abcd  ", " abcde "]
    path = write_jsonl(tmp_path / "en_web_cc_part-1.jsonl", [{"text": t} for t in texts])
    stats = ingest([path], tmp_path / "out", options(**kw))
    assert [r["text"] for r in shard_records(tmp_path / "out")] == kept
    assert stats["rejected"]["too_short"] == 4 - len(kept)


# --- shards ----------------------------------------------------------------------------------------------


def test_big_input_split_at_document_boundaries_near_target(tmp_path: Path) -> None:
    texts = [("w" * (20 + (i * 37) % 300)) for i in range(200)] + ["big " * 600]
    path = write_jsonl(tmp_path / "en_web_cc_part-1.jsonl", [{"text": t} for t in texts])
    target = 2000
    stats = ingest([path], tmp_path / "out", options(shard_size=target))
    shards = stats["shards"]
    assert [s["name"] for s in shards] == [f"en_web_cc_split_{i:04d}.jsonl" for i in range(len(shards))]
    assert len(shards) > 10
    for shard, following in itertools.pairwise(shards):
        lines = (tmp_path / "out" / following["name"]).read_bytes().splitlines(keepends=True)
        assert shard["bytes"] <= target
        assert shard["bytes"] + len(lines[0]) > target  # the next record did not fit
    assert shards[-1]["docs"] == 1 and shards[-1]["bytes"] > target  # oversized doc gets its own shard
    for shard in shards:
        assert (tmp_path / "out" / shard["name"]).stat().st_size == shard["bytes"]
    assert [r["text"] for r in shard_records(tmp_path / "out")] == texts
    assert sum(s["docs"] for s in shards) == 201


def test_small_inputs_concatenated_in_sorted_order(tmp_path: Path) -> None:
    paths = [
        write_jsonl(tmp_path / f"en_web_cc_part-{i}.jsonl", [{"text": f"{i}a"}, {"text": f"{i}b"}])
        for i in (3, 1, 2)
    ]
    stats = ingest(paths, tmp_path / "out", options())
    assert [(s["name"], s["docs"]) for s in stats["shards"]] == [("en_web_cc_split_0000.jsonl", 6)]
    assert [r["text"] for r in shard_records(tmp_path / "out")] == ["1a", "1b", "2a", "2b", "3a", "3b"]
    assert [i["path"] for i in stats["inputs"]] == sorted(map(str, paths))
    assert stats["files"] == 3 and stats["bytes_in"] == sum(p.stat().st_size for p in paths)


def test_zst_shards_hold_the_same_records(tmp_path: Path) -> None:
    path = make_input(tmp_path, "jsonl", TEXTS * 20)
    plain = ingest([path], tmp_path / "plain", options(shard_size=500))
    packed = ingest([path], tmp_path / "zst", options(shard_size=500, compress=True))
    assert [s["name"] for s in packed["shards"]] == [s["name"] + ".zst" for s in plain["shards"]]
    assert [s["docs"] for s in packed["shards"]] == [s["docs"] for s in plain["shards"]]
    assert shard_records(tmp_path / "zst") == shard_records(tmp_path / "plain")


def test_rerun_is_byte_identical_and_removes_stale_shards(tmp_path: Path) -> None:
    inputs = [make_input(tmp_path / d, fmt, TEXTS * 10) for d, fmt in [("a", "jsonl.gz"), ("b", "parquet")]]
    inputs.append(write_lines(tmp_path / "en_web_cc_part-9.jsonl", [b"{bad", b'{"text": "Cafe\\u0301"}']))

    def snapshot(out: Path) -> dict[str, bytes]:
        """Every file's bytes; the stats without their run figures (seconds, throughput, peak RSS)."""
        files = {p.name: p.read_bytes() for p in sorted(out.iterdir())}
        stats = orjson.loads(files.pop("stats.json"))
        assert set(stats.pop("run")) == {"seconds", "mb_per_s", "docs_per_s", "peak_rss_mb"}
        return {**files, "stats.json": orjson.dumps(stats)}

    ingest(inputs, tmp_path / "one", options(shard_size=400))
    ingest(inputs[::-1], tmp_path / "two", options(shard_size=400))
    first = snapshot(tmp_path / "one")
    assert len(first) > 5 and first == snapshot(tmp_path / "two")
    ingest(inputs, tmp_path / "one", options(shard_size=400))
    assert snapshot(tmp_path / "one") == first
    stats = ingest(inputs, tmp_path / "one", options(shard_size=1 << 20))
    assert sorted(p.name for p in (tmp_path / "one").iterdir()) == [
        "en_web_cc_split_0000.jsonl",
        "quarantine.jsonl",
        "stats.json",
    ]
    assert read_json(tmp_path / "one" / "stats.json") == orjson.loads(orjson.dumps(stats))


# --- CLI -------------------------------------------------------------------------------------------------


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "workflow_scripts", "ingest", *args]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=60)


def test_cli_end_to_end(tmp_path: Path) -> None:
    a = write_jsonl(tmp_path / "fr_wiki_frwiki_part-1.jsonl", [{"id": "f1", "title": "Titre", "body": "Été"}])
    b = write_lines(tmp_path / "fr_wiki_frwiki_part-2.jsonl", [b'{"body": "x"}', b'{"title": "Deux"}'])
    out = tmp_path / "out"
    args = ["--input", str(a), str(b), "--output-dir", str(out), "--name-regex", REGEX, "--shard-size", "99"]
    proc = run_cli(*args, "--text-key", "title", "body", "--min-chars", "2", "--compress")
    assert proc.returncode == 0, proc.stderr
    assert "fr_wiki_frwiki: 2 files, 3 docs in, 2 out, 1 rejected, 2 shards" in proc.stderr
    expected = [("f1", "Titre\n\nÉté"), (f"{b.name}:2", "Deux")]
    assert [(r["id"], r["text"]) for r in shard_records(out)] == expected
    assert quarantine(out) == [(b.name, 1, "too_short")]
    stats = read_json(out / "stats.json")
    assert (stats["files"], stats["docs_in"], stats["docs_out"]) == (2, 3, 2)
    names = ["fr_wiki_frwiki_split_0000.jsonl.zst", "fr_wiki_frwiki_split_0001.jsonl.zst"]
    assert [s["name"] for s in stats["shards"]] == names
    assert stats["options"]["text_key"] == ["title", "body"]


def test_cli_errors(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "en_web_cc_part-1.jsonl", [b'{"text": "ok"}', b"{broken"])
    out = tmp_path / "out"
    base = ["--input", str(path), "--output-dir", str(out), "--shard-size", "100"]
    proc = run_cli(*base, "--lang", "en", "--domain", "web", "--subdomain", "cc", "--strict")
    assert proc.returncode == 2
    assert f"snakepack ingest: error: {path}:2: rejected record (malformed_json)" in proc.stderr
    assert not (out / "stats.json").exists()
    proc = run_cli(*base, "--name-regex", r"^(?P<lang>de)_(?P<domain>\w+?)_(?P<subdomain>\w+?)_")
    assert proc.returncode == 2 and f"{path}: file name" in proc.stderr and "does not match" in proc.stderr
    proc = run_cli(*base, "--lang", "en", "--name-regex", REGEX)
    assert proc.returncode == 2 and "--name-regex excludes" in proc.stderr


def test_truncated_zst_is_an_error_not_a_short_read(tmp_path: Path) -> None:
    lines = b"".join(b'{"text": "document %d"}\n' % i for i in range(50_000))
    frame = zstandard.ZstdCompressor().compress(lines)
    path = tmp_path / "en_web_cc_part-1.jsonl.zst"
    path.write_bytes(frame[: len(frame) // 2])
    with pytest.raises(IngestError, match=r"en_web_cc_part-1\.jsonl\.zst: .*truncated zstd"):
        ingest([path], tmp_path / "out", options(strict=True))
    path.write_bytes(frame + zstandard.ZstdCompressor().compress(b'{"text": "second frame"}\n'))
    assert ingest([path], tmp_path / "out", options())["docs_out"] == 50_001
