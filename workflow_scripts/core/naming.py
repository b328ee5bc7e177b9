"""Every name in the results tree, built and parsed here and nowhere else.

=========  ===============================================  =====================================
concept    pattern                                          example
=========  ===============================================  =====================================
group      ``{lang}_{domain}_{subdomain}``                  ``en_web_cc``
shard      ``{group}_split_{NNNN}`` + ``.jsonl[.zst|.gz]``  ``en_web_cc_split_0003.jsonl``
prefix     ``{shard}_{key}_document`` (Megatron's name)     ``en_web_cc_split_0003_text_document``
imported   ``{group}_split_{source}-{NNNN}_text_document``   ``en_books_old_split_prev-0002_text_document``
counted    ``{prefix}_dc={docs}_sc={seqs}_tc={tokens}``     ``..._text_document_dc=9_sc=9_tc=812``
slice      ``{shard}_slice{k}_{first_doc}_{tokens}``        ``en_web_cc_split_0003_slice2_0_4096``
pack       ``{phase}_{k}`` (k counts packs over phases)     ``warmup_0``
validation ``valid_{lang}`` (the held-out documents)        ``valid_en``
=========  ===============================================  =====================================

Each part of a group is ``[a-z0-9]+``. ``WILDCARDS`` gives the rules' wildcard constraints. An imported
prefix (a tokenized source brought by the user) is named like a shard's whose split carries the source's name,
so it can never collide with an ingested shard of the same group.
"""

from __future__ import annotations

import os
import re

from workflow_scripts.core.cli import UserError

GROUP_FIELDS = ("lang", "domain", "subdomain")
PART = r"[a-z0-9]+"
GROUP = rf"{PART}_{PART}_{PART}"
SPLIT = r"\d+"
IMPORTED_SPLIT = rf"{PART}-\d+"
SHARD = rf"{GROUP}_split_{SPLIT}"
IMPORTED = rf"{GROUP}_split_{IMPORTED_SPLIT}"
PHASE = r"[A-Za-z0-9-]+"
PACK = rf"{PHASE}_\d+"
VALIDATION = rf"valid_{PART}"
SHARD_SUFFIXES = (".jsonl.zst", ".jsonl.gz", ".jsonl")
DOCUMENT_KEY = "text"

WILDCARDS = {
    "group": GROUP,
    "batch": r"\d+",  # a per-shard stage's batch of a group's shards (core/batches.py)
    "shard": SHARD,
    "imported": IMPORTED,
    "pack": rf"{PACK}|{VALIDATION}",
    "mixture": r"[A-Za-z0-9_-]+",
    "part": r"\d+",
    "band": r"\d+",
    "chunk": r"\d+",  # a part of a list of every shard that a barrier rule writes
    "export": rf"{PACK}|step\d+",  # a Hugging Face export: a pack's last step, or a milestone
}

_PART = re.compile(PART)
_GROUP = re.compile(rf"(?P<lang>{PART})_(?P<domain>{PART})_(?P<subdomain>{PART})")
_SHARD = re.compile(rf"(?P<group>{GROUP})_split_(?P<split>{SPLIT}|{IMPORTED_SPLIT})")
_PREFIX = re.compile(rf"(?P<shard>{GROUP}_split_(?:{SPLIT}|{IMPORTED_SPLIT}))_(?P<key>[A-Za-z0-9]+)_document")
_COUNTED = re.compile(r"(?P<prefix>.+)_dc=(?P<dc>\d+)_sc=(?P<sc>\d+)_tc=(?P<tc>\d+)")


class BadName(UserError, ValueError):
    """A name that does not follow its pattern."""


def check_part(field: str, value: str | None, where: str) -> str:
    """``value`` if it is a valid group part (``[a-z0-9]+``), else an error naming ``where``."""
    if value is None or not _PART.fullmatch(value):
        raise BadName(f"{where}: {field} {value!r} must match {PART}")
    return value


def group_name(lang: str, domain: str, subdomain: str) -> str:
    """``{lang}_{domain}_{subdomain}``."""
    return f"{lang}_{domain}_{subdomain}"


