"""Dedup settings: one dataclass, its command-line options (defaults = the workflow's defaults), LSH shape."""

from __future__ import annotations

import argparse
import dataclasses
import math
from dataclasses import dataclass
from typing import Any

SCOPES = ("global", "lang", "source")
VERIFY = ("jaccard", "none")


@dataclass(frozen=True)
class DedupParams:
    """Everything that decides which documents are duplicates; stored in every signature file."""

    threshold: float = 0.85
    num_perm: int = 128
    ngram: int = 5
    char_ngram: int = 5
    char_langs: tuple[str, ...] = ("ja", "th", "zh")
    seed: int = 1234
    bands: int = 0
    rows: int = 0
    lsh_recall: float = 0.99
    scope: str = "global"
    lowercase: bool = True
    nfkc: bool = True
    punctuation: bool = True
    digits: bool = True
    exact: bool = True
    verify: str = "jaccard"
    bucket_cap: int = 100

    def __post_init__(self) -> None:
        if not 0 < self.threshold <= 1:
            raise ValueError("threshold must be in (0, 1]")
        if self.scope not in SCOPES or self.verify not in VERIFY:
            raise ValueError(f"scope must be one of {SCOPES}, verify one of {VERIFY}")
        if min(self.num_perm, self.ngram, self.char_ngram, self.bucket_cap) < 1 or self.bucket_cap < 2:
            raise ValueError("num_perm, ngram, char_ngram must be >= 1 and bucket_cap >= 2")
        if bool(self.bands) != bool(self.rows) or self.bands * self.rows > self.num_perm:
            raise ValueError("give both bands and rows (bands * rows <= num_perm) or neither")

    def lsh_shape(self) -> tuple[int, int]:
        """(bands, rows): explicit, else datasketch's ``_optimal_param``.

        Without verification it is optimal_param(threshold). With exact-Jaccard verification false positives
        only cost time, so it is optimal_param at the highest LSH threshold (0.01 steps, by bisection) whose
        candidate probability for a pair at ``threshold``, 1 - (1 - t^r)^b, reaches ``lsh_recall``.
        """
        if self.bands:
            return self.bands, self.rows
        from datasketch.lsh import _optimal_param

        def shape(lsh_threshold: float) -> tuple[int, int]:
            return _optimal_param(lsh_threshold, self.num_perm, 0.5, 0.5)

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

    def resolved(self) -> DedupParams:
        """A copy with bands and rows filled in."""
        b, r = self.lsh_shape()
        return dataclasses.replace(self, bands=b, rows=r)

    def to_json(self) -> dict[str, Any]:
        """The settings as a JSON object (stored in signature files, compared between them)."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> DedupParams:
        """Inverse of ``to_json``."""
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in obj.items()})


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add one option per setting; every default is the workflow's default."""
    d = DedupParams()
    g = parser.add_argument_group("dedup settings (defaults in brackets)")
    valued: list[tuple[str, type, Any, str]] = [
        ("--threshold", float, d.threshold, "Jaccard similarity that makes a near duplicate"),
        ("--num-perm", int, d.num_perm, "MinHash permutations"),
        ("--ngram", int, d.ngram, "shingle size in words"),
        ("--char-ngram", int, d.char_ngram, "shingle size in characters, for --char-langs"),
        ("--char-langs", str, ",".join(d.char_langs), "comma-separated languages shingled by characters"),
        ("--seed", int, d.seed, "seed of the MinHash permutations"),
        ("--bands", int, d.bands, "LSH bands; 0: computed (see --lsh-recall)"),
        ("--rows", int, d.rows, "LSH rows per band; 0: computed"),
        (
            "--lsh-recall",
            float,
            d.lsh_recall,
            "with verification: candidate probability of a pair at the "
            "threshold that the computed bands/rows must reach",
        ),
        ("--scope", str, d.scope, "global, or lang / source: pairs count only within one language / source"),
        (
            "--verify",
            str,
            d.verify,
            "jaccard: keep candidates with exact Jaccard >= threshold; none: keep all",
        ),
        ("--bucket-cap", int, d.bucket_cap, "LSH buckets larger than this give star pairs, not all pairs"),
    ]
    for flag, kind, default, text in valued:
        choices = {"--scope": SCOPES, "--verify": VERIFY}.get(flag)
        g.add_argument(flag, type=kind, default=default, choices=choices, help=f"{text} [{default}]")
    for name, what in [
        ("lowercase", "lowercasing"),
        ("nfkc", "Unicode NFKC"),
        ("punctuation", "punctuation and symbol removal"),
        ("digits", "number normalization"),
        ("exact", "the exact-duplicate pass"),
    ]:
        g.add_argument(f"--no-{name}", dest=name, action="store_false", help=f"turn off {what} [on]")


def from_args(args: argparse.Namespace) -> DedupParams:
    """The (resolved) settings given on the command line."""
    fields = {f.name for f in dataclasses.fields(DedupParams)}
    values = {k: v for k, v in vars(args).items() if k in fields}
    values["char_langs"] = tuple(sorted(x for x in values["char_langs"].split(",") if x))
    return DedupParams(**values).resolved()
