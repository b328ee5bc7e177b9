"""`snakepack batch`: a batch's members run as the command would alone, and a rerun redoes only the members
whose inputs, outputs or recipe changed; a failed member leaves the others recorded."""

from __future__ import annotations

import os
from pathlib import Path

import orjson
import pytest

from workflow_scripts import cli

GROUP = "en_web_cc"


def shards(root: Path, count: int = 5) -> Path:
    folder = root / "shards" / GROUP
    folder.mkdir(parents=True)
    for i in range(count):
        docs = [{"id": f"{i}-{k}", "text": f"shard {i} document {k} " + "word " * (k + 3)} for k in range(20)]
        (folder / f"{GROUP}_split_{i:04d}.jsonl").write_bytes(b"".join(orjson.dumps(d) + b"\n" for d in docs))
    return folder


def batch(root: Path, *extra: str, threads: int = 1) -> int:
    """Batch 1 of 2 shards (splits 2 and 3): their signatures."""
    shard, sig = f"{root}/shards/{GROUP}/{{shard}}.jsonl", f"{root}/sig/{{shard}}.sig"
    options = ["--shards-dir", f"{root}/shards/{GROUP}", "--batch", "1", "--per-batch", "2"]
    options += ["--state", f"{root}/b.state", "--manifest", f"{root}/b.json", "--threads", str(threads)]
    options += ["--input", shard, "--output", sig, "--member-log", f"{root}/logs/{{shard}}.log"]
    return cli.main(["batch", *options, "--", "dedup-signatures", "--input", shard, "--output", sig, *extra])


def mtimes(root: Path) -> dict[str, int]:
    return {p.name: p.stat().st_mtime_ns for p in sorted((root / "sig").glob("*.sig"))}


def ran(root: Path) -> list[str]:
    return orjson.loads((root / "b.json").read_bytes())["ran"]


def test_members_are_the_batch_and_match_the_command_alone(tmp_path: Path) -> None:
    folder = shards(tmp_path)
    assert batch(tmp_path, threads=2) == 0
    members = [f"{GROUP}_split_0002", f"{GROUP}_split_0003"]
    manifest = orjson.loads((tmp_path / "b.json").read_bytes())
    assert list(manifest["members"]) == members and manifest["ran"] == members
    sig = tmp_path / "sig" / f"{members[0]}.sig"
    assert manifest["members"][members[0]] == [[sig.stat().st_size, sig.stat().st_mtime_ns]]
    assert sorted(mtimes(tmp_path)) == [f"{m}.sig" for m in members]
    alone = tmp_path / "alone.sig"
    assert (
        cli.main(["dedup-signatures", "--input", str(folder / f"{members[0]}.jsonl"), "--output", str(alone)])
        == 0
    )
    assert (tmp_path / "sig" / f"{members[0]}.sig").read_bytes() == alone.read_bytes()
    assert (tmp_path / "logs" / f"{members[1]}.log").exists()


def test_a_rerun_redoes_only_what_changed(tmp_path: Path) -> None:
    folder = shards(tmp_path)
    assert batch(tmp_path) == 0
    first = mtimes(tmp_path)
    assert batch(tmp_path) == 0
    assert ran(tmp_path) == [] and mtimes(tmp_path) == first
    changed = folder / f"{GROUP}_split_0003.jsonl"
    changed.write_bytes(changed.read_bytes() + b'{"id": "new", "text": "one more document here"}\n')
    (tmp_path / "sig" / f"{GROUP}_split_0002.sig").unlink()
    assert batch(tmp_path) == 0
    assert ran(tmp_path) == [f"{GROUP}_split_0002", f"{GROUP}_split_0003"]
    kept = mtimes(tmp_path)
    os.utime(folder / f"{GROUP}_split_0002.jsonl", ns=(1, 1))  # a touched input is redone too
    assert batch(tmp_path) == 0
    assert ran(tmp_path) == [f"{GROUP}_split_0002"]
    assert mtimes(tmp_path)[f"{GROUP}_split_0003.sig"] == kept[f"{GROUP}_split_0003.sig"]
    assert batch(tmp_path, "--num-perm", "64") == 0  # a new recipe redoes every member
    assert len(ran(tmp_path)) == 2


@pytest.mark.parametrize("threads", [1, 2])
def test_a_failed_member_fails_the_batch_and_keeps_the_others(
    tmp_path: Path, threads: int, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = shards(tmp_path)
    bad = folder / f"{GROUP}_split_0002.jsonl"
    good = bad.read_bytes()
    bad.write_bytes(b"not json\n")
    assert batch(tmp_path, threads=threads) == 1
    out = capsys.readouterr().out
    assert f"{GROUP}_split_0002: failed (exit 2)" in out and "0002.jsonl: document 1: invalid JSON" in out, (
        out
    )
    assert not (tmp_path / "b.json").exists()
    assert sorted(mtimes(tmp_path)) == [f"{GROUP}_split_0003.sig"]
    done = mtimes(tmp_path)
    bad.write_bytes(good)
    assert batch(tmp_path, threads=threads) == 0
    assert ran(tmp_path) == [f"{GROUP}_split_0002"]
    assert mtimes(tmp_path)[f"{GROUP}_split_0003.sig"] == done[f"{GROUP}_split_0003.sig"]


def test_an_empty_batch_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shards(tmp_path, count=2)
    assert batch(tmp_path) == 2
    assert "no shard in batch 1 of 2" in capsys.readouterr().err
