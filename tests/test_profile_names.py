"""Profiles by name (`--profile NAME`) and this checkout: Snakemake looks for a name in the working directory
(``./NAME``, not ``./profiles/NAME``) and then in its user config directory, so a name there is shared by
every checkout of the user. The setup (``.ci/profile-names``) links none, removes the links an earlier setup
of this checkout made, and names the checkout each remaining link runs; ``--profile profiles/NAME`` is
always the checkout's own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from snakemake.cli import get_profile_dir

from tests.utils import REPO

SCRIPT = REPO / ".ci" / "profile-names"


def _profile_names(checkout: Path, config_home: Path) -> str:
    env = os.environ | {"XDG_CONFIG_HOME": str(config_home), "SNAKEPACK_PYTHON": sys.executable}
    proc = subprocess.run(["bash", str(SCRIPT)], cwd=checkout, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return proc.stderr


def test_a_relative_profile_path_is_the_checkouts_own_and_a_name_is_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.chdir(REPO)
    assert get_profile_dir("profiles/lumi") == (Path("profiles/lumi"), Path("profiles/lumi/profile.yaml"))
    assert get_profile_dir("lumi") is None  # nothing in ./lumi nor in the (empty) user config directory


def test_the_setup_links_no_name_removes_its_own_and_names_another_checkouts(tmp_path: Path) -> None:
    names = tmp_path / "xdg" / "snakemake"
    names.mkdir(parents=True)
    other = tmp_path / "other"
    (other / "profiles" / "lumi").mkdir(parents=True)
    (names / "local").symlink_to(REPO / "profiles" / "local")  # an earlier setup of this checkout
    (names / "lumi").symlink_to(other / "profiles" / "lumi")  # another live checkout's
    (names / "slurm-local").mkdir()  # the user's own profile

    notes = _profile_names(REPO, tmp_path / "xdg")

    assert sorted(p.name for p in names.iterdir()) == ["lumi", "slurm-local"]
    assert os.readlink(names / "lumi") == str(other / "profiles" / "lumi")
    assert f"removed {names}/local (this checkout's)" in notes
    assert f"--profile lumi (by name) runs {other}/profiles/lumi, another checkout's" in notes
    assert f"--profile slurm-local (by name) runs {names}/slurm-local, not this checkout's" in notes
    assert "--profile profiles/NAME" in notes
    assert _profile_names(REPO, tmp_path / "empty") == ""  # nothing to say where no name is taken
