"""Language probabilities and domain rates become per-source probabilities (seed 001's blend mode)."""

import os

import pytest

from workflow_scripts.datapacks.mixture import (
    MixtureError,
    compute_shares,
    megatron_data_path,
    mixture_report,
    neox_blend,
)


def entry(lang: str, domain: str, tokens: int, sub: str = "x", split: int = 0) -> dict:
    name = f"{lang}_{domain}_{sub}_split_{split:04d}_text_document"
    return {"prefix": f"tok/{name}", "name": name, "lang": lang, "domain": domain, "tokens": tokens}


SIGNATURE = [
    entry("en", "books", 100),
    entry("en", "code", 300),
    entry("en", "web", 600),
    entry("ar", "news", 50),
    entry("ar", "web", 150),
]


def probs(mixture: dict) -> dict[str, float]:
    return {f"{s.lang}/{s.domain}": s.probability for s in compute_shares(SIGNATURE, mixture)}


def test_natural_shares_without_ratios() -> None:
    p = probs({})
    assert p["en/web"] == pytest.approx(600 / 1200)
    assert sum(p.values()) == pytest.approx(1.0)


def test_per_language_data_ratio_and_lang_prob() -> None:
    p = probs({"lang_prob": {"en": 0.7, "ar": 0.3}, "data_ratio": {"en": {"code": 2}, "ar": {"news": 3}}})
    en_total = 100 + 2 * 300 + 600
    assert p["en/code"] == pytest.approx(0.7 * 600 / en_total)
    assert p["en/books"] == pytest.approx(0.7 * 100 / en_total)
    assert p["ar/news"] == pytest.approx(0.3 * 150 / (150 + 150))
    assert sum(p.values()) == pytest.approx(1.0)


def test_flat_data_ratio_applies_to_every_language() -> None:
    p = probs({"lang_prob": {"en": 0.5, "ar": 0.5}, "data_ratio": {"web": 2}})
    assert p["en/web"] == pytest.approx(0.5 * 1200 / (100 + 300 + 1200))
    assert p["ar/web"] == pytest.approx(0.5 * 300 / (50 + 300))


def test_exclude_by_prefix_and_pattern() -> None:
    p = probs({"exclude": ["en_code", "*_news_*"]})
    assert set(p) == {"en/books", "en/web", "ar/web"}
    assert p["ar/web"] == pytest.approx(150 / 850)


def test_language_without_tokens_is_an_error() -> None:
    with pytest.raises(MixtureError, match="de"):
        compute_shares(SIGNATURE, {"lang_prob": {"en": 0.5, "de": 0.5}})


def test_both_trainer_forms_and_neox_path_limit() -> None:
    shares = compute_shares(SIGNATURE, {})
    args = megatron_data_path(shares)
    assert args[1] == os.path.abspath("tok/en_books_x_split_0000_text_document")
    assert float(args[0]) == pytest.approx(100 / 1200)
    neox = neox_blend(shares)
    assert neox["train_data_paths"] == args[1::2]
    many = [entry("en", "web", 10, split=i) for i in range(255)]
    with pytest.raises(MixtureError, match="at most 254"):
        neox_blend(compute_shares(many, {}))
    report = mixture_report("big", many, {})
    assert report["neox"] is None and "254" in report["neox_error"]


def test_typos_in_data_ratio_are_errors_not_rate_one() -> None:
    with pytest.raises(MixtureError, match="mixes"):
        compute_shares(SIGNATURE, {"data_ratio": {"en": {"code": 3}, "web": 1}})
    with pytest.raises(MixtureError, match="nwes"):
        compute_shares(SIGNATURE, {"data_ratio": {"nwes": 2}})
    with pytest.raises(MixtureError, match="books"):
        compute_shares(SIGNATURE, {"data_ratio": {"ar": {"web": 2, "books": 1}}})
    with pytest.raises(MixtureError, match="'de'"):
        compute_shares(SIGNATURE, {"data_ratio": {"de": {"web": 2}}})
