"""Normalization and shingling: the compiled code against a plain per-document reference."""

from __future__ import annotations

import random
import re
import unicodedata

import numpy as np
import pytest

from workflow_scripts.dedup.text import UNSTABLE_BELOW, Shingler, exact_hashes, nfkc

M64 = (1 << 64) - 1
UNIT_BASE, GRAM_BASE = 0x100000001B3, 0x9E3779B97F4A7C15  # the polynomials' bases (dedup/text.py)


def _fmix(h: int) -> int:
    h ^= h >> 33
    h = (h * 0xFF51AFD7ED558CCD) & M64
    h ^= h >> 33
    h = (h * 0xC4CEB9FE1A85EC53) & M64
    return h ^ (h >> 33)


def reference_units(text: str, char: bool, sh: Shingler) -> list[str]:
    """Straightforward normalization: NFKC, lower, numbers -> 0, punctuation/symbols -> space, split."""
    if sh.nfkc:
        text = unicodedata.normalize("NFKC", text)
    if sh.lowercase:
        text = text.lower()
    if sh.digits:
        text = re.sub(r"\d+(?:[.,]\d+)*", "0", text)
    if sh.punctuation:
        text = "".join(" " if unicodedata.category(c)[0] in "PS" else c for c in text)
    words = text.split()
    return list("".join(words)) if char else words


def reference_shingles(units: list[str], n: int) -> list[int]:
    hashes = []
    for u in units:
        h = sum(ord(c) * pow(UNIT_BASE, i, 1 << 64) for i, c in enumerate(u)) + len(u)
        hashes.append(_fmix(h & M64))
    width = min(n, len(hashes))
    out = []
    for i in range(len(hashes) - width + 1 if hashes else 0):
        h = sum(hashes[i + k] * pow(GRAM_BASE, k, 1 << 64) for k in range(width))
        out.append(_fmix(h & M64))
    return out


def _texts() -> list[tuple[str, bool]]:
    rng = random.Random(7)
    words = [
        "Straße",
        "naïve",
        "ЁЛКА",
        "the",
        "\uff26\uff55\uff4c\uff4c",  # fullwidth "Full"
        "ﬁne",
        "x_y",
        "1,000.5",
        "3.14.15",
        "a.b",
        "42",
        "٣٤",
        "—",
        "!!",
        "🙂",
        "tab\there",
        "new\nline",
        "nbsp\u00a0x",
        "C++",
        "e-mail",
    ]
    texts = [(" ".join(rng.choice(words) for _ in range(rng.randint(0, 30))), False) for _ in range(40)]
    cjk = "的一是不了人我在有他这为之大来以个中上们\uff0c。\uff01「」\uff10\uff11\uff12"  # fullwidth ,!012
    texts += [("".join(rng.choice(cjk + " ") for _ in range(rng.randint(0, 25))), True) for _ in range(20)]
    edges = [("", False), ("...", False), ("one two", False), ("你好", True), ("  ", True)]
    numbers_at_doc_edges = [("a 1", False), ("2 b", False), ("你1", True), ("2.5好", True), ("7", False)]
    return [*texts, *edges, *numbers_at_doc_edges]


@pytest.mark.parametrize(
    "sh",
    [
        Shingler(),
        Shingler(ngram=3, char_ngram=2),
        Shingler(lowercase=False, nfkc=False, punctuation=False, digits=False),
    ],
)
def test_shingles_match_reference(sh: Shingler) -> None:
    texts = _texts()
    char = np.array([c for _, c in texts])
    units, unit_off = sh.units([t for t, _ in texts], char)
    shingles, off = sh.shingles(units, unit_off, char)
    for i, (text, is_char) in enumerate(texts):
        ref = reference_units(text, is_char, sh)
        assert unit_off[i + 1] - unit_off[i] == len(ref), (text, ref)
        expected = reference_shingles(ref, sh.char_ngram if is_char else sh.ngram)
        assert shingles[off[i] : off[i + 1]].tolist() == expected, text


def test_normalization_examples() -> None:
    sh = Shingler(ngram=1)
    one, _ = sh.units(["Price: 3,000.50 EUR (approx.)"], np.array([False]))
    two, _ = sh.units(["price 7 eur approx"], np.array([False]))
    assert one.tolist() == two.tolist()
    upper, _ = Shingler(ngram=1, lowercase=False).units(["Price"], np.array([False]))
    lower, _ = Shingler(ngram=1, lowercase=False).units(["price"], np.array([False]))
    assert upper.tolist() != lower.tolist()


def test_char_shingles_for_char_languages() -> None:
    sh = Shingler(ngram=5, char_ngram=3)
    text = "我们今天去北京。 明天回家"
    units, unit_off = sh.units([text, text], np.array([True, False]))
    _, off = sh.shingles(units, unit_off, np.array([True, False]))
    assert unit_off.tolist() == [0, 11, 13]  # 11 characters; 2 "words" when shingled by words
    assert np.diff(off).tolist() == [9, 1]


def test_exact_hash_ignores_whitespace_and_case_only() -> None:
    sh = Shingler()
    texts = ["Hello,  World!", "hello world", "hello worlds", "hello world"]
    units, unit_off = sh.units(texts, np.zeros(4, dtype=bool))
    seeds = np.array([0, 0, 0, 5], dtype=np.uint64)
    h = [tuple(x) for x in exact_hashes(units, unit_off, seeds).tolist()]
    assert h[0] == h[1] and h[1] != h[2] and h[1] != h[3]


def test_optimal_param_matches_datasketchs_choices() -> None:
    """The shapes datasketch's MinHashLSH picks (equal weights), checked by hand at a few thresholds."""
    from workflow_scripts.dedup.settings import optimal_param

    assert optimal_param(0.85, 128) == (8, 16)
    assert optimal_param(0.5, 128) == (25, 5)
    assert optimal_param(0.9, 256) == (9, 28)


def test_nfkc_line_by_line_is_the_whole_texts_nfkc() -> None:
    rng = random.Random(3)
    pieces = ["e\u0301", "\u0301", "\n", "\n\u0301", "ﬁ", "\uff21", "a", " ", "\u1100\u1161", "\u11a8", "Å"]
    for _ in range(2000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 12)))
        assert nfkc(text) == unicodedata.normalize("NFKC", text), ascii(text)


def test_no_code_point_above_the_unstable_table_changes_or_composes() -> None:
    for c in range(UNSTABLE_BELOW, 0x110000):
        char = chr(c)
        assert not unicodedata.combining(char) and unicodedata.normalize("NFKC", char) == char, hex(c)
        assert not unicodedata.decomposition(char), hex(c)


def test_nfkc_of_real_text_is_the_whole_texts_nfkc() -> None:
    texts = [t for t, _ in _texts()] + ["\uff21\nb\u0301c\nﬁ\n\n\u1100\u1161x", "plain\nascii", "é\n"]
    for text in texts:
        assert nfkc(text) == unicodedata.normalize("NFKC", text), ascii(text)
