"""What the input functions read, computed once per version of a file or folder."""

from __future__ import annotations

import os
from pathlib import Path

from workflow_scripts.core.versioned import per_version


def test_a_read_is_kept_until_its_file_changes(tmp_path: Path) -> None:
    path = tmp_path / "index.json"
    path.write_text("1")
    calls: list[str] = []

    def read(name: str, suffix: str) -> str:
        calls.append(name)
        return Path(name).read_text() + suffix

    assert (
        per_version(str(path), read, str(path), "!") == per_version(str(path), read, str(path), "!") == "1!"
    )
    assert len(calls) == 1
    assert per_version(str(path), read, str(path), "?") == "1?"  # other arguments: another read
    path.write_text("2")
    info = path.stat()
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns + 1))  # a new version even on a coarse clock
    assert per_version(str(path), read, str(path), "!") == "2!"
    assert len(calls) == 3
