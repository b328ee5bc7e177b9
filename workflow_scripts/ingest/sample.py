"""The embedded sample: a small, deterministic, vendor-like multilingual delivery.

It is the default input of the workflow, so a fresh checkout runs end to end with nothing downloaded.
Text comes from Faker's per-language word lists (real words of each language, in sentences), shaped per
domain. The delivery mixes formats and shard sizes, and plants what later stages must catch:
exact and near duplicates and a few bad records. ``manifest.json`` lists every planted item.
"""

from __future__ import annotations

import argparse
import random
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

import orjson

from workflow_scripts.core.fsio import atomic_path, open_binary_writer, write_json
from workflow_scripts.core.settings import schema_entry

LOCALES = {"en": "en_US", "de": "de_DE", "fr": "fr_FR", "ru": "ru_RU", "zh": "zh_CN", "ja": "ja_JP"}
NO_SPACE_LANGS = frozenset({"zh", "ja"})
NAME_REGEX = r"^(?P<lang>[a-z]{2})_(?P<domain>[a-z]+)_(?P<subdomain>[a-z0-9]+)_part-\d+"
NEAR_DUP_RATES = (0.01, 0.02, 0.04)


@dataclass(frozen=True)
class SampleFile:
    """One file of the delivery: its group, size in documents and format (by extension)."""

    lang: str
    domain: str
    subdomain: str
    part: int
    docs: int
    ext: str

    @property
    def name(self) -> str:
        return f"{self.lang}_{self.domain}_{self.subdomain}_part-{self.part:05d}.{self.ext}"


def plan(scale: float = 1.0) -> list[SampleFile]:
    """The files of the delivery; a pure function of ``scale`` (used at Snakefile parse time)."""
    spec = [
        ("en", "web", "cc", [(420, "jsonl"), (380, "jsonl.gz"), (30, "jsonl")]),
        ("en", "news", "wire", [(160, "jsonl.zst")]),
        ("en", "wiki", "enwiki", [(220, "parquet")]),
        ("en", "books", "pd", [(60, "txt")]),
        ("de", "web", "cc", [(260, "jsonl"), (25, "jsonl")]),
        ("de", "news", "wire", [(120, "jsonl")]),
        ("fr", "wiki", "frwiki", [(150, "jsonl")]),
        ("fr", "books", "pd", [(40, "jsonl")]),
        ("ru", "web", "cc", [(240, "jsonl.gz")]),
        ("ru", "news", "wire", [(110, "jsonl")]),
        ("zh", "web", "cc", [(230, "jsonl")]),
        ("zh", "wiki", "zhwiki", [(90, "jsonl")]),
        ("ja", "news", "wire", [(80, "jsonl")]),
        ("ja", "books", "aozora", [(50, "jsonl")]),
    ]
    files = []
    for lang, domain, sub, parts in spec:
        for part, (docs, ext) in enumerate(parts, start=1):
            files.append(SampleFile(lang, domain, sub, part, max(2, round(docs * scale)), ext))
    return files


def _join(lang: str, pieces: list[str]) -> str:
    return "".join(pieces) if lang in NO_SPACE_LANGS else " ".join(pieces)


def _paragraphs(fake: Any, rng: random.Random, n: int, sentences: tuple[int, int]) -> list[str]:
    return [fake.paragraph(nb_sentences=rng.randint(*sentences)) for _ in range(n)]


def _web(fake: Any, rng: random.Random, lang: str) -> str:
    parts = [fake.sentence(nb_words=rng.randint(4, 9)).rstrip(".")]
    parts += _paragraphs(fake, rng, rng.randint(3, 7), (4, 9))
    if rng.random() < 0.5:
        parts.append(f"{fake.url()} · {fake.email()}")
    return "\n\n".join(parts)


def _news(fake: Any, rng: random.Random, lang: str) -> str:
    headline = fake.sentence(nb_words=rng.randint(6, 11)).rstrip(".")
    dateline = _join(lang, [fake.city(), str(fake.date_between(date(2021, 1, 1), date(2025, 12, 31))), "—"])
    body = _paragraphs(fake, rng, rng.randint(3, 6), (3, 7))
    quote = _join(lang, [fake.name(), "(" + fake.company() + "):", fake.sentence(nb_words=10)])
    return "\n\n".join([headline, _join(lang, [dateline, body[0]]), *body[1:], quote])


def _wiki(fake: Any, rng: random.Random, lang: str) -> str:
    title = fake.word().capitalize() + ("" if lang in NO_SPACE_LANGS else " " + fake.word())
    parts = [title, _join(lang, [title, fake.sentence(nb_words=14)])]
    for _ in range(rng.randint(2, 4)):
        parts.append(f"== {fake.word().capitalize()} ==")
        parts += _paragraphs(fake, rng, rng.randint(1, 3), (3, 6))
    return "\n\n".join(parts)


def _books(fake: Any, rng: random.Random, lang: str) -> str:
    parts = []
    for _ in range(rng.randint(4, 8)):
        parts.append(fake.paragraph(nb_sentences=rng.randint(5, 12)))
        if rng.random() < 0.4:
            parts.append("— " + fake.sentence(nb_words=rng.randint(5, 12)))
    return "\n".join(parts)


DOMAINS: dict[str, Callable[[Any, random.Random, str], str]] = {
    "web": _web,
    "news": _news,
    "wiki": _wiki,
    "books": _books,
}


