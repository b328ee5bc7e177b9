"""Dedup settings: one dataclass (defaults from config/schema.yaml's ``dedup``) and the LSH shape; and the
files the rules wait for (the cluster step's pair files, a filter batch's assignments)."""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from workflow_scripts.core import naming
from workflow_scripts.core.cli import UserError
from workflow_scripts.core.settings import schema_entry, setting

SCOPES = tuple(schema_entry("dedup", "scope")["enum"])
VERIFY = tuple(schema_entry("dedup", "verify")["enum"])


class DedupError(UserError, ValueError):
    """Dedup settings or inputs that cannot work."""


@dataclass(frozen=True)
class DedupSettings:
    """Everything that decides which documents are duplicates; stored in every signature file."""

    threshold: float = setting("dedup", "threshold")
    num_perm: int = setting("dedup", "num_perm")
    ngram: int = setting("dedup", "ngram")
    char_ngram: int = setting("dedup", "char_ngram")
    char_langs: tuple[str, ...] = setting("dedup", "char_langs")
    seed: int = setting("", "seed")
    bands: int = setting("dedup", "bands")
    rows: int = setting("dedup", "rows")
    lsh_recall: float = setting("dedup", "lsh_recall")
    scope: str = setting("dedup", "scope")
    lowercase: bool = setting("dedup", "lowercase")
    nfkc: bool = setting("dedup", "nfkc")
    punctuation: bool = setting("dedup", "punctuation")
    digits: bool = setting("dedup", "digits")
    exact: bool = setting("dedup", "exact")
    verify: str = setting("dedup", "verify")
    bucket_cap: int = setting("dedup", "bucket_cap")

    def __post_init__(self) -> None:
        object.__setattr__(self, "char_langs", tuple(sorted(set(self.char_langs))))
        if not 0 < self.threshold <= 1:
            raise DedupError("threshold must be in (0, 1]")
        if self.scope not in SCOPES or self.verify not in VERIFY:
            raise DedupError(f"scope must be one of {SCOPES}, verify one of {VERIFY}")
        if min(self.num_perm, self.ngram, self.char_ngram, self.bucket_cap) < 1 or self.bucket_cap < 2:
            raise DedupError("num_perm, ngram, char_ngram must be >= 1 and bucket_cap >= 2")
        if bool(self.bands) != bool(self.rows) or self.bands * self.rows > self.num_perm:
            raise DedupError("give both bands and rows (bands * rows <= num_perm) or neither")

    def lsh_shape(self) -> tuple[int, int]:
        """(bands, rows): explicit, else ``optimal_param`` (datasketch's choice of MinHashLSH parameters).

        Without verification it is optimal_param(threshold). With exact-Jaccard verification false positives
        only cost time, so it is optimal_param at the highest LSH threshold (0.01 steps, by bisection) whose
        candidate probability for a pair at ``threshold``, 1 - (1 - t^r)^b, reaches ``lsh_recall``.
        """
        if self.bands:
            return self.bands, self.rows

        def shape(lsh_threshold: float) -> tuple[int, int]:
            return optimal_param(lsh_threshold, self.num_perm)

        def enough(b_r: tuple[int, int]) -> bool:
            return 1 - (1 - self.threshold ** b_r[1]) ** b_r[0] >= self.lsh_recall

        if self.verify == "none" or enough(shape(self.threshold)):
            return shape(self.threshold)
        lo, hi = (
            1,
            math.ceil(self.threshold * 100),
        )  # hundredths: lo is enough, hi is not (recall falls as it rises)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if enough(shape(mid / 100)) else (lo, mid)
        return shape(lo / 100)

    def resolved(self) -> DedupSettings:
        """A copy with bands and rows filled in."""
        b, r = self.lsh_shape()
        return dataclasses.replace(self, bands=b, rows=r)

    def to_json(self) -> dict[str, Any]:
        """The settings as a JSON object (stored in signature files, compared between them)."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> DedupSettings:
        """Inverse of ``to_json``."""
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in obj.items()})


def optimal_param(threshold: float, num_perm: int) -> tuple[int, int]:
    """(bands, rows) with ``bands * rows <= num_perm`` minimizing the sum of the false-positive and
    false-negative areas of the S-curve ``1 - (1 - s^rows)^bands`` around ``threshold`` (equal weights):
    the rule datasketch's MinHashLSH uses, so that the shapes agree with it."""
    from scipy.integrate import quad

    def area(b: int, r: int, lo: float, hi: float, above: bool) -> float:
        def curve(s: float) -> float:
            p = 1 - (1 - s ** float(r)) ** float(b)
            return 1 - p if above else p

        return quad(curve, lo, hi)[0]

    best, shape = float("inf"), (0, 0)
    for b in range(1, num_perm + 1):
        for r in range(1, num_perm // b + 1):
            error = 0.5 * area(b, r, 0.0, threshold, False) + 0.5 * area(b, r, threshold, 1.0, True)
            if error < best:
                best, shape = error, (b, r)
    return shape


def assignment_waits(assign_dir: str, shards: Iterable[str], summary: str) -> list[str]:
    """What a filter batch waits for once the cluster step ran: each shard's assignment file (rewritten only
    when the shard's outcome changes) and, while some shard has none yet, the cluster's ``summary``."""
    paths = [f"{assign_dir}/{naming.shard_stem(shard)}.assign.json" for shard in shards]
    found = [path for path in paths if os.path.exists(path)]
    return found if len(found) == len(paths) else [*found, summary]


def pair_files(work: str, partitions: int, band_groups: int) -> list[str]:
    """The pair files the cluster step reads: the exact pass's partitions, then each band group's."""
    parts = range(partitions)
    exact = [f"{work}/pairs/exact_{p}.pairs" for p in parts]
    return exact + [f"{work}/pairs/bands_{g}_{p}.pairs" for g in range(band_groups) for p in parts]
