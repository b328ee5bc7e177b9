"""Dedup step 0, one job per run: the resolved parameters every signature job uses.

Resolving them costs a datasketch import (it imports scipy: about 0.4 s) and the LSH shape's integrals
(about 0.3 s). Paid once here instead of in every shard's job: the JSON written here holds the settings with
the LSH shape filled in and datasketch's ``affine32`` permutations for ``num_perm`` and ``seed``.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass

import numpy as np

from workflow_scripts.core import settings
from workflow_scripts.core.fsio import read_json, write_json
from workflow_scripts.dedup.settings import DedupSettings


def permutations(num_perm: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """datasketch's affine32 permutation parameters (a, b), uint32."""
    from datasketch import MinHash  # imports scipy: only where parameters are resolved

    a, b = MinHash(num_perm=num_perm, seed=seed, scheme="affine32").permutations
    return a.astype(np.uint32), b.astype(np.uint32)


@dataclass(frozen=True)
class DedupParams:
    """Settings with the LSH shape resolved, and the MinHash permutations they imply."""

    settings: DedupSettings
    perms: tuple[np.ndarray, np.ndarray]

    @classmethod
    def resolve(cls, given: DedupSettings) -> DedupParams:
        resolved = given.resolved()
        return cls(resolved, permutations(resolved.num_perm, resolved.seed))

    def write(self, path: str | os.PathLike[str]) -> None:
        a, b = self.perms
        write_json(path, {"settings": self.settings.to_json(), "perm_a": a.tolist(), "perm_b": b.tolist()})

    @classmethod
    def read(cls, path: str | os.PathLike[str]) -> DedupParams:
        obj = read_json(path)
        perms = (np.array(obj["perm_a"], dtype=np.uint32), np.array(obj["perm_b"], dtype=np.uint32))
        return cls(DedupSettings.from_json(obj["settings"]), perms)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", required=True, help="parameters file (JSON) to write")
    settings.add_arguments(parser, DedupSettings, "dedup settings")
    args = parser.parse_args(argv)
    DedupParams.resolve(settings.from_args(DedupSettings, args)).write(args.output)
