"""Bring-your-own tokenized sources: verified against the tokenizer and linked for the count stage."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import numpy as np
import pytest

from tests.utils import write_jsonl
from workflow_scripts.cli import main as snakepack
from workflow_scripts.core.fsio import read_json
from workflow_scripts.core.indexed_dataset import IndexedDataset
from workflow_scripts.tokens import count, imported, sources
from workflow_scripts.tokens.engines.sp_tokenizer import SentencePieceTokenizer
from workflow_scripts.tokens.ledger import Ledger, Position


def hand_built(prefix: Path, documents: list[list[list[int]]], code: int = 8) -> Path:
    """A Megatron dataset written byte by byte: documents of sequences of token ids (dtype code 8: uint16)."""
    dtype = {4: "<i4", 8: "<u2"}[code]
    seqs = [s for d in documents for s in d]
    lengths = np.array([len(s) for s in seqs], "<i4")
    pointers = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype("<i8") * np.dtype(dtype).itemsize
    doc_idx = np.concatenate([[0], np.cumsum([len(d) for d in documents])]).astype("<i8")
    header = b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, code, len(seqs), len(doc_idx))
    prefix.with_suffix(".idx").write_bytes(
        header + lengths.tobytes() + pointers.tobytes() + doc_idx.tobytes()
    )
    prefix.with_suffix(".bin").write_bytes(np.array([t for s in seqs for t in s], dtype).tobytes())
    return prefix


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("model")
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa", "mu"]
    texts = [" ".join(words[i % 7 :] + words[: i % 5]) for i in range(300)]
    src = write_jsonl(
        root / "en_web_cc_split_0000.jsonl", [{"id": i, "text": t} for i, t in enumerate(texts)]
    )
    args = [str(src), "--model-prefix", str(root / "spm"), "--vocab-size", "400", "--max-sentences", "1000"]
    assert snakepack(["train-tokenizer", *args]) == 0
    return root / "spm.model"


def test_prefix_from_the_tokenize_cli_imports_and_counts(model: Path, tmp_path: Path) -> None:
    src = write_jsonl(tmp_path / "corpus.jsonl", [{"text": f"alpha beta {i}"} for i in range(5)])
    made = tmp_path / "theirs" / "old_run"
    argv = [
        "--input",
        str(src),
        "--output-prefix",
        str(made),
        "--tokenizer-model",
        str(model),
        "--append-eod",
    ]
    assert snakepack(["tokenize", *argv]) == 0
    out = tmp_path / "tok" / "en_books_old_split_prev-0000_text_document"
    stats = imported.import_prefix(
        f"{made}_text_document", str(out), SentencePieceTokenizer(model), "auto", None
    )
    assert os.path.islink(f"{out}.bin") and not os.path.isabs(os.readlink(f"{out}.bin"))
    theirs, linked = Ledger.read(f"{made}_text_document"), Ledger.read(str(out))  # tokenized here: its own
    assert linked.path == f"{out}.ledger.npz" and list(linked.hashes) == list(theirs.hashes)
    assert (
        IndexedDataset(out).document(4).tolist()
        == IndexedDataset(f"{made}_text_document").document(4).tolist()
    )
    ours = read_json(f"{made}_text_document.stats.json")
    for key in count.TOKENIZER_KEYS[:4]:  # the identity the plan compares equals the tokenize stage's
        assert stats[key] == ours[key], key
    assert (stats["docs_in"], stats["docs_out"], stats["tokens"]) == (5, 5, ours["tokens"])
    entry = count.count_prefix(str(out))
    assert (entry["lang"], entry["domain"], entry["subdomain"], entry["split"]) == (
        "en",
        "books",
        "old",
        "prev-0000",
    )
    assert entry["identity"]["tokenizer"]["eod_id"] == SentencePieceTokenizer(model).sp.eos_id()


def test_hand_built_index_with_sequences_and_checks(model: Path, tmp_path: Path) -> None:
    tokenizer = SentencePieceTokenizer(model)
    eod, bos = tokenizer.sp.eos_id(), tokenizer.sp.bos_id()
    docs = [[[bos, 10, 11], [12, eod]], [[bos, 20, eod]], [[bos, 30, 31, 32, eod]]]
    prefix = hand_built(tmp_path / "hand", docs)
    out = str(tmp_path / "out" / "de_web_x_split_hand-0000_text_document")
    stats = imported.import_prefix(str(prefix), out, tokenizer, "auto", "<s>")
    assert (stats["docs_out"], stats["tokens"], stats["bos_id"]) == (3, 13, bos)
    summary = count.count_prefix(out)
    assert (summary["documents"], summary["sequences"]) == (3, 4)
    ledger = Ledger.read(out)  # made elsewhere: no raw position, no hash
    assert ledger.documents == 3 and ledger.position(2) == Position(None, None, None)

    no_eod = hand_built(tmp_path / "noeod", [[[10, 11]], [[12, eod]]])
    with pytest.raises(
        imported.TokenizedSourceError, match=rf"document 0 ends with token 11, not the EOD {eod}"
    ):
        imported.import_prefix(str(no_eod), out, tokenizer, "auto", None)
    assert imported.import_prefix(str(no_eod), out, tokenizer, "none", None)["eod_id"] is None
    with pytest.raises(imported.TokenizedSourceError, match="document 0 starts with token 10, not the BOS"):
        imported.import_prefix(str(no_eod), out, tokenizer, "none", "<s>")
    outside = hand_built(tmp_path / "outside", [[[10, tokenizer.vocab_size + 5, eod]]])
    with pytest.raises(imported.TokenizedSourceError, match="at position 1 is outside the vocabulary"):
        imported.import_prefix(str(outside), out, tokenizer, "auto", None)
    wide = hand_built(tmp_path / "wide", [[[10, eod]]], code=4)
    with pytest.raises(imported.TokenizedSourceError, match=r"tokens are int32; .* writes uint16"):
        imported.import_prefix(str(wide), out, tokenizer, "auto", None)


def test_cli_error_is_one_line(model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = hand_built(tmp_path / "bad", [[[10, 11]]])
    argv = ["--prefix", str(bad), "--output-prefix", str(tmp_path / "o"), "--tokenizer-model", str(model)]
    assert snakepack(["import-tokenized", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("snakepack import-tokenized: error: ") and len(err.splitlines()) == 1
    assert not (tmp_path / "o.bin").exists()


def test_resolve_imports_names_and_errors(tmp_path: Path) -> None:
    for name in (
        "en_web_cc_split_0001_text_document",
        "en_web_cc_split_0002_text_document",
        "xx_text_document",
    ):
        hand_built(tmp_path / name, [[[1, 2]]])
    regex = "^(?P<lang>[a-z0-9]+)_(?P<domain>[a-z0-9]+)_(?P<subdomain>[a-z0-9]+)_"
    found = sources.resolve_imports(
        [{"name": "prev", "prefixes": [f"{tmp_path}/en_*_document"], "name_regex": regex}], "m.model"
    )
    assert list(found) == ["en_web_cc_split_prev-0000", "en_web_cc_split_prev-0001"]
    assert found["en_web_cc_split_prev-0001"].prefix == f"{tmp_path}/en_web_cc_split_0002_text_document"
    given = {"name": "x", "prefixes": [f"{tmp_path}/xx_text_document.idx"], "name_regex": regex}
    with pytest.raises(
        sources.TokenizedSourceConfigError, match="finds no lang, domain, subdomain in 'xx_text"
    ):
        sources.resolve_imports([given], "m.model")
    given |= {"lang": "lv", "domain": "news", "subdomain": "old"}
    assert list(sources.resolve_imports([given], "m.model")) == ["lv_news_old_split_x-0000"]
    with pytest.raises(sources.TokenizedSourceConfigError, match="give tokenizer_model"):
        sources.resolve_imports([given], None)
    with pytest.raises(sources.TokenizedSourceConfigError, match="no prefix matches"):
        sources.resolve_imports([{**given, "prefixes": [f"{tmp_path}/nothing*"]}], "m.model")
    with pytest.raises(sources.TokenizedSourceConfigError, match=rf"no prefix matches '{tmp_path}/typo\*' "):
        sources.resolve_imports([{**given, "prefixes": [*given["prefixes"], f"{tmp_path}/typo*"]}], "m.model")
