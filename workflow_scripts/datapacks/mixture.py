"""Language and domain ratios to per-source sampling probabilities (seed 001's "blend" mode).

A mixture names language probabilities (``lang_prob``), domain sampling rates (``data_ratio``, either per
language ``{lang: {domain: rate}}`` or flat ``{domain: rate}``) and an ``exclude`` list of prefix patterns.
Within a language, a source's share is proportional to ``tokens * rate(domain)``: a rate of 1 keeps a
domain's natural share per token, 2 samples it twice as often. A language's sources together get its
``lang_prob``. Without ``lang_prob`` languages keep their natural token shares (after the domain rates).
"""

from __future__ import annotations

import argparse
import fnmatch
import os
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import orjson

from workflow_scripts.core import naming
from workflow_scripts.core.cli import UserError
from workflow_scripts.core.fsio import read_json, write_json

NEOX_MAX_PATHS = 254  # GPT-NeoX BlendableDataset indexes datasets with uint8 and asserts < 255


class MixtureError(UserError, ValueError):
    """A mixture that cannot be computed from the data signature."""


@dataclass(frozen=True)
class Share:
    """One source prefix and its sampling probability in a mixture."""

    prefix: str
    lang: str
    domain: str
    tokens: int
    rate: float
    probability: float


def domain_rate(data_ratio: dict[str, Any], lang: str, domain: str) -> float:
    """The sampling rate of ``domain`` in ``lang``; ``data_ratio`` is per language or flat, default 1."""
    if data_ratio and all(isinstance(v, dict) for v in data_ratio.values()):
        return float(data_ratio.get(lang, {}).get(domain, 1.0))
    return float(data_ratio.get(domain, 1.0))


def is_excluded(prefix: str, patterns: list[str]) -> bool:
    """True when the prefix's name starts with, or matches (fnmatch), one of the patterns."""
    name = prefix.rsplit("/", 1)[-1]
    return any(name.startswith(p) or fnmatch.fnmatchcase(name, p) for p in patterns)


def check_data_ratio(signature: list[dict[str, Any]], data_ratio: dict[str, Any]) -> None:
    """Refuse a data_ratio that mixes its two forms or names a language or domain the data lacks."""
    nested = [isinstance(v, dict) for v in data_ratio.values()]
    if any(nested) and not all(nested):
        raise MixtureError("data_ratio mixes {lang: {domain: rate}} and {domain: rate}; use one form")
    domains = {(e["lang"], e["domain"]) for e in signature}
    known = {d for _, d in domains}
    for key, value in data_ratio.items():
        if isinstance(value, dict):
            if key not in {lang for lang, _ in domains}:
                raise MixtureError(f"data_ratio names language {key!r}, which has no data")
            unknown = sorted(d for d in value if (key, d) not in domains)
        else:
            unknown = [key] if key not in known else []
        if unknown:
            raise MixtureError(f"data_ratio names domain(s) {', '.join(unknown)} without data (a typo?)")


def check_config(mixtures: dict[str, Any], phases: list[dict[str, Any]], groups: list[str]) -> None:
    """What is knowable from the config alone, checked before anything runs: every phase names a known
    mixture, and every mixture names only languages and domains that some source group declares."""
    for i, phase in enumerate(phases):
        if phase["mixture"] not in mixtures:
            raise MixtureError(
                f"datapacks.phases[{i}] ({phase['name']}) uses mixture {phase['mixture']!r}; "
                f"the mixtures are: {', '.join(sorted(mixtures)) or 'none'}"
            )
    declared = [naming.parse_group(g) for g in groups]
    langs = {d["lang"] for d in declared}
    for name, mixture in mixtures.items():
        unknown = sorted(
            lang for lang, p in (mixture.get("lang_prob") or {}).items() if p and lang not in langs
        )
        if unknown:
            raise MixtureError(
                f"mixtures.{name}.lang_prob names {', '.join(unknown)}, which no source declares "
                f"(the languages are: {', '.join(sorted(langs))})"
            )
        try:
            check_data_ratio(declared, mixture.get("data_ratio") or {})
        except MixtureError as err:
            raise MixtureError(f"mixtures.{name}: {err}") from None


