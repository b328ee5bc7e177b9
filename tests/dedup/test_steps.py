"""The dedup steps in-process: signatures, band sorting, union-find, filter, exact pass, scopes, stats."""

from __future__ import annotations

import itertools
import random
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from datasketch import MinHash

from workflow_scripts.core.fsio import read_json
from workflow_scripts.core.stage_stats import UnbalancedStats
from workflow_scripts.dedup import local as dedup
from workflow_scripts.dedup import verify as dedup_verify
from workflow_scripts.dedup.bands import band_candidates, verify
from workflow_scripts.dedup.cluster import union
from workflow_scripts.dedup.pairs import run_pairs, run_starts
from workflow_scripts.dedup.params import DedupParams, permutations
from workflow_scripts.dedup.report import check_counts
from workflow_scripts.dedup.settings import DedupSettings
from workflow_scripts.dedup.signatures import minhash, write_signatures
from workflow_scripts.dedup.sigset import SignatureSet, make_keys

VOCAB = ["".join(w) for w in itertools.product("abcdefghijklmnopqrstuvwxyz", repeat=3)][::5]  # letters only


def text(rng: random.Random, words: int = 120, vocab: list[str] = VOCAB) -> str:
    return " ".join(rng.choice(vocab) for _ in range(words))


def edit(t: str, positions: list[int]) -> str:
    words = t.split()
    for p in positions:
        words[p] = "edited"
    return " ".join(words)


def doc(i: str, t: str, lang: str = "en", domain: str = "web", source: str = "raw.jsonl") -> dict[str, Any]:
    return {
        "id": i,
        "text": t,
        "lang": lang,
        "domain": domain,
        "subdomain": "cc",
        "source": source,
        "line": 1,
    }


def write_shard(path: Path, docs: list[dict[str, Any]]) -> Path:
    path.write_bytes(b"".join(orjson.dumps(d) + b"\n" for d in docs))
    return path


