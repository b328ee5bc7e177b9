"""The docs' maps stay true: every runbook ("seed") the repository cites has its entry in docs/runbooks.md."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUNBOOKS = ROOT / "docs" / "runbooks.md"
TEXT_SUFFIXES = (".py", ".md", ".yaml", ".smk", ".sh")
SEEDS = {f"{n:03d}" for n in range(5)}  # the five runbooks

# "seed 003", "Seed 004's", "seed-003", "SEED_000", "seed000", and lists or ranges: "seeds 000/003",
# "seed 000, 003 and 004", "seed 000-004". Exactly three digits, so "--seed 1234" is no mention.
NUMBER = r"\d{3}(?!\d)"
MENTION = re.compile(
    rf"(?<![A-Za-z0-9])seeds?[ _-]?{NUMBER}(?:\s*(?:/|,|-|\band\b|\bor\b|\bto\b)\s*{NUMBER})*",
    re.IGNORECASE,
)
SECTION = re.compile(r"^## Seed (\d{3}): \S", re.MULTILINE)


def seeds_mentioned(text: str) -> set[str]:
    """The seed numbers a text cites."""
    return {n for match in MENTION.finditer(text) for n in re.findall(r"\d{3}", match.group())}


def tracked_text_files() -> list[Path]:
    """The repository's tracked text files of the kinds that cite seeds (every such file outside a
    git checkout)."""
    try:
        names = subprocess.run(
            ["git", "ls-files", "-z"], cwd=ROOT, check=True, capture_output=True, text=True
        ).stdout.split("\0")
        files = [ROOT / n for n in names if n]
    except (OSError, subprocess.CalledProcessError):
        skip = {".git", ".venv", "results", "logs", "node_modules"}
        files = [p for p in ROOT.rglob("*") if not skip & set(p.relative_to(ROOT).parts)]
    return sorted(p for p in files if p.suffix in TEXT_SUFFIXES and p.is_file())


@pytest.mark.parametrize(
    ("text", "seeds"),
    [
        ("seed 000's warmup pack", {"000"}),
        ("Seed 004's formula, the seed-003 bug", {"003", "004"}),
        ("SEED_000 = {...}; SEED_004_ROUNDS; seed000", {"000", "004"}),
        ("seeds 000/003 and seed 001, 002 and 004", {"000", "001", "002", "003", "004"}),
        ("seed 000-004", {"000", "004"}),
        ("--seed 1234, seed: 42, random_seed=7, seeds 12", set()),
    ],
)
def test_mentions_are_found(text: str, seeds: set[str]) -> None:
    assert seeds_mentioned(text) == seeds


def test_runbooks_has_a_section_per_seed() -> None:
    sections = SECTION.findall(RUNBOOKS.read_text(encoding="utf-8"))
    assert sorted(sections) == sorted(SEEDS), f"docs/runbooks.md's seed sections: {sections}"


def test_every_seed_cited_has_an_entry() -> None:
    documented = set(SECTION.findall(RUNBOOKS.read_text(encoding="utf-8")))
    unknown = [
        f"{path.relative_to(ROOT)}:{line}: seed {seed}"
        for path in tracked_text_files()
        for line, text in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1)
        for seed in sorted(seeds_mentioned(text) - documented)
    ]
    assert not unknown, "seeds cited without a section in docs/runbooks.md:\n" + "\n".join(unknown)
