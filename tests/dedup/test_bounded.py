"""Signatures in memory bounded by bytes: long documents are signed in pieces (with the signatures of the
whole text), a shard's per-document arrays spill to files and are sorted by hash ranges (same store bytes)."""

from __future__ import annotations

import random
import subprocess
import sys
import unicodedata
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from datasketch import MinHash

from tests.dedup.test_text import _texts
from workflow_scripts.dedup import signatures
from workflow_scripts.dedup.params import DedupParams, permutations
from workflow_scripts.dedup.settings import DedupSettings
from workflow_scripts.dedup.signatures import minhash, sign_batch, sign_long, write_signatures
from workflow_scripts.dedup.text import CUT_CJK, CUT_PUNCT, CUT_SPACE, Shingler, char_tables

REPO = Path(__file__).resolve().parents[2]
SHINGLERS = [
    Shingler(),
    Shingler(ngram=3, char_ngram=2),
    Shingler(ngram=1, char_ngram=1),
    Shingler(lowercase=False, nfkc=False, punctuation=False, digits=False),
]


def _long_texts() -> list[tuple[str, bool]]:
    """The shingling test texts run together, with and without separators, plus edge cases."""
    rng = random.Random(3)
    short = _texts()
    out = []
    for join in (" ", "", "\n", "-", "ΣΑΣ 1.5 ", "的"):
        for char in (False, True):
            parts = [t for t, c in short if c == char] + [t for t, c in short if c != char][:5]
            rng.shuffle(parts)
            out.append((join.join(parts), char))
    sigma = "ΟΔΟΣ ΟΔΟΣ. Σ ΑΣ\u0301 ΑΣ-ΑΣ 'ΑΣ' " * 20  # final sigma depends on the next character
    # combining marks, numbers (fullwidth too), Hangul jamo
    marks = "e\u0301 \u0301a 1,2 3 .4 \uff15,\uff16 \uff21\u0308 \u1100\u1161 " * 20
    out += [(sigma, False), (marks, False), (marks, True), ("x" * 500, False), (" " * 500, True)]
    return out


@pytest.mark.parametrize("sh", SHINGLERS)
@pytest.mark.parametrize("size", [2, 7, 64])
def test_pieces_have_the_units_of_the_whole_text(sh: Shingler, size: int) -> None:
    for text, char in _long_texts():
        pieces = list(sh.pieces(text, char, size))
        assert "".join(pieces) == text
        whole, _ = sh.units([text], np.array([char]))
        parts = [sh.units([p], np.array([char]))[0] for p in pieces]
        assert np.concatenate(parts).tolist() == whole.tolist(), (text[:40], char)
    cut = list(Shingler().pieces("aa " * 100, False, 30))
    assert all(15 <= len(p) <= 30 for p in cut[:-1]) and len(cut) > 5


def _second_elements() -> set[str]:
    """Characters that compose with the character before them (second of a canonical pair, Hangul V/T)."""
    seconds = {chr(c) for c in [*range(0x1161, 0x1176), *range(0x11A8, 0x11C3)]}
    for c in range(0x110000):
        d = unicodedata.decomposition(chr(c)).split()
        if len(d) == 2 and not d[0].startswith("<"):
            seconds.add(chr(int(d[1], 16)))
    return seconds


def test_every_cut_character_keeps_normalization_local() -> None:
    cjk = [chr(c) for lo, hi in ((0x3400, 0x4DBF), (0x4E00, 0x9FFF)) for c in range(lo, hi + 1)]
    assert CUT_CJK == "\u3400-\u4dbf\u4e00-\u9fff"
    seconds = _second_elements()
    sep, digit = char_tables(True)
    for c in [*CUT_SPACE, *CUT_PUNCT, *cjk]:
        assert unicodedata.combining(c) == 0 and unicodedata.normalize("NFKC", c) == c, repr(c)
        assert c not in seconds, repr(c)
        assert c.lower() == c == c.upper(), repr(c)  # not cased
        assert ("AΣ" + c + "B").lower()[1] == "ς", repr(c)  # not case-ignorable: final sigma stops at it
        assert not digit[ord(c)] and c not in ".,", repr(c)
        assert sep[ord(c)] == (c not in cjk), repr(c)
    assert all(char_tables(False)[0][ord(c)] for c in CUT_SPACE)


def test_minhash_of_sets_across_the_compiled_blocks_matches_datasketch() -> None:
    rng = np.random.default_rng(4)
    sizes = (150, 0, 3, 64, 0, 1, 65, 200)  # the compiled loop mixes 64 shingles at a time
    sets = [rng.integers(0, 2**32, size=n, dtype=np.uint64).astype(np.uint32) for n in sizes]
    off = np.concatenate([[0], np.cumsum([s.size for s in sets])])
    sig = minhash(np.concatenate(sets), off, permutations(64, 3))
    for s, row in zip(sets, sig, strict=True):
        m = MinHash(num_perm=64, seed=3, scheme="affine32", hashfunc=lambda x: x)
        m.update_batch(s.tolist())
        assert row.tolist() == (m.hashvalues.tolist() if s.size else [2**32 - 1] * 64)


def _record(text: str, lang: str) -> dict[str, Any]:
    return {"id": "doc-1", "text": text, "lang": lang, "domain": "web", "subdomain": "cc"}