def compute_shares(signature: list[dict[str, Any]], mixture: dict[str, Any]) -> list[Share]:
    """Per-prefix probabilities (summing to 1) for one mixture over a data signature."""
    lang_prob: dict[str, float] = {k: float(v) for k, v in (mixture.get("lang_prob") or {}).items()}
    data_ratio = mixture.get("data_ratio") or {}
    exclude = list(mixture.get("exclude") or [])
    check_data_ratio(signature, data_ratio)
    for value in (lang_prob | _flat_rates(data_ratio)).values():
        if value < 0:
            raise MixtureError(f"negative probability or rate in mixture: {value}")
    kept = [e for e in signature if not is_excluded(e["prefix"], exclude) and e["tokens"] > 0]
    if lang_prob:
        kept = [e for e in kept if lang_prob.get(e["lang"], 0.0) > 0]
    weights = [e["tokens"] * domain_rate(data_ratio, e["lang"], e["domain"]) for e in kept]
    by_lang: dict[str, float] = defaultdict(float)
    for entry, weight in zip(kept, weights, strict=True):
        by_lang[entry["lang"]] += weight
    if lang_prob:
        missing = sorted(lang for lang, p in lang_prob.items() if p > 0 and by_lang.get(lang, 0.0) == 0)
        if missing:
            raise MixtureError(
                f"lang_prob names languages with no (non-excluded) tokens: {', '.join(missing)}"
            )
        total_p = sum(lang_prob[lang] for lang in by_lang)
        lang_share = {lang: lang_prob[lang] / total_p for lang in by_lang}
    else:
        total_w = sum(by_lang.values())
        lang_share = {lang: w / total_w for lang, w in by_lang.items()} if total_w else {}
    if not kept or not any(weights):
        raise MixtureError("the mixture selects no tokens (everything excluded or weighted 0)")
    return [
        Share(
            e["prefix"],
            e["lang"],
            e["domain"],
            int(e["tokens"]),
            domain_rate(data_ratio, e["lang"], e["domain"]),
            lang_share[e["lang"]] * w / by_lang[e["lang"]],
        )
        for e, w in zip(kept, weights, strict=True)
        if w > 0
    ]


def _flat_rates(data_ratio: dict[str, Any]) -> dict[str, float]:
    flat: dict[str, float] = {}
    for key, value in data_ratio.items():
        if isinstance(value, dict):
            flat |= {f"{key}/{d}": float(r) for d, r in value.items()}
        else:
            flat[key] = float(value)
    return flat


def megatron_data_path(shares: list[Share]) -> list[str]:
    """Megatron-LM ``--data-path w1 p1 w2 p2 ...`` arguments (absolute paths: trainers run elsewhere)."""
    return [x for s in shares for x in (f"{s.probability:.12g}", os.path.abspath(s.prefix))]


def neox_blend(shares: list[Share]) -> dict[str, Any]:
    """GPT-NeoX ``train_data_paths`` / ``train_data_weights``; refuses more paths than NeoX accepts."""
    if len(shares) > NEOX_MAX_PATHS:
        raise MixtureError(
            f"GPT-NeoX takes at most {NEOX_MAX_PATHS} train_data_paths, this mixture has {len(shares)}: "
            "merge sources per pack (the datapacks mode) or exclude some"
        )
    return {
        "train_data_paths": [os.path.abspath(s.prefix) for s in shares],
        "train_data_weights": [round(s.probability, 12) for s in shares],
    }


def mixture_report(name: str, signature: list[dict[str, Any]], mixture: dict[str, Any]) -> dict[str, Any]:
    """The mixture in both trainer forms, with per-language and per-domain probabilities and token shares."""
    shares = compute_shares(signature, mixture)
    by_lang: dict[str, float] = defaultdict(float)
    by_domain: dict[str, float] = defaultdict(float)
    for s in shares:
        by_lang[s.lang] += s.probability
        by_domain[f"{s.lang}/{s.domain}"] += s.probability
    report: dict[str, Any] = {
        "name": name,
        "sources": [s.__dict__ for s in shares],
        "by_lang": dict(sorted(by_lang.items())),
        "by_domain": dict(sorted(by_domain.items())),
        "megatron_data_path": megatron_data_path(shares),
        "excluded": sorted(
            e["prefix"] for e in signature if is_excluded(e["prefix"], mixture.get("exclude") or [])
        ),
    }
    try:
        report["neox"] = neox_blend(shares)
    except MixtureError as err:
        report["neox"] = None
        report["neox_error"] = str(err)
    return report


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Compute a named mixture's per-source probabilities.")
    parser.add_argument("--signature", required=True, help="data signature JSON from the count stage")
    parser.add_argument("--name", required=True)
    parser.add_argument("--mixture-json", required=True, help="the mixture: lang_prob, data_ratio, exclude")
    parser.add_argument("--output", required=True)
    args = parser.parse_args(argv)
    try:
        mixture = orjson.loads(args.mixture_json)
    except orjson.JSONDecodeError as err:
        raise MixtureError(f"--mixture-json is not JSON: {err}") from None
    report = mixture_report(args.name, read_json(args.signature)["prefixes"], mixture)
    write_json(args.output, report)
    if report["neox"] is None:
        print(f"warning: {report['neox_error']}")
