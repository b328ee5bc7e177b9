"""A pack's cheap completeness check (its ``.bin`` size against its ``.idx``) where it is used: merging,
slicing (its source) and training (before a segment starts): a missing or truncated file is named with its
path, the expected and actual size and the fix."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.utils import build_dataset
from workflow_scripts.cli import main as snakepack
from workflow_scripts.core.indexed_dataset import IndexedDatasetError, check_complete


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
    assert "(7 tokens of uint16)" in message and "delete it (and its .idx) and rerun" in message
    truncate(pack, 16)
    with pytest.raises(IndexedDatasetError, match="longer than its index says: 16 bytes"):
        check_complete(pack)


@pytest.mark.parametrize("missing", ["bin", "idx"])
def test_a_missing_file_is_named(pack: str, missing: str) -> None:
    os.remove(f"{pack}.{missing}")
    other = "idx" if missing == "bin" else "bin"
    with pytest.raises(IndexedDatasetError) as err:
        check_complete(pack)
    assert (
        str(err.value)
        == f"{pack}.{missing}: missing ({pack}.{other} is there); rerun: Snakemake makes it again"
    )


def test_merge_names_a_truncated_input(pack: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    truncate(pack, 12)
    assert snakepack(["merge", "--output", str(tmp_path / "m"), pack]) == 2
    err = capsys.readouterr().err
    assert f"{pack}.bin: truncated: 12 bytes, its index {pack}.idx says 14 " in err
    assert "rerun" in err and not (tmp_path / "m.bin").exists()


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
