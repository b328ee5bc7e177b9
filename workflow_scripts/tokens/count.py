"""COUNT stage: counts of tokenized shards, count-carrying link names, and the data signature.

Usage::

    snakepack count --prefixes P1 P2 ... --links-dir D --signature OUT.json

Each ``P`` is a tokenized prefix named ``{lang}_{domain}_{subdomain}_split_{NNNN}_{key}_document`` (the
tokenize stage's output). Its counts come from the index alone (the file is fully verified, which reads
the index arrays, not the tokens): documents ``dc = D - 1``, sequences ``sc = S``, tokens ``tc =
sum(lengths)``. For each prefix, ``D/{name}_dc={dc}_sc={sc}_tc={tc}.bin`` and ``.idx`` are made as
**relative symbolic links** to the tokenized files (seed 001's naming, no copies). Relative symlinks
rather than hard links: they follow a re-tokenized file (an atomic rewrite gives the ``.bin`` a new inode,
which would leave a hard link on stale data), they survive moving or copying the whole results tree
(``mv``, ``cp -a``, ``rsync -a``) as long as ``D`` and the tokenized directory move together, and a broken
one is visible rather than silently holding a second copy when the tree is copied across file systems.

``D`` is rebuilt as a whole (built beside it, then swapped in), so it holds exactly the links of this run;
declare it as a ``directory()`` output. The signature (``OUT.json``) lists every prefix, sorted by name,
under ``"prefixes"``: ``prefix`` (the link prefix, ``D/{name}_dc=.._sc=.._tc=..``, as the mixture and
training configs use it), ``name``, ``source`` (the tokenized prefix), ``lang``, ``domain``, ``subdomain``,
``split``, ``key``, ``documents``, ``sequences``, ``tokens``, ``dtype``; and ``totals``.
"""

from __future__ import annotations

import argparse
import os
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from workflow_scripts.core import naming
from workflow_scripts.core.cli import UserError
from workflow_scripts.core.dataset_verify import verify
from workflow_scripts.core.fsio import atomic_dir, read_json, write_json
from workflow_scripts.core.indexed_dataset import fingerprint

NAME_FIELDS = ("lang", "domain", "subdomain", "split", "key")


class CountError(UserError, ValueError):
    """Tokenized prefixes that cannot be counted and linked."""


def parse_name(prefix: str) -> dict[str, str]:
    """``lang``, ``domain``, ``subdomain``, ``split`` and ``key`` of a tokenized prefix's file name."""
    fields = naming.parse_prefix(prefix)
    return {k: fields[k] for k in NAME_FIELDS}


# What decides the tokens beyond the document lengths (min_tokens acts through the .idx alone).
TOKENIZER_KEYS = ("tokenizer_sha256", "vocab_size", "eod_id", "bos_id", "mode", "sft_markers")


def tokenizer_identity(prefix: str) -> dict[str, Any] | None:
    """What the tokenize stage recorded about the tokenizer and settings that made ``prefix`` (its
    ``.stats.json``); None for prefixes made elsewhere."""
    path = Path(prefix + ".stats.json")
    if not path.is_file():
        return None
    stats = read_json(path)
    return {k: stats.get(k) for k in TOKENIZER_KEYS}


def count_prefix(prefix: str) -> dict[str, Any]:
    """Verify ``prefix`` and return its name fields, counts and content identity.

    The identity (the ``.idx`` digest, the ``.bin`` size and the tokenizer that made it) changes whenever
    the tokens can have changed, so a pack that reads this prefix is sliced again.
    """
    fields = parse_name(prefix)
    summary = verify(prefix)
    name = naming.counted_name(
        os.path.basename(prefix), summary["documents"], summary["sequences"], summary["tokens"]
    )
    identity = {**fingerprint(prefix), "tokenizer": tokenizer_identity(prefix)}
    return {"name": name, "source": prefix, **fields, **summary, "identity": identity}


def _relative_link(target: str, link: Path) -> None:
    """Make ``link`` a symlink to ``target``, relative to the directory the link will end up in."""
    os.symlink(os.path.relpath(os.path.abspath(target), os.path.abspath(link.parent)), link)


def make_links(entries: Sequence[dict[str, Any]], links_dir: str) -> None:
    """Rebuild ``links_dir`` with ``{name}.bin/.idx`` relative symlinks for every entry.

    The links are made in a sibling temporary directory (same parent, so relative targets stay valid)
    that replaces ``links_dir`` only once complete. An existing ``links_dir`` must hold only symlinks (it
    is removed); anything else there is an error, so a mistaken ``--links-dir`` cannot delete data.
    """
    final = Path(links_dir)
    if final.is_dir() and not all(p.is_symlink() for p in final.iterdir()):
        raise CountError(f"{final}: holds files that are not links; refusing to replace it")
    with atomic_dir(final) as tmp:
        for e in entries:
            for ext in (".bin", ".idx"):
                _relative_link(e["source"] + ext, tmp / (e["name"] + ext))


def build_signature(prefixes: Sequence[str], links_dir: str) -> dict[str, Any]:
    """Count every prefix and describe it with its link prefix; names must be unique."""
    entries = sorted((count_prefix(p) for p in prefixes), key=lambda e: e["name"])
    duplicates = sorted(
        n for n, k in Counter(os.path.basename(e["source"]) for e in entries).items() if k > 1
    )
    if duplicates:
        raise CountError(f"two tokenized prefixes share a name: {duplicates}")
    for e in entries:
        e["prefix"] = os.path.join(links_dir, e["name"])
    totals = {k: sum(e[k] for e in entries) for k in ("documents", "sequences", "tokens")}
    return {"links_dir": links_dir, "prefixes": entries, "totals": {"prefixes": len(entries), **totals}}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], fromfile_prefix_chars="@")
    parser.add_argument("--prefixes", nargs="+", required=True, help="tokenized prefixes, or @LIST")
    parser.add_argument("--links-dir", required=True, help="directory of the count-named links (rebuilt)")
    parser.add_argument("--signature", required=True, help="data signature JSON to write")
    args = parser.parse_args(argv)
    signature = build_signature(args.prefixes, args.links_dir)
    make_links(signature["prefixes"], args.links_dir)
    write_json(args.signature, signature)
    t = signature["totals"]
    print(
        f"counted {t['prefixes']} prefixes: {t['documents']} documents, {t['sequences']} sequences, "
        f"{t['tokens']} tokens -> {args.signature}"
    )
    return 0
