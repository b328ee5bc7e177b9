"""The lineage ledger tokenize writes (tokens/ledger.py): each tokenized document's raw file, line and hash
equal a brute-force walk of the shard's records less the tokenize quarantine, on every reading path."""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import numpy as np
import orjson
import pytest

from tests.tokens.test_encode import MARKERS, USER
from workflow_scripts.core.cli import UserError
from workflow_scripts.core.indexed_dataset import IndexedDataset
from workflow_scripts.tokens import encode
from workflow_scripts.tokens import reader as reader_module
from workflow_scripts.tokens.engines import base
from workflow_scripts.tokens.engines.sp_tokenizer import SentencePieceTokenizer
from workflow_scripts.tokens.framing import resolve_settings
from workflow_scripts.tokens.ledger import Ledger, text_hash, write_unknown

WORDS = [
    "the",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "a",
    "lazy",
    "dog",
    "and",
    "then",
    "some",
    "more",
    "words",
]


def shard(path: Path, seed: int, sft: bool = False) -> Path:
    """Records as ingest writes them (``source``, ``line``) from two raw files, with lines the tokenizer
    rejects, blank lines, a record without a raw position, long documents and escapes."""
    rng = random.Random(seed)
    lines: list[bytes] = []
    for n in range(300):
        source, line = ("b.jsonl.zst", n - 150) if n >= 150 else ("a.txt", n + 1)
        words = rng.choices(WORDS, k=rng.choice([1, 2, 8, 30, 300]))
        text = " ".join(words) + rng.choice(["", " \u00e9\u6771", ' "q"\n'])
        if sft:
            text = f"{USER} {text}"
        record = {"id": f"{source}:{line}", "text": text, "source": source, "line": line, "meta": {}}
        kind = rng.random()
        if kind < 0.05:
            record["text"] = "  "  # empty_text
        elif kind < 0.08:
            del record["source"]  # no raw position
        elif kind < 0.1:
            lines.append(b"")  # a blank line: not a record
        elif kind < 0.12:
            lines.append(b'{"text": "cut')  # malformed
            continue
        lines.append(orjson.dumps(record))
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def brute_force(path: Path, quarantine: str) -> list[tuple[str | None, int | None, str]]:
    """(raw file, raw line, hash) of each record the tokenizer kept, by walking the shard's lines."""
    rejected = {orjson.loads(q)["line"] for q in Path(quarantine).read_bytes().splitlines()}
    out = []
    for number, raw in enumerate(path.read_bytes().splitlines(), 1):
        if not raw.strip() or number in rejected:
            continue
        record = orjson.loads(raw)
        known = "source" in record
        where = (record["source"], record["line"]) if known else (None, None)
        out.append((*where, f"{text_hash(record['text']):016x}"))
    return out


@pytest.mark.parametrize(
    ("fast", "sft", "long_chars"),
    [(True, False, None), (False, False, None), (True, False, 200), (False, True, None)],
    ids=["utf8", "str", "long", "sft"],
)
def test_the_ledger_is_the_shard_less_its_quarantine(
    tokenizer: SentencePieceTokenizer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    fast: bool,
    sft: bool,
    long_chars: int | None,
) -> None:
    if long_chars:  # documents of over 200 characters are encoded apart (pop_long)
        for module in (base, reader_module):
            monkeypatch.setattr(module, "LONG_CHARS", long_chars)
    src = shard(tmp_path / "en_web_a_split_0000.jsonl", 3, sft)
    extra = {"sft": True, "sft_markers": MARKERS} if sft else {}
    settings = resolve_settings(tokenizer, eod="auto", min_tokens=12, **extra)
    out = str(tmp_path / "out")
    stats = encode.tokenize_file(str(src), out, tokenizer, settings, batch_bytes=2000, fast_encode=fast)
    prefix = encode.document_prefix(out)
    assert stats["rejected"]["too_few_tokens"] and stats["rejected"]["malformed_json"]
    ledger = Ledger.read(prefix)
    expected = brute_force(src, prefix + ".quarantine.jsonl")
    assert ledger.documents == IndexedDataset(prefix).num_documents == len(expected)
    got = [(p.file, p.line, p.hash) for p in map(ledger.position, range(ledger.documents))]
    assert got == expected
    breaks = sum(
        a[0] != b[0] or (a[0] is not None and b[1] != a[1] + 1) for a, b in itertools.pairwise(expected)
    )
    assert len(ledger.run_docs) == breaks + 1  # runs, not rows
    doc = next(i for i, e in enumerate(expected) if e[0] == "b.jsonl.zst")
    assert ledger.at_line("raw/b.jsonl.zst", expected[doc][1]) == [doc]
    assert doc in ledger.with_hash(int(expected[doc][2], 16))


def test_an_import_has_a_ledger_that_knows_no_raw_position(tmp_path: Path) -> None:
    write_unknown(str(tmp_path / "x"), 5)
    ledger = Ledger.read(str(tmp_path / "x"))
    assert ledger.documents == 5 and ledger.position(4).file is None and ledger.position(4).hash is None
    assert ledger.at_line("f", 1) == [] and ledger.with_hash(0) == []


def test_a_prefix_without_a_ledger_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "tok").mkdir()
    (tmp_path / "tok" / "x.bin").write_bytes(b"")
    (tmp_path / "x.bin").symlink_to("tok/x.bin")
    with pytest.raises(UserError, match="tokenized before tokenize wrote ledgers"):
        Ledger.read(str(tmp_path / "x"))
    write_unknown(str(tmp_path / "tok" / "x"), 0)
    assert Ledger.read(str(tmp_path / "x")).path == str(tmp_path / "tok" / "x.ledger.npz")  # the link's
    assert np.array_equal(Ledger.read(str(tmp_path / "x")).run_docs, [])