def near_duplicate(text: str, rate: float, rng: random.Random, lang: str) -> str:
    """Edit ``text`` at ``rate``: replace, delete or duplicate words (characters for CJK)."""
    units = list(text) if lang in NO_SPACE_LANGS else text.split(" ")
    out: list[str] = []
    for unit in units:
        roll = rng.random()
        if roll < rate / 3:
            continue
        if roll < 2 * rate / 3:
            out.append(units[rng.randrange(len(units))])
        elif roll < rate:
            out += [unit, unit]
        else:
            out.append(unit)
    return _join(lang, out)


def _docs_for(f: SampleFile, seed: int) -> list[dict[str, Any]]:
    from faker import Faker

    fake = Faker(LOCALES[f.lang])
    file_seed = seed ^ zlib.crc32(f.name.encode())
    fake.seed_instance(file_seed)
    rng = random.Random(file_seed)
    make = DOMAINS[f.domain]
    return [
        {"id": f"{f.lang}-{f.domain}-{f.subdomain}-{f.part}-{i:05d}", "text": make(fake, rng, f.lang)}
        for i in range(f.docs)
    ]


def _plant_duplicates(
    docs: dict[str, list[dict[str, Any]]], files: list[SampleFile], seed: int
) -> dict[str, list[dict[str, Any]]]:
    """Append exact and near copies of some documents to other files of the same language."""
    rng = random.Random(seed)
    exact: list[dict[str, Any]] = []
    near: list[dict[str, Any]] = []
    id_files = [f for f in files if f.ext != "txt"]
    for f in id_files:
        same_lang = [g for g in id_files if g.lang == f.lang]
        for k in range(max(1, f.docs // 40)):
            original = docs[f.name][rng.randrange(len(docs[f.name]) // 2)]
            target = same_lang[rng.randrange(len(same_lang))]
            if k % 2 == 0:
                copy = {"id": f"{original['id']}-exact{k}", "text": original["text"]}
                exact.append({"id": copy["id"], "original": original["id"], "file": target.name})
            else:
                rate = NEAR_DUP_RATES[k // 2 % len(NEAR_DUP_RATES)]
                text = near_duplicate(original["text"], rate, rng, f.lang)
                copy = {"id": f"{original['id']}-near{k}", "text": text}
                near.append({"id": copy["id"], "original": original["id"], "file": target.name, "rate": rate})
            docs[target.name].append(copy)
    return {"exact_duplicates": exact, "near_duplicates": near}


BAD_LINES = [
    ("malformed_json", b'{"id": "bad-json", "text": "this line is cut off'),
    ("missing_text", b'{"id": "bad-notext", "body": "the text sits under the wrong key"}'),
    ("empty_text", b'{"id": "bad-empty", "text": "   "}'),
]


def _write_file(path: Path, f: SampleFile, docs: list[dict[str, Any]], bad: bool) -> list[dict[str, Any]]:
    """Write one delivery file in its format; return the planted bad records with their line numbers."""
    planted: list[dict[str, Any]] = []
    with atomic_path(path) as tmp:
        if f.ext == "parquet":
            import pyarrow as pa
            import pyarrow.parquet as pq

            pq.write_table(pa.Table.from_pylist(docs), tmp, row_group_size=64)
            return planted
        lines = (
            [d["text"].replace("\n", " ").encode() for d in docs]
            if f.ext == "txt"
            else [orjson.dumps(d) for d in docs]
        )
        if bad:
            for k, (reason, raw) in enumerate(BAD_LINES):
                at = (k + 1) * len(lines) // (len(BAD_LINES) + 1) + k
                lines.insert(at, raw)
                planted.append({"file": f.name, "line": at + 1, "reason": reason})
        with open_binary_writer(tmp) as out:
            out.write(b"\n".join(lines) + b"\n")
    return planted


def generate(output_dir: str | Path, seed: int = 1234, scale: float = 1.0) -> dict[str, Any]:
    """Write the delivery and ``manifest.json`` into ``output_dir``; return the manifest."""
    out = Path(output_dir)
    files = plan(scale)
    docs = {f.name: _docs_for(f, seed) for f in files}
    manifest: dict[str, Any] = {"seed": seed, "scale": scale, "name_regex": NAME_REGEX}
    manifest.update(_plant_duplicates(docs, files, seed))
    bad_file = next(f.name for f in files if f.ext == "jsonl")
    manifest["bad_records"] = []
    manifest["files"] = []
    for f in files:
        manifest["bad_records"] += _write_file(out / f.name, f, docs[f.name], bad=f.name == bad_file)
        manifest["files"].append({"name": f.name, "docs": len(docs[f.name]), "format": f.ext})
    write_json(out / "manifest.json", manifest)
    return manifest


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output-dir", required=True)
    parser.add_argument("--seed", type=int, default=schema_entry("", "seed")["default"])
    parser.add_argument(
        "--scale",
        type=float,
        default=schema_entry("sample", "scale")["default"],
        help="multiply every file's document count",
    )
    args = parser.parse_args(argv)
    manifest = generate(args.output_dir, args.seed, args.scale)
    total = sum(f["docs"] for f in manifest["files"])
    print(f"sample: {len(manifest['files'])} files, {total} documents in {args.output_dir}")
