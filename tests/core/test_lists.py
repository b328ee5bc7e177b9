"""The lists of every shard, in chunks: each line and what a chunk holding it waits for."""

from __future__ import annotations

from workflow_scripts.core import lists

GROUPS = (
    tuple(f"r/shards/en_web_cc/en_web_cc_split_{i:04d}.jsonl" for i in range(3)),
    ("r/shards/fr_wiki_x/fr_wiki_x_split_0000.jsonl.zst",),
)
DEDUP = lists.Lists("r/dedup/_work/sig", "r/dedup", "r/tokenized", True, 2, ("de_web_cc_split_src-0000",))
NO_DEDUP = lists.Lists("r/dedup/_work/sig", "r/shards", "r/tokenized", False, 2)


def test_signatures_wait_for_their_batch_jobs() -> None:
    waits, lines = DEDUP.entries("signatures", GROUPS)
    sig = "r/dedup/_work/sig"
    assert lines == [
        *(f"{sig}/en_web_cc_split_{i:04d}.sig" for i in range(3)),
        f"{sig}/fr_wiki_x_split_0000.sig",
    ]
    assert waits == [
        *(f"{sig}/_batches/en_web_cc.{b}.json" for b in (0, 0, 1)),
        f"{sig}/_batches/fr_wiki_x.0.json",
    ]


def test_the_corpus_is_the_filter_s_output_with_dedup_and_the_shards_without() -> None:
    waits, lines = DEDUP.entries("corpus", GROUPS)
    assert lines[0] == "r/dedup/en_web_cc/en_web_cc_split_0000.jsonl"
    assert lines[-1] == "r/dedup/fr_wiki_x/fr_wiki_x_split_0000.jsonl.zst"
    assert waits == [
        *(f"r/dedup/_batches/en_web_cc.{b}.json" for b in (0, 0, 1)),
        "r/dedup/_batches/fr_wiki_x.0.json",
    ]
    waits, lines = NO_DEDUP.entries("corpus", GROUPS)
    assert waits == lines == [s for group in GROUPS for s in group]


def test_tokenized_prefixes_list_the_imports_last() -> None:
    waits, lines = DEDUP.entries("tokenized", GROUPS)
    assert lines == [
        *(f"r/tokenized/en_web_cc_split_{i:04d}_text_document" for i in range(3)),
        "r/tokenized/fr_wiki_x_split_0000_text_document",
        "r/tokenized/de_web_cc_split_src-0000_text_document",
    ]
    assert waits[-2:] == [
        "r/tokenized/_batches/fr_wiki_x.0.json",
        "r/tokenized/de_web_cc_split_src-0000_text_document.stats.json",
    ]
    assert DEDUP.entries("tokenized", GROUPS) is DEDUP.entries("tokenized", GROUPS)  # built once


def test_a_list_lives_in_chunks_beside_what_it_lists() -> None:
    assert DEDUP.folders == {
        "signatures": "r/dedup/_work/sig",
        "corpus": "r/dedup",
        "tokenized": "r/tokenized",
    }
    assert lists.chunk_files("r/tokenized", 2001) == [f"r/tokenized/_lists/{i}.txt" for i in range(3)]
    assert lists.chunk_files("r/tokenized", 0) == []
    waits = ["a"] * lists.CHUNK + ["b", "b", "c"]
    assert lists.chunk_waits(waits, 0) == ["a"]
    assert lists.chunk_waits(waits, "1") == ["b", "c"]


def test_a_cluster_job_builds_a_list_only_for_the_rules_that_list_it() -> None:
    assert lists.needed("signatures", None)  # where Snakemake plans the run
    assert lists.needed("signatures", {"signatures_list"})
    assert not lists.needed("signatures", {"dedup_filter"})
    assert lists.needed("corpus", {"tokenized_list"}) and lists.needed("tokenized", {"list_chunk"})
    assert not lists.needed("tokenized", {"signatures_list", "tokenize"})