@pytest.mark.parametrize(
    "params",
    [
        DedupSettings(),
        DedupSettings(ngram=2, char_ngram=3, scope="lang", punctuation=False, num_perm=64),
        DedupSettings(ngram=9, char_ngram=1, lowercase=False, nfkc=False, digits=False),
    ],
)
def test_a_long_document_signed_in_pieces_is_signed_as_a_whole(
    monkeypatch: pytest.MonkeyPatch, params: DedupSettings
) -> None:
    params = params.resolved()
    monkeypatch.setattr(signatures, "CHUNK_CHARS", 40)
    perms = permutations(params.num_perm, params.seed)
    texts = [*_long_texts(), ("", False), ("one two", False), ("one two three four five six", False)]
    for text, char in texts:
        record = _record(text, "zh" if char else "en")
        whole = sign_batch([record], params, perms)
        shingles: list[np.ndarray] = []
        long = sign_long(record, params, perms, shingles.append)
        assert np.concatenate([np.zeros(0, np.uint32), *shingles]).tolist() == whole.pop("shingles").tolist()
        assert long.keys() == whole.keys()
        for key, value in whole.items():
            assert long[key].dtype == value.dtype and long[key].tolist() == value.tolist(), (key, text[:40])


def test_signature_files_do_not_depend_on_piece_or_chunk_sizes(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    rng = random.Random(5)
    docs = [_record(t, "zh" if c else "en") | {"id": str(i)} for i, (t, c) in enumerate(_long_texts())]
    docs += [_record(rng.choice(["", "!", "a b c d e f", "x y"]), "en") | {"id": f"s{i}"} for i in range(50)]
    rng.shuffle(docs)
    shard = tmp_path / "en_web_cc_split_0000.jsonl"
    shard.write_bytes(b"".join(orjson.dumps(d) + b"\n" for d in docs))
    for verify in ("jaccard", "none"):
        params = DedupParams.resolve(DedupSettings(verify=verify))
        write_signatures(shard, tmp_path / "whole.sig", params)
        with monkeypatch.context() as m:
            m.setattr(signatures, "CHUNK_CHARS", 50)
            m.setattr(signatures, "SPILL_ROWS", 7)  # per-document arrays read back 7 rows at a time
            m.setattr(signatures, "SORT_ROWS", 3)  # columns sorted in 2**6 hash ranges
            write_signatures(shard, tmp_path / "pieces.sig", params)
        assert (tmp_path / "pieces.sig").read_bytes() == (tmp_path / "whole.sig").read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "en_web_cc_split_0000.jsonl",
        "pieces.sig",
        "whole.sig",
    ]
    shard.write_bytes(b"")
    write_signatures(shard, tmp_path / "empty.sig", params)
    shard.write_bytes(b'{"id": "x", "text": "fine"}\nnot json\n')
    with pytest.raises(ValueError, match="invalid JSON"):
        write_signatures(shard, tmp_path / "bad.sig", params)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp")]  # no spill files left


def test_the_memory_of_one_huge_document_is_bounded(tmp_path: Path) -> None:
    """One 16 MB document: the signatures job's peak RSS grows by far less than 31 bytes per character."""
    rng = random.Random(6)
    vocab = ["".join(rng.choices("abcdefghij", k=rng.randint(2, 8))) for _ in range(5000)]
    text = " ".join(rng.choices(vocab, k=3_000_000))[: 16 << 20]
    shard = tmp_path / "en_books_pd_split_0000.jsonl"
    shard.write_bytes(orjson.dumps(_record(text, "en")) + b"\n")
    del text
    script = (  # VmHWM: ru_maxrss would count the memory of this process, which forked it
        "import sys\n"
        "from workflow_scripts.dedup import signatures\n"
        "signatures.main(sys.argv[1:])\n"
        "print(next(x for x in open('/proc/self/status') if x.startswith('VmHWM:')).split()[1])\n"
    )
    cmd = [sys.executable, "-c", script, "--input", str(shard), "--output", str(tmp_path / "s.sig")]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, check=True, timeout=60)
    peak_mib = int(proc.stdout.split()[-1]) // 1024
    # The line and its text (2 x 16 MB), reading it (16 MB more), one piece's working memory, numpy: about
    # 160 MiB; unbounded (31 bytes per character), 600
    assert peak_mib < 250, f"peak RSS {peak_mib} MiB for one 16 MB document"


def test_store_arrays_written_in_pieces(tmp_path: Path) -> None:
    from workflow_scripts.dedup.store import Store, write_store

    a = np.arange(12, dtype=np.uint32).reshape(3, 4)
    with write_store(tmp_path / "s", {}) as store:
        for piece in (a.ravel()[:5], a.ravel()[5:5], a.ravel()[5:]):
            store.extend("a", piece, (3, 4))
        store.extend("empty", np.zeros(0, np.uint64), (2, 0))
        store.add("b", np.ones(3))
    s = Store(tmp_path / "s")
    assert s["a"].tolist() == a.tolist() and s["empty"].shape == (2, 0) and s["b"].tolist() == [1, 1, 1]
    with pytest.raises(ValueError, match="cells missing"), write_store(tmp_path / "t", {}) as store:
        store.extend("a", a.ravel()[:5], (3, 4))
        store.add("b", np.ones(3))
    with pytest.raises(ValueError, match="more cells"), write_store(tmp_path / "t", {}) as store:
        store.extend("a", np.zeros(13, np.uint32), (3, 4))
    assert not (tmp_path / "t").exists()
