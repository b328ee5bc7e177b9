"""A pack's cheap completeness check (its ``.bin`` size against its ``.idx``) where it is used: merging,
writing a pack (its sources) and training (before a segment starts): a missing or truncated file is named
with its path, the expected and actual size and the fix."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.utils import build_dataset
from workflow_scripts.cli import main as snakepack
from workflow_scripts.core import indexed_dataset as idd
from workflow_scripts.core.indexed_dataset import IndexedDatasetError, check_complete
from workflow_scripts.datapacks import packer


@pytest.fixture
def pack(tmp_path: Path) -> str:
    """Two documents, 7 uint16 tokens: a 14-byte ``.bin``."""
    return build_dataset(tmp_path / "p", [[[1, 2, 3], [4]], [[5, 6, 7]]])


def truncate(prefix: str, size: int) -> None:
    with open(prefix + ".bin", "r+b") as f:
        f.truncate(size)


def test_a_complete_pack_passes_and_a_truncated_one_is_named(pack: str) -> None:
    assert check_complete(pack).num_sequences == 3
    truncate(pack, 10)
    with pytest.raises(IndexedDatasetError) as err:
        check_complete(pack)
    message = str(err.value)
    assert message.startswith(f"{pack}.bin: truncated: 10 bytes, its index {pack}.idx says 14 ")
    assert message.endswith("(7 tokens of uint16); " + idd.REBUILD)
    truncate(pack, 16)
    with pytest.raises(IndexedDatasetError, match="longer than its index says: 16 bytes"):
        check_complete(pack)


@pytest.mark.parametrize("missing", ["bin", "idx"])
def test_a_missing_file_is_named(pack: str, missing: str) -> None:
    os.remove(f"{pack}.{missing}")
    other = "idx" if missing == "bin" else "bin"
    with pytest.raises(IndexedDatasetError) as err:
        check_complete(pack)
    assert str(err.value) == f"{pack}.{missing}: missing ({pack}.{other} is there); {idd.REBUILD}"


def test_merge_names_a_truncated_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pack = build_dataset(tmp_path / "s", [[[1, 2, 3], [4]], [[5, 6, 7]]])
    truncate(pack, 12)
    out = ["--output", str(tmp_path / "m")]
    for log in ([], ["--log", str(tmp_path / "m.json")]):  # the log's fingerprints read the inputs first
        assert snakepack(["merge", *out, *log, pack]) == 2
        err = capsys.readouterr().err
        assert f"{pack}.bin: truncated: 12 bytes, its index {pack}.idx says 14 (7 tokens of uint16); " in err
        assert err.rstrip().endswith(idd.REBUILD)
        assert not (tmp_path / "m.bin").exists()
    os.remove(pack + ".idx")
    assert snakepack(["merge", *out, "--log", str(tmp_path / "m.json"), pack]) == 2
    assert f"{pack}.idx: missing ({pack}.bin is there); {idd.REBUILD}" in capsys.readouterr().err


def test_a_pack_names_a_truncated_source(tmp_path: Path) -> None:
    source = build_dataset(tmp_path / "en_web", [[[1, 2, 3]], [[4, 5]]])
    spec = {"name": "p", "start": {}, "shuffle": False, "budget": 5, "state_after": {}}
    spec["slices"] = [{"prefix": source, "source": "en_web", "name": "s", "ranges": [[0, 0, 2]]}]
    truncate(source, 4)
    with pytest.raises(IndexedDatasetError) as err:
        packer.write_pack(spec, tmp_path / "out" / "p")
    assert str(err.value) == (
        f"{source}.bin: truncated: 4 bytes, its index {source}.idx says 10 (5 tokens of uint16); "
        + packer.SOURCE_FIX
    )
    assert not (tmp_path / "out").exists()


def test_a_segment_names_a_truncated_pack_before_the_trainer_starts(pack: str, tmp_path: Path) -> None:
    from workflow_scripts.train import segment

    keys = tmp_path / "keys.json"
    values = {
        "iteration_offset": 0,
        "train_iters": 4,
        "exit_interval": 4,
        "save": str(tmp_path / "ckpt"),
        "train_data_paths": [pack],
        "valid_data_paths": [pack],
    }
    keys.write_text(
        json.dumps(
            {"config": "c.yml", "summary": {"pack": "p"}, "set": {k: {"value": v} for k, v in values.items()}}
        )
    )
    started = tmp_path / "started"
    argv = ["--keys", str(keys), "--segment", "0", "--segments", "1", "--record", str(tmp_path / "r.json")]
    truncate(pack, 2)
    with pytest.raises(IndexedDatasetError, match=f"^{pack}.bin: truncated: 2 bytes, its index"):
        segment.main([*argv, "--launch", f"touch {started}"])
    assert not started.exists()