def parse_group(name: str) -> dict[str, str]:
    """``lang``, ``domain`` and ``subdomain`` of a group name."""
    return _match(_GROUP, name, "{lang}_{domain}_{subdomain}")


def shard_name(group: str, index: int | str) -> str:
    """``{group}_split_{NNNN}``: an int index gets at least four digits, a string is used as is."""
    return f"{group}_split_{index:04d}" if isinstance(index, int) else f"{group}_split_{index}"


def validation_name(lang: str) -> str:
    """The validation pack of a language: ``valid_{lang}``."""
    return f"valid_{lang}"


def imported_name(group: str, source: str, index: int) -> str:
    """The shard-like name of a user's tokenized prefix: ``{group}_split_{source}-{NNNN}``."""
    return shard_name(group, f"{source}-{index:04d}")


def shard_suffix(compress: bool) -> str:
    """The file suffix of ingested shards."""
    return ".jsonl.zst" if compress else ".jsonl"


def shard_stem(path: str | os.PathLike[str]) -> str:
    """A shard file's name without directory and ``.jsonl[.zst|.gz]`` suffix."""
    base = os.path.basename(path)
    for suffix in SHARD_SUFFIXES:
        if base.endswith(suffix):
            return base[: -len(suffix)]
    return base


def shard_file_pattern(group: str) -> re.Pattern[str]:
    """Matches the file names of ``group``'s shards (any suffix)."""
    suffixes = "|".join(map(re.escape, SHARD_SUFFIXES))
    return re.compile(rf"{re.escape(group)}_split_{SPLIT}(?:{suffixes})")


def parse_shard(name: str) -> dict[str, str]:
    """``group``, ``lang``, ``domain``, ``subdomain`` and ``split`` of a shard name or file."""
    fields = _match(_SHARD, shard_stem(name), "{lang}_{domain}_{subdomain}_split_{NNNN}")
    return {**fields, **parse_group(fields["group"])}


def shard_group(name: str) -> str:
    """The group of a shard name or file; a file not named like a shard is its own group."""
    stem = shard_stem(name)
    match = _SHARD.fullmatch(stem)
    return match["group"] if match else stem.split("_split_")[0]


def tokenized_prefix(shard: str, key: str = DOCUMENT_KEY) -> str:  # also used with wildcards
    """Megatron's output name for a shard: ``{shard}_{key}_document``."""
    return f"{shard}_{key}_document"


def parse_prefix(path: str | os.PathLike[str]) -> dict[str, str]:
    """``shard``, ``key`` and the shard's fields of a tokenized prefix (path or name)."""
    name = os.path.basename(path)
    fields = _match(_PREFIX, name, "{lang}_{domain}_{subdomain}_split_{NNNN}_{key}_document", str(path))
    return {**fields, **parse_shard(fields["shard"])}


def counted_name(prefix: str, documents: int, sequences: int, tokens: int) -> str:
    """Seed 001's name: ``{prefix}_dc={documents}_sc={sequences}_tc={tokens}``."""
    return f"{prefix}_dc={documents}_sc={sequences}_tc={tokens}"


def source_name(counted: str) -> str:
    """The shard a counted (or plain) prefix name comes from: its name without counts and key."""
    match = _COUNTED.fullmatch(counted)
    prefix = match["prefix"] if match else counted
    found = _PREFIX.fullmatch(prefix)
    return found["shard"] if found else prefix


def slice_name(source: str, index: int, first_doc: int, tokens: int) -> str:
    """Seed 000's slice name: ``{source}_slice{index}_{first_doc}_{tokens}``."""
    return f"{source}_slice{index}_{first_doc}_{tokens}"


def pack_name(phase: str, index: int) -> str:
    """``{phase}_{index}``; the index counts packs over all phases."""
    return f"{phase}_{index}"


def _match(pattern: re.Pattern[str], name: str, expected: str, where: str | None = None) -> dict[str, str]:
    match = pattern.fullmatch(name)
    if match is None:
        raise BadName(f"{where or name}: name {name!r} does not match {expected}")
    return match.groupdict()
