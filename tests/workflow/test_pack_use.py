"""A finished sample run, then a pack's source damaged: writing the pack names the file, and the fix it gives
works."""

from __future__ import annotations

import hashlib
from pathlib import Path

import orjson

from tests.utils import Workflow, tail

RUN = ("--profile", "profiles/local", "--cores", "2")


def merged_digests(results: Path) -> dict[str, str]:
    return {
        str(p): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(results.glob("merged/*/*.[bi][id]*"))
    }


def test_a_truncated_source_is_named_by_the_pack_and_its_fix_works(
    sample_run: Workflow, tmp_path: Path
) -> None:
    wf = sample_run.clone(tmp_path / "wf")
    results = wf.root / "results"
    before = merged_digests(results)
    spec = orjson.loads((results / "datapacks" / "_specs" / "main_1.json").read_bytes())
    prefix = spec["slices"][0]["prefix"]
    source = wf.root / f"{prefix}.bin"
    size = source.stat().st_size
    with open(source, "r+b") as f:
        f.truncate(size // 2)
    proc = wf.run(*RUN, "--forcerun", "pack")
    named = f"{prefix}.bin: truncated: {size // 2} bytes, its index {prefix}.idx says {size} "
    assert proc.returncode != 0 and named in proc.output, tail(proc.output)
    fix = "rerun with --forcerun tokenize (an imported source: delete it and rerun): Snakemake makes it again"
    assert fix in proc.output, tail(proc.output)
    wf.ok(*RUN, "--forcerun", "tokenize")
    assert merged_digests(results) == before
    assert not list(results.glob("datapacks/*/slices")), "no file per source"
