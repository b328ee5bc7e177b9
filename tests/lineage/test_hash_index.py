"""The lineage hash index (lineage/hash_index.py): it equals a brute-force dict of every source's ledger
hashes, and ``snakepack lineage --hash/--text`` answers the same with it, without it and with it stale; the
workflow's ``lineage_index`` rule writes it for the sample."""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path
from unittest.mock import ANY

import numpy as np
import pytest

from tests.lineage.test_raw import lineage, pack_and_config, text_of, write_ledgers
from tests.train.conftest import model  # noqa: F401 (a fixture)
from tests.utils import Workflow
from workflow_scripts.cli import main as snakepack
from workflow_scripts.core.fsio import read_json
from workflow_scripts.lineage import hash_index
from workflow_scripts.tokens.ledger import Ledger, LedgerBuilder, save, text_hash, write_unknown


def write_ledger(prefix: Path, hashes: list[int]) -> dict:
    """A ledger of documents with ``hashes`` (raw positions unknown), and its signature entry."""
    builder = LedgerBuilder()
    builder.add([None] * len(hashes), [-1] * len(hashes), np.array(hashes, np.uint64))
    builder.write(str(prefix))
    return {"name": prefix.name, "prefix": str(prefix), "documents": len(hashes)}


def sources(tmp: Path) -> list[dict]:
    """Ledgers with duplicates within and across sources, an empty one and an import's (no hashes)."""
    rng = np.random.default_rng(3)
    shared = [int(h) for h in rng.integers(0, 1 << 64, 5, dtype=np.uint64)]
    signature = []
    for k in range(4):
        own = [int(h) for h in rng.integers(0, 1 << 64, 40 + 7 * k, dtype=np.uint64)]
        signature.append(write_ledger(tmp / f"en_web_{k}", [*own, *shared, own[0], (1 << 64) - 1, 0]))
    signature.append(write_ledger(tmp / "en_web_empty", []))
    write_unknown(str(tmp / "xx_imported"), 12)
    signature.append({"name": "xx_imported", "prefix": str(tmp / "xx_imported"), "documents": 12})
    return signature


def brute_force(signature: list[dict]) -> dict[int, list[tuple[int, int]]]:
    found = defaultdict(list)
    for number, entry in enumerate(signature):
        for doc, value in enumerate(Ledger.read(entry["prefix"]).hashes.tolist()):
            found[value].append((number, doc))
    return found


def files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


@pytest.mark.fast
def test_the_index_equals_a_brute_force_dict(tmp_path: Path) -> None:
    signature = sources(tmp_path)
    expected = brute_force(signature)
    out = tmp_path / "index"
    # small buckets and buffer: several buckets, each filled by several flushes
    hash_index.build(signature, out, bucket_entries=40, buffer_entries=33)
    index = hash_index.HashIndex.open(out)
    assert index is not None and index.bits >= 3
    assert len(list(out.glob("*.npy"))) == 1 << index.bits
    assert [s["name"] for s in index.sources] == [e["name"] for e in signature]
    for value, where in expected.items():
        assert index.lookup(value) == where, value
    assert index.lookup(12345) == []
    assert sum(index.counts) == sum(map(len, expected.values()))
    for k in range(1 << index.bits):
        table = np.load(out / index.bucket_name(k))
        assert (np.diff(table[0].astype(np.float64)) >= 0).all() and not (
            table[0] >> (64 - index.bits) != k
        ).any()
    first = files(out)
    hash_index.build(signature, out)  # one bucket now, and built again: the same answers
    assert hash_index.HashIndex.open(out).bits == 0
    hash_index.build(signature, out, bucket_entries=40, buffer_entries=33)
    assert files(out) == first, "the same bytes"


@pytest.mark.fast
def test_a_ledger_that_disagrees_with_the_signature_is_an_error(tmp_path: Path) -> None:
    signature = [write_ledger(tmp_path / "en_web_0", [1, 2, 3])]
    signature[0]["documents"] = 4
    assert snakepack_index(tmp_path, signature) == 2


def snakepack_index(tmp: Path, signature: list[dict]) -> int:
    (tmp / "signature.json").write_text(json.dumps({"prefixes": signature}))
    return snakepack(
        ["lineage-index", "--signature", str(tmp / "signature.json"), "--output", str(tmp / "ix")]
    )