def run(tmp_path: Path, shards: dict[str, list[dict[str, Any]]], **settings: Any) -> dict[str, Any]:
    """Run the whole dedup in-process; return kept ids, removed records, clusters and statistics."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    inputs = [write_shard(tmp_path / name, docs) for name, docs in shards.items()]
    out = tmp_path / "out"
    dedup.run(inputs, out, DedupSettings(**settings).resolved())
    kept = [orjson.loads(x)["id"] for p in inputs for x in (out / p.name).read_bytes().splitlines()]
    removed = [orjson.loads(x) for p in inputs for x in (out / "removed" / p.name).read_bytes().splitlines()]
    clusters = [line.split("\t") for line in (out / "clusters.tsv").read_text().splitlines()]
    return {
        "kept": kept,
        "removed": {r["id"]: r for r in removed},
        "clusters": clusters,
        "out": out,
        "inputs": inputs,
        "stats": read_json(out / "dedup_stats.json"),
    }


def test_minhash_matches_datasketch() -> None:
    rng = np.random.default_rng(1)
    sets = [
        np.unique(rng.integers(0, 2**32, size=n, dtype=np.uint64)).astype(np.uint32) for n in (1, 7, 300, 0)
    ]
    off = np.concatenate([[0], np.cumsum([s.size for s in sets])])
    sig = minhash(np.concatenate(sets), off, permutations(64, 3))
    for s, row in zip(sets[:3], sig[:3], strict=True):
        m = MinHash(num_perm=64, seed=3, scheme="affine32", hashfunc=lambda x: x)
        m.update_batch(s.tolist())
        assert row.tolist() == m.hashvalues.tolist()
    assert (sig[3] == np.iinfo(np.uint32).max).all()


def test_signatures_are_deterministic(tmp_path: Path) -> None:
    rng = random.Random(2)
    shard = write_shard(tmp_path / "en_web_cc_split_0000.jsonl", [doc(str(i), text(rng)) for i in range(50)])
    write_signatures(shard, tmp_path / "a.sig", DedupParams.resolve(DedupSettings()))
    write_signatures(shard, tmp_path / "b.sig", DedupParams.resolve(DedupSettings()))
    write_signatures(shard, tmp_path / "c.sig", DedupParams.resolve(DedupSettings(seed=99)))
    a = (tmp_path / "a.sig").read_bytes()
    assert a == (tmp_path / "b.sig").read_bytes()
    assert a != (tmp_path / "c.sig").read_bytes()


def test_run_pairs_all_pairs_small_runs_star_large() -> None:
    keys = np.arange(10, dtype=np.uint64)
    starts = run_starts(np.array([1, 1, 1, 2, 3, 3, 4, 4, 4, 4]))
    assert starts.tolist() == [0, 3, 4, 6, 10]
    pairs = {tuple(p) for p in run_pairs(keys, starts, cap=3).tolist()}
    assert pairs == {(0, 1), (0, 2), (1, 2), (4, 5), (6, 7), (6, 8), (6, 9)}


def test_band_sorting_finds_every_equal_band_pair(tmp_path: Path) -> None:
    rng = random.Random(3)
    vocab = VOCAB[:60]  # small vocabulary, one-row bands: many collisions
    params = DedupSettings(
        num_perm=12, bands=12, rows=1, ngram=1, verify="none", exact=False, bucket_cap=10_000
    ).resolved()
    sig_paths = []
    for s in range(3):
        shard = write_shard(
            tmp_path / f"en_web_cc_split_{s:04d}.jsonl",
            [doc(f"{s}-{i}", text(rng, 15, vocab)) for i in range(40)],
        )
        sig_paths.append(tmp_path / f"{s}.sig")
        write_signatures(shard, sig_paths[-1], DedupParams.resolve(params))
    sigs = SignatureSet(sig_paths)
    expected = set()
    for j in range(params.bands):
        buckets = defaultdict(list)
        for s, store in enumerate(sigs.stores):
            for row, h in enumerate(store["bands"][:, j].tolist()):
                buckets[h].append(int(make_keys(s, np.array([row]))[0]))
        expected |= {p for members in buckets.values() for p in itertools.combinations(sorted(members), 2)}
    for parts in (1, 3):
        found = [
            tuple(p)
            for j in range(params.bands)
            for part in range(parts)
            for p in band_candidates(sigs, j, part, parts).tolist()
        ]
        assert len(found) == len(set(found)), "a pair was produced twice"
        assert set(found) == expected
    assert len(expected) > 500


def test_verification_rejects_dissimilar_candidates(tmp_path: Path) -> None:
    rng = random.Random(4)
    base = text(rng, 200)
    docs = [doc("a", base), doc("b", edit(base, [100])), doc("c", edit(base, list(range(0, 200, 8))))]
    shard = write_shard(tmp_path / "en_web_cc_split_0000.jsonl", docs)
    pairs = np.array([[0, 1], [0, 2], [1, 2]], dtype=np.uint64)  # keys of shard 0: its rows
    for mode in ("jaccard", "none"):
        write_signatures(shard, tmp_path / f"{mode}.sig", DedupParams.resolve(DedupSettings(verify=mode)))
        accepted, sim = verify(SignatureSet([tmp_path / f"{mode}.sig"]), pairs)
        if mode == "jaccard":
            assert accepted.tolist() == [True, False, False]
            assert sim[0] == pytest.approx(191 / 201) and sim[1] < 0.5
        else:
            assert accepted.all()


def test_jaccard_of_sets_with_repeats() -> None:
    rng = np.random.default_rng(3)
    sets = [rng.integers(0, 40, size=rng.integers(0, 30)).astype(np.uint32) for _ in range(50)]
    sets[7] = np.array([2**32 - 1, 0, 2**32 - 1], dtype=np.uint32)  # the extremes of the element range
    values = np.concatenate(sets)
    off = np.concatenate([[0], np.cumsum([s.size for s in sets])])
    left, right = rng.integers(0, 50, 300), rng.integers(0, 50, 300)
    left[:3], right[:3] = 7, (7, 0, 8)
    got = dedup_verify.jaccard_pairs(values, off, left, right)
    for a, b, j in zip(left, right, got, strict=True):
        x, y = set(sets[a].tolist()), set(sets[b].tolist())
        assert j == (len(x & y) / len(x | y) if x | y else 0.0)


def _components_bfs(n: int, edges: list[tuple[int, int]]) -> list[int]:
    adj = defaultdict(list)
    for a, b in edges:
        adj[a].append(b)
        adj[b].append(a)
    root = list(range(n))
    seen = set()
    for start in range(n):
        if start in seen:
            continue
        todo, comp = [start], []
        seen.add(start)
        while todo:
            x = todo.pop()
            comp.append(x)
            for y in adj[x]:
                if y not in seen:
                    seen.add(y)
                    todo.append(y)
        for x in comp:
            root[x] = min(comp)
    return root


def test_union_find_matches_bfs() -> None:
    for seed in range(500):  # random graphs, each with a long path in random order: deep trees to compress
        rng = random.Random(seed)
        n = rng.randint(1, 300)
        edges = [(rng.randrange(n), rng.randrange(n)) for _ in range(rng.randint(0, n))]
        edges += list(itertools.pairwise(rng.sample(range(n), n)))
        parent = np.arange(n)
        cut = rng.randint(0, len(edges))
        for part in (edges[:cut], edges[cut:]):  # in two calls, as the cluster step does with chunks
            u = np.array([a for a, _ in part], dtype=np.int64)
            union(parent, u, np.array([b for _, b in part], dtype=np.int64))
        assert parent.tolist() == _components_bfs(n, edges), seed


def test_filter_keeps_one_per_cluster_and_records_duplicates(tmp_path: Path) -> None:
    rng = random.Random(5)
    originals = [text(rng) for _ in range(30)]
    a = [doc(f"a{i}", t) for i, t in enumerate(originals)]
    b = [
        doc("b0", edit(originals[3], [10])),
        doc("b1", originals[5].upper()),
        doc("b2", text(rng)),
        doc("b3", edit(originals[3], [60])),
        doc("b4", edit(originals[7], list(range(0, 120, 6)))),
    ]
    r = run(tmp_path, {"en_web_cc_split_0000.jsonl": a, "en_web_cc_split_0001.jsonl": b})
    assert set(r["removed"]) == {"b0", "b1", "b3"}
    assert {k: (v["duplicate_of"], v["dedup_reason"]) for k, v in r["removed"].items()} == {
        "b0": ("a3", "near"),
        "b1": ("a5", "exact"),
        "b3": ("a3", "near"),
    }
    assert sorted(r["kept"] + list(r["removed"])) == sorted(d["id"] for d in a + b)
    by_cluster = defaultdict(list)
    for i, c in r["clusters"]:
        by_cluster[c].append(i)
    assert sorted(map(sorted, by_cluster.values())) == [["a3", "b0", "b3"], ["a5", "b1"]]
    assert all(sum(i in r["kept"] for i in ids) == 1 for ids in by_cluster.values())
    assert r["removed"]["b0"]["cluster"] == next(c for i, c in r["clusters"] if i == "a3") == "a3"
    kept_lines = (r["out"] / "en_web_cc_split_0000.jsonl").read_bytes()
    assert kept_lines == r["inputs"][0].read_bytes()  # nothing removed there: byte-identical


def test_exact_pass_and_its_absence(tmp_path: Path) -> None:
    rng = random.Random(6)
    t = text(rng)
    docs = [doc("x", t), doc("y", "  " + t.upper() + " !"), doc("z", t)]
    with_exact = run(tmp_path / "1", {"en_web_cc_split_0000.jsonl": docs})
    assert {k: v["dedup_reason"] for k, v in with_exact["removed"].items()} == {"y": "exact", "z": "exact"}
    without = run(tmp_path / "2", {"en_web_cc_split_0000.jsonl": docs}, exact=False)
    assert {k: v["dedup_reason"] for k, v in without["removed"].items()} == {"y": "near", "z": "near"}


@pytest.mark.parametrize(
    "scope, removed", [("global", {"b", "c", "d"}), ("lang", {"b", "c"}), ("source", {"b"})]
)
def test_scope_separates_pairs(tmp_path: Path, scope: str, removed: set[str]) -> None:
    rng = random.Random(7)
    t = text(rng)
    # scope "source" is the source group (lang_domain_subdomain), not the raw file a record came from
    docs = [
        doc("a", t),
        doc("b", edit(t, [3]), source="other.jsonl"),
        doc("c", edit(t, [90]), domain="news"),
        doc("d", edit(t, [50]), lang="de"),
    ]
    assert set(run(tmp_path / scope, {"en_web_cc_split_0000.jsonl": docs}, scope=scope)["removed"]) == removed


def test_stats_add_up_and_are_checked(tmp_path: Path) -> None:
    rng = random.Random(8)
    t = text(rng)
    r = run(
        tmp_path,
        {
            "en_web_cc_split_0000.jsonl": [doc("a", t), doc("b", t), doc("c", edit(t, [5]))],
            "de_web_cc_split_0000.jsonl": [doc("d", text(rng), lang="de")],
        },
    )
    s = r["stats"]
    assert s["docs_in"] == 4 and s["docs_out"] == 2 and s["removed"] == {"exact": 1, "near": 1, "total": 2}
    assert s["docs_in"] == s["docs_out"] + s["removed"]["total"]
    report = read_json(r["out"] / "dedup_report.json")
    assert report["by_lang"]["en"] == {"in": 3, "out": 1, "exact": 1, "near": 1}
    assert report["cluster_size_histogram"] == {"3": 1}
    shard = {
        "shard": "x",
        "docs_in": 3,
        "docs_out": 1,
        "removed": {"exact": 1, "near": 0},
        "bytes_in": 1,
        "bytes_out": 1,
        "bytes_removed": 0,
        "by_lang": {"en": {"in": 3}},
        "by_source": {"web": {"in": 3}},
    }
    summary = {"shards": 1, "docs": 3, "removed": {"exact": 1, "near": 0}}
    with pytest.raises(UnbalancedStats, match="shard x"):
        check_counts([shard], summary)
    check_counts([{**shard, "docs_out": 2}], summary)
    with pytest.raises(UnbalancedStats, match="near removed"):
        check_counts([{**shard, "docs_out": 1, "removed": {"exact": 1, "near": 1}}], summary)


@pytest.mark.parametrize("char_langs, removed", [(("ja", "zh"), {"zh-copy", "ja-copy"}), ((), set())])
def test_char_shingles_for_cjk(tmp_path: Path, char_langs: tuple[str, ...], removed: set[str]) -> None:
    rng = random.Random(9)
    zh = "".join(
        rng.choice("的一是不了人我在有他这为之大来以个中上们到说国和地也子时道出而要于就下得可你年生")
        for _ in range(300)
    )
    ja = "".join(
        rng.choice("あいうえおかきくけこさしすせそたちつてとなにぬねの日本語学生先") for _ in range(300)
    )
    docs = [
        doc("zh", zh, lang="zh"),
        doc("zh-copy", zh[:150] + "国" + zh[151:], lang="zh"),
        doc("ja", ja, lang="ja"),
        doc("ja-copy", ja[:100] + "x" + ja[100:], lang="ja"),
    ]
    r = run(tmp_path, {"zh_web_cc_split_0000.jsonl": docs}, char_langs=char_langs)
    assert set(r["removed"]) == removed


def test_empty_shard_and_texts_without_words(tmp_path: Path) -> None:
    rng = random.Random(10)
    t = text(rng)
    docs = [
        doc("e1", ""),
        doc("e2", "!!! ..."),
        doc("e3", "?"),
        doc("s", "two words"),
        doc("t1", t),
        doc("t2", t),
    ]
    r = run(tmp_path, {"en_web_cc_split_0000.jsonl": [], "en_web_cc_split_0001.jsonl": docs})
    assert set(r["removed"]) == {"t2"}
    assert r["stats"]["docs_in"] == 6 and r["clusters"] == [["t1", "t1"], ["t2", "t1"]]


def test_signature_batches_are_bounded_by_bytes(tmp_path: Path) -> None:
    """Book-length documents come in small batches (memory follows bytes), short ones in big batches."""
    from workflow_scripts.dedup.signatures import BATCH_BYTES, BATCH_DOCS, _batches

    big = tmp_path / "en_books_pd_split_0000.jsonl"
    text = "word " * (BATCH_BYTES // 15)  # a third of a batch each
    big.write_bytes(b"".join(orjson.dumps({"id": str(i), "text": text}) + b"\n" for i in range(10)))
    assert [len(b) for b in _batches(big)] == [3, 3, 3, 1]
    small = tmp_path / "en_web_cc_split_0000.jsonl"
    small.write_bytes(b"".join(orjson.dumps({"id": str(i), "text": "a b c"}) + b"\n" for i in range(5000)))
    assert [len(b) for b in _batches(small)] == [BATCH_DOCS, BATCH_DOCS, 5000 - 2 * BATCH_DOCS]
