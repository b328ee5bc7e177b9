"""rules/common.smk holds paths and lookups (README: Layout): the logic the rules use lives in the package,
where it is tested without Snakemake."""

from __future__ import annotations

from pathlib import Path

COMMON = Path(__file__).resolve().parents[2] / "rules" / "common.smk"
LIMIT = 200


def test_common_smk_stays_paths_and_lookups() -> None:
    lines = len(COMMON.read_text().splitlines())
    assert lines <= LIMIT, (
        f"rules/common.smk has {lines} lines, more than {LIMIT}: move logic (anything beyond a path, a"
        " constant or a get_* lookup) into the package (e.g. core/batches.py, core/lists.py), with a test"
    )
