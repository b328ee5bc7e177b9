"""The standalone dedup CLI end to end, in a subprocess, on small planted shards."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
import zstandard

from workflow_scripts.core.fsio import read_json

REPO = Path(__file__).resolve().parents[2]


def _text(rng: random.Random, words: int = 150) -> str:
    vocab = [
        "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9)))
        for _ in range(400)
    ]
    sentences = [
        " ".join(rng.choice(vocab) for _ in range(10)).capitalize() + "." for _ in range(words // 10)
    ]
    return " ".join(sentences)


def _doc(i: str, text: str, lang: str = "en") -> bytes:
    return (
        orjson.dumps(
            {
                "id": i,
                "text": text,
                "lang": lang,
                "domain": "web",
                "subdomain": "cc",
                "source": "vendor",
                "line": 1,
            }
        )
        + b"\n"
    )


def test_cli_end_to_end(tmp_path: Path) -> None:
    rng = random.Random(11)
    base = [_text(rng) for _ in range(20)]
    near = base[4].split(" ")
    near[70] = "changed"
    zh = "".join(
        rng.choice("的一是不了人我在有他这为之大来以个中上们到说国和地也子时道出") for _ in range(200)
    )
    first = tmp_path / "in" / "en_web_cc_split_0000.jsonl"
    second = tmp_path / "in" / "en_web_cc_split_0001.jsonl.zst"
    first.parent.mkdir()
    first.write_bytes(b"".join(_doc(f"a{i}", t) for i, t in enumerate(base)) + _doc("zh0", zh, "zh"))
    second_lines = (
        _doc("b0", " ".join(near))
        + _doc("b1", base[9].lower())
        + _doc("b2", _text(rng))
        + _doc("b3", base[12][: len(base[12]) // 2])
        + _doc("zh1", zh[:100] + "字" + zh[101:], "zh")
    )
    second.write_bytes(zstandard.ZstdCompressor().compress(second_lines))
    out = tmp_path / "out"
    cmd = [
        sys.executable,
        "-m",
        "workflow_scripts",
        "dedup",
        "--input",
        str(first),
        str(second),
        "--output-dir",
        str(out),
        "--threshold",
        "0.85",
        "--ngram",
        "5",
        "--workers",
        "2",
    ]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr

    assert (out / first.name).read_bytes() == first.read_bytes()  # all kept, byte-identical
    kept = zstandard.ZstdDecompressor().stream_reader((out / second.name).read_bytes()).read()
    assert [orjson.loads(x)["id"] for x in kept.splitlines()] == ["b2", "b3"]
    removed = {
        r["id"]: r
        for r in map(
            orjson.loads,
            zstandard.ZstdDecompressor()
            .stream_reader((out / "removed" / second.name).read_bytes())
            .read()
            .splitlines(),
        )
    }
    assert {i: (r["duplicate_of"], r["dedup_reason"]) for i, r in removed.items()} == {
        "b0": ("a4", "near"),
        "b1": ("a9", "exact"),
        "zh1": ("zh0", "near"),
    }
    assert removed["b0"]["text"] == " ".join(near)
    assert (out / "clusters.tsv").read_text() == "a4\ta4\na9\ta9\nzh0\tzh0\nb0\ta4\nb1\ta9\nzh1\tzh0\n"
    stats = read_json(out / "dedup_stats.json")
    assert (stats["docs_in"], stats["docs_out"], stats["removed"]) == (
        26,
        23,
        {"exact": 1, "near": 2, "total": 3},
    )
    assert not (out / "_work").exists()


def test_step_clis_give_the_standalone_result(tmp_path: Path) -> None:
    """The per-step CLIs (as the workflow's rules call them), with other job splits, give identical bytes."""
    from workflow_scripts.dedup import bands as dedup_bands
    from workflow_scripts.dedup import cluster as dedup_cluster
    from workflow_scripts.dedup import exact as dedup_exact
    from workflow_scripts.dedup import filter as dedup_filter
    from workflow_scripts.dedup import local as dedup
    from workflow_scripts.dedup import params as dedup_params
    from workflow_scripts.dedup import report as dedup_report
    from workflow_scripts.dedup import signatures as dedup_signatures

    rng = random.Random(12)
    base = [_text(rng) for _ in range(30)]
    shards = [
        tmp_path / "in" / "de_news_wire_split_0000.jsonl",
        tmp_path / "in" / "en_web_cc_split_0003.jsonl",
    ]
    shards[0].parent.mkdir()
    shards[0].write_bytes(b"".join(_doc(f"a{i}", t, "de") for i, t in enumerate(base)) + _doc("e", "", "de"))
    near = [" ".join(w if k % 97 else "x" for k, w in enumerate(t.split(" "))) for t in base[:12]]
    shards[1].write_bytes(b"".join(_doc(f"b{i}", t) for i, t in enumerate(near)) + _doc("c", base[20]))
    settings = ["--threshold", "0.8", "--scope", "global"]
    dedup.main(["--input", *map(str, shards), "--output-dir", str(tmp_path / "one"), *settings])

    out, work = tmp_path / "steps", tmp_path / "work"
    sigs = [str(work / f"{p.stem}.sig") for p in shards]
    params = str(work / "params.json")  # as the workflow does: resolved once, read by every signature job
    dedup_params.main(["--output", params, *settings])
    for shard, sig in zip(shards, sigs, strict=True):
        dedup_signatures.main(["--input", str(shard), "--output", sig, "--params", params])
    dedup_signatures.main(["--input", str(shards[1]), "--output", str(work / "direct.sig"), *settings])
    assert (work / "direct.sig").read_bytes() == Path(sigs[1]).read_bytes()  # resolved by the job itself
    pairs = [str(work / f"exact{k}.pairs") for k in range(2)] + [
        str(work / f"b{g}{k}.pairs") for g in range(3) for k in range(2)
    ]
    for k in range(2):
        dedup_exact.main(
            ["--signatures", *sigs, "--partition", str(k), "--partitions", "2", "--output", pairs[k]]
        )
        for g in range(3):
            dedup_bands.main(
                [
                    "--signatures",
                    *sigs,
                    "--band-group",
                    str(g),
                    "--band-groups",
                    "3",
                    "--partition",
                    str(k),
                    "--partitions",
                    "2",
                    "--output",
                    str(work / f"b{g}{k}.pairs"),
                ]
            )
    (work / "list.txt").write_text("\n".join(pairs))
    dedup_cluster.main(
        [
            "--signatures",
            *sigs,
            "--pairs",
            f"@{work / 'list.txt'}",
            "--assign-dir",
            str(work),
            "--clusters",
            str(out / "clusters.tsv"),
            "--summary",
            str(work / "summary.json"),
        ]
    )
    for shard in shards:
        stem = shard.name.removesuffix(".jsonl")
        dedup_filter.main(
            [
                "--input",
                str(shard),
                "--assign",
                str(work / f"{stem}.assign.json"),
                "--output",
                str(out / shard.name),
                "--removed",
                str(out / "removed" / shard.name),
                "--stats",
                str(work / f"{stem}.stats.json"),
            ]
        )
    dedup_report.main(
        [
            "--stats",
            *map(str, work.glob("*.stats.json")),
            "--summary",
            str(work / "summary.json"),
            "--output-stats",
            str(out / "dedup_stats.json"),
            "--report",
            str(out / "dedup_report.json"),
        ]
    )

    one = sorted(p.relative_to(tmp_path / "one") for p in (tmp_path / "one").rglob("*") if p.is_file())
    assert one == sorted(p.relative_to(out) for p in out.rglob("*") if p.is_file())
    for rel in one:
        assert (tmp_path / "one" / rel).read_bytes() == (out / rel).read_bytes(), rel
    stats = read_json(out / "dedup_stats.json")
    assert (stats["docs_in"], stats["removed"]) == (44, {"exact": 1, "near": 12, "total": 13})


@pytest.mark.slow  # 9 s: hundreds of shards through every dedup step
def test_many_shards_under_a_small_open_file_limit(tmp_path: Path) -> None:
    """The gather steps read thousands of signature files with at most 128 files open (the default limits
    on open files and memory maps cap what one job may hold, not how many shards it reads)."""
    from workflow_scripts.dedup.params import DedupParams
    from workflow_scripts.dedup.settings import DedupSettings
    from workflow_scripts.dedup.signatures import write_signatures

    rng = random.Random(3)
    base = [_text(rng, 40) for _ in range(50)]
    shards, settings = 1500, DedupParams.resolve(DedupSettings())
    sigs = []
    for s in range(shards):
        shard = tmp_path / "in" / f"en_web_cc_split_{s:04d}.jsonl"
        shard.parent.mkdir(exist_ok=True)
        shard.write_bytes(_doc(f"d{s}", base[s % len(base)]))  # every 50th shard repeats a text
        sig = tmp_path / "sig" / f"en_web_cc_split_{s:04d}.sig"
        write_signatures(shard, sig, settings)
        sigs.append(str(sig))
    listing = tmp_path / "signatures.txt"
    listing.write_text("\n".join(sigs) + "\n")
    limit = "import resource, runpy, sys; resource.setrlimit(resource.RLIMIT_NOFILE, (128, 128)); "
    limit += (
        "sys.argv = ['snakepack', *sys.argv[1:]]; runpy.run_module('workflow_scripts', run_name='__main__')"
    )
    run = [sys.executable, "-c", limit]
    pairs = [tmp_path / "exact.pairs", tmp_path / "bands.pairs"]
    bands = ["--band-group", "0", "--band-groups", "1"]
    cluster = ["--assign-dir", tmp_path / "assign", "--clusters", tmp_path / "clusters.tsv"]
    steps = [
        ["dedup-exact", "--signatures", f"@{listing}", "--output", pairs[0]],
        ["dedup-bands", "--signatures", f"@{listing}", *bands, "--output", pairs[1]],
        [
            "dedup-cluster",
            "--signatures",
            f"@{listing}",
            "--pairs",
            *pairs,
            *cluster,
            "--summary",
            tmp_path / "s.json",
        ],
    ]
    for step in steps:
        proc = subprocess.run([*run, *map(str, step)], cwd=REPO, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
    summary = orjson.loads((tmp_path / "s.json").read_bytes())
    assert summary["removed"]["exact"] == shards - len(base)
    assert len(list((tmp_path / "assign").glob("*.assign.json"))) == shards