def answer(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[dict, str]:
    """``snakepack lineage ARGS``: its answer and its standard error."""
    assert snakepack(["lineage", *args]) == 0
    out = capsys.readouterr()
    return json.loads(out.out), out.err


def plan_signature(tmp: Path) -> list[dict]:
    """``plan_for``'s sources as the count stage lists them (name, prefix, documents)."""
    names = ("de_web_a", "en_web_a")
    return [
        {"name": n, "prefix": str(tmp / n), "documents": Ledger.read(str(tmp / n)).documents} for n in names
    ]


def rewrite(prefix: str, ledger: Ledger, hashes: np.ndarray, mtime_ns: int) -> None:
    """The ledger again with new hashes (its runs kept), modified at ``mtime_ns``."""
    save(prefix, ledger.files, ledger.run_file, ledger.run_line, ledger.run_docs, hashes)
    os.utime(ledger.path, ns=(mtime_ns, mtime_ns))


@pytest.mark.fast
def test_lookups_with_and_without_the_index_and_with_a_stale_one(
    tmp_path: Path,
    model: Path,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, _, config = pack_and_config(tmp_path, model)
    write_ledgers(tmp_path)
    plan_json = tmp_path / "plan.json"
    args = ("--config", str(config), "--plan", str(plan_json))
    texts = [text_of("en_web_a", 45), text_of("de_web_a", 3), "no such text"]
    scanned = [lineage(capsys, *args, "--text", t) for t in texts]
    assert scanned[0]["matches"] and scanned[1]["matches"] and not scanned[2]["matches"]

    beside = tmp_path / "tokenized" / "hash_index"  # where the CLI looks by default: beside the plan
    hash_index.build(plan_signature(tmp_path), beside)
    for text, expected in zip(texts, scanned, strict=True):
        value = f"{text_hash(text):016x}"
        for query in (["--text", text], ["--hash", value]):
            assert answer(capsys, *args, *query) == (expected, ""), "the index holds every source as it is"
        got, err = answer(capsys, *args, "--hash", value, "--index", str(tmp_path / "none"))
        assert got == expected and "no hash index" in err

    # the German ledger rewritten after the index, document 3's text changed: first keeping its size and
    # time (the index is trusted: its entry of the old text fails the check against the ledger; the new text
    # is not found), then as a rewrite leaves it (that ledger is read: the new text is found)
    prefix = str(tmp_path / "de_web_a")
    ledger = Ledger.read(prefix)
    hashes = ledger.hashes.copy()
    hashes[3] = text_hash("a new text")
    before = os.stat(ledger.path)
    rewrite(prefix, ledger, hashes, before.st_mtime_ns)
    assert os.stat(ledger.path).st_size == before.st_size
    assert answer(capsys, *args, "--text", texts[1])[0]["matches"] == []
    assert answer(capsys, *args, "--text", "a new text") == (scanned[2] | {"query": ANY}, "")
    rewrite(prefix, ledger, hashes, before.st_mtime_ns + 10**9)
    got, err = answer(capsys, *args, "--text", texts[1])
    assert got["matches"] == [] and "lacks 1 of the 2 sources" in err
    new = lineage(capsys, *args, "--text", "a new text")
    assert [(m["source"], m["source_document"]) for m in new["matches"]] == [("de_web_a", 3)]
    assert lineage(capsys, *args, "--text", texts[0]) == scanned[0]


def test_the_workflow_writes_the_index_of_the_sample(
    sample_run: Workflow, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    wf = sample_run.clone(tmp_path / "wf")
    wf.ok("lineage_index", "--cores", "1")
    assert "Nothing to be done" in wf.ok("-n", "lineage_index")
    monkeypatch.chdir(wf.root)  # the signature's prefixes are relative to it
    signature = read_json("results/tokenized/signature.json")["prefixes"]
    index = hash_index.HashIndex.open("results/tokenized/hash_index")
    assert index is not None and [s["prefix"] for s in index.sources] == [s["prefix"] for s in signature]
    expected = brute_force(signature)
    assert expected and all(index.lookup(value) == where for value, where in expected.items())

    args = ("--config", "results/train/main_1/main_1.yml", "--plan", "results/plan.json")
    read = lineage(capsys, *args, "--steps", "12:12")["documents"]
    for value in sorted({d["hash"] for d in read if d["hash"]})[:3]:
        got, err = answer(capsys, *args, "--hash", value)
        assert got["matches"] and not err
        assert answer(capsys, *args, "--hash", value, "--index", "none")[0] == got
