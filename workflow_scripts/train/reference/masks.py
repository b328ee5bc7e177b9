"""A micro batch's inputs, labels, loss mask and attention mask, with the LUMI fork's SFT switches.

- ``SFT_ENABLED=1``: the loss counts only targets inside assistant spans, the tokens after an opening
  ``<|assistant|>`` up to and including the closing one (the same id opens and closes a span, as the SFT
  tokenizer writes ``<<<|assistant|>>>answer<<<|assistant|>>>``); the prompt, the markers that open spans,
  EOD and padding are masked.
- ``CURSE_ATTENTION=1``: a token attends only to earlier tokens of its own document inside a packed sample;
  a document ends with its EOD (the EOD belongs to the document it ends), as the fork's
  ``get_ltor_masks_and_position_ids``. Position ids stay the sample's positions, as in the fork.

Padding (``k_bin_packed`` bins are padded with 0 to ``seq_length + 1``) never counts in the loss.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import torch


@dataclass(frozen=True)
class Switches:
    """The LUMI fork's launch switches (environment variables)."""

    sft: bool = False  # SFT_ENABLED=1
    document_attention: bool = False  # CURSE_ATTENTION=1

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> Switches:
        return cls(environ.get("SFT_ENABLED", "0") == "1", environ.get("CURSE_ATTENTION", "0") == "1")


@dataclass
class Batch:
    """Model inputs and targets of one micro batch."""

    tokens: torch.Tensor  # [b, s] inputs
    labels: torch.Tensor  # [b, s] next tokens
    loss_mask: torch.Tensor  # [b, s] float, 1 where the target counts
    attention_mask: torch.Tensor | None  # [b, 1, s, s] bool, True where attention is allowed; None: causal

    def to(self, device: torch.device | str) -> Batch:
        mask = None if self.attention_mask is None else self.attention_mask.to(device)
        return Batch(self.tokens.to(device), self.labels.to(device), self.loss_mask.to(device), mask)


def assistant_targets(samples: np.ndarray, assistant_id: int) -> np.ndarray:
    """[b, s + 1] bool: tokens inside an assistant span (after its opening marker, up to and including its
    closing marker)."""
    marker = samples == assistant_id
    opened = np.cumsum(marker, axis=1) % 2 == 1  # after an odd number of markers: inside, or the opener
    return (opened & ~marker) | (marker & ~opened)  # span content, and the marker that closes it


def document_ids(inputs: np.ndarray, eod_id: int) -> np.ndarray:
    """[b, s]: the document of each input position (EOD tokens seen before it)."""
    ends = inputs == eod_id
    ids = np.cumsum(ends, axis=1)
    return ids - ends  # an EOD belongs to the document it ends


def document_attention(inputs: np.ndarray, eod_id: int) -> torch.Tensor:
    """[b, 1, s, s] bool: causal attention within each document only."""
    ids = torch.from_numpy(document_ids(inputs, eod_id))
    s = inputs.shape[1]
    causal = torch.ones(s, s, dtype=torch.bool).tril()
    same = ids[:, :, None] == ids[:, None, :]
    return (same & causal)[:, None]


def make_batch(
    samples: np.ndarray,
    lengths: np.ndarray,
    eod_id: int,
    switches: Switches = Switches(),
    assistant_id: int | None = None,
) -> Batch:
    """The batch of ``samples`` ([b, s + 1] tokens, the first ``lengths`` of each real)."""
    inputs, targets = samples[:, :-1], samples[:, 1:]
    positions = np.arange(1, samples.shape[1])
    mask = positions[None, :] < lengths[:, None]  # target is a real token, not padding
    if switches.sft:
        if assistant_id is None:
            raise ValueError("SFT_ENABLED=1 needs the <|assistant|> id")
        mask &= assistant_targets(samples, assistant_id)[:, 1:]
    attention = document_attention(inputs, eod_id) if switches.document_attention else None
    return Batch(
        tokens=torch.from_numpy(np.ascontiguousarray(inputs)),
        labels=torch.from_numpy(np.ascontiguousarray(targets)),
        loss_mask=torch.from_numpy(mask.astype(np.float32)),
        attention_mask=attention,
    )
