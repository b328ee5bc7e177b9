"""A finished sample run, then a pack damaged: its next use names the file, and the fix it gives works."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

from tests.utils import Workflow, tail


def merged_digests(results: Path) -> dict[str, str]:
    return {
        str(p): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(results.glob("merged/*/*.[bi][id]*"))
    }


def test_a_truncated_slice_is_named_by_the_merge_and_its_fix_works(
    sample_run: Workflow, tmp_path: Path
) -> None:
    wf = sample_run.clone(tmp_path / "wf")
    results = wf.root / "results"
    before = merged_digests(results)
    piece = sorted((results / "datapacks" / "main_1" / "slices").glob("*.bin"))[0]
    size = piece.stat().st_size
    with open(piece, "r+b") as f:
        f.truncate(size // 2)
    proc = wf.run("--profile", "profiles/local", "--cores", "2", "--forcerun", "merge_pack")
    slices = Path("results/datapacks/main_1/slices")
    named = (
        f"{slices / piece.name}: truncated: {size // 2} bytes, "
        f"its index {slices / piece.stem}.idx says {size} "
    )
    assert proc.returncode != 0 and named in proc.output, tail(proc.output)
    assert f"delete {slices} and rerun: Snakemake cuts the pack's slices again" in proc.output
    shutil.rmtree(results / "datapacks" / "main_1" / "slices")
    wf.ok("--profile", "profiles/local", "--cores", "2")
    assert merged_digests(results) == before
