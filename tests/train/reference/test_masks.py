"""SFT switches: loss only inside assistant spans (SFT_ENABLED=1), attention within each document of a
packed bin (CURSE_ATTENTION=1); padding never counts."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from workflow_scripts.train.reference.masks import Switches, make_batch  # noqa: E402
from workflow_scripts.train.reference.model import GPT, token_losses  # noqa: E402
from workflow_scripts.train.reference.run_config import ModelConfig  # noqa: E402

EOD, USER, ASSISTANT = 3, 4, 5


def test_switches_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SFT_ENABLED", raising=False)
    monkeypatch.setenv("CURSE_ATTENTION", "1")
    assert Switches.from_env() == Switches(sft=False, document_attention=True)
    monkeypatch.setenv("SFT_ENABLED", "1")
    monkeypatch.setenv("CURSE_ATTENTION", "0")
    assert Switches.from_env() == Switches(sft=True, document_attention=False)


def test_loss_counts_only_assistant_spans_and_real_tokens() -> None:
    #                  user prompt        assistant answer      EOD  next doc: user   answer    EOD  padding
    sample = np.array([[USER, 20, 21, USER, ASSISTANT, 30, 31, ASSISTANT, EOD, USER, 22, USER, ASSISTANT, 32,
                        ASSISTANT, EOD, 0, 0]])  # fmt: skip
    batch = make_batch(sample, np.array([16]), EOD, Switches(sft=True), ASSISTANT)
    trained = [int(t) for t, m in zip(batch.labels[0], batch.loss_mask[0], strict=True) if m]
    assert trained == [30, 31, ASSISTANT, 32, ASSISTANT]  # the answers and their closing markers
    plain = make_batch(sample, np.array([16]), EOD)
    assert plain.loss_mask[0].tolist() == [1.0] * 15 + [0.0] * 2  # only the padding is masked
    assert plain.attention_mask is None  # causal


def test_document_attention_mask() -> None:
    sample = np.array([[7, 8, EOD, 9, 10, EOD, 11, 12]])
    mask = make_batch(sample, np.array([8]), EOD, Switches(document_attention=True)).attention_mask[0, 0]
    docs = [0, 0, 0, 1, 1, 1, 2]  # each EOD belongs to the document it ends
    expected = [[k <= q and docs[k] == docs[q] for k in range(7)] for q in range(7)]
    assert mask.tolist() == expected


def doc_losses(model: GPT, first: list[int], second: list[int], switches: Switches) -> torch.Tensor:
    """Per-target losses of a bin holding ``first`` then ``second`` (each ending with EOD)."""
    sample = np.array([[*first, *second]])
    batch = make_batch(sample, np.array([sample.shape[1]]), EOD, switches)
    with torch.no_grad():
        return token_losses(model(batch.tokens, batch.attention_mask), batch.labels)[0]


def test_a_documents_loss_ignores_its_neighbours_only_with_curse_attention() -> None:
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=64, num_layers=2, hidden_size=32, num_attention_heads=4, seq_length=15,
                      max_position_embeddings=16)  # fmt: skip
    model = GPT(cfg).eval()
    doc = [40, 41, 42, 43, 44, 45, 46, EOD]
    neighbour, other = [20, 21, 22, 23, 24, 25, 26, EOD], [30, 31, 32, 33, 34, 35, 36, EOD]  # same length
    own = slice(8, 15)  # targets predicted from inside `doc` (its second token .. its EOD)
    with_mask = Switches(document_attention=True)
    a, b = doc_losses(model, neighbour, doc, with_mask), doc_losses(model, other, doc, with_mask)
    assert torch.equal(a[own], b[own])
    assert not torch.equal(a[:7], b[:7])  # the neighbours themselves differ
    a, b = doc_losses(model, neighbour, doc, Switches()), doc_losses(model, other, doc, Switches())
    assert not torch.allclose(a[own], b[own])  # without the mask, the neighbour leaks in
