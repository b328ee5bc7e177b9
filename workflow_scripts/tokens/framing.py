"""What each accepted record becomes in the dataset: its settings with the token ids resolved (EOD, BOS,
SFT markers, ``min_tokens``), SFT texts encoded span by span with each marker as its control token,
documents framed as ``[BOS] tokens [EOD]``, and a long document written piece by piece.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from workflow_scripts.core import compiled
from workflow_scripts.core.indexed_dataset import IndexedDatasetBuilder
from workflow_scripts.tokens.engines.base import Encoded, Encoder, Tokenizer, TokenizerError
from workflow_scripts.tokens.sft import MarkerSplitter, parse_marker_specs

if TYPE_CHECKING:
    from workflow_scripts.tokens import _ids
else:
    _ids = compiled.load("workflow_scripts.tokens._ids")


@dataclass(frozen=True)
class RecordSettings:
    """What to do with each record; token ids are already resolved."""

    json_key: str = "text"
    eod_id: int | None = None  # appended to every document when set
    eod_rule: str = ""  # why that id (Tokenizer.eod)
    bos_id: int | None = None  # prepended to every document when set
    min_tokens: int = 0
    sft: bool = False
    marker_ids: Mapping[str, int] = field(default_factory=dict)  # SFT marker text -> token id (SFT mode)
    markers: tuple[str, ...] = ()  # the marker texts (both modes)


def resolve_settings(
    tokenizer: Tokenizer,
    *,
    json_key: str = "text",
    eod: str | None = None,
    bos: str | None = None,
    min_tokens: int = 0,
    sft: bool = False,
    sft_markers: Sequence[str] = (),
) -> RecordSettings:
    """The record settings from CLI-style values; EOD/BOS/marker tokens are looked up and validated.

    ``eod`` is ``auto``, a piece or ``id:N``; ``bos`` a piece or ``id:N`` (``None``: not added);
    ``sft_markers`` are ``MARKER=TOKEN`` specs. Marker tokens are resolved in SFT mode only; pretraining
    mode just searches for the markers.
    """
    pairs = parse_marker_specs(sft_markers)
    if sft and not pairs:
        raise TokenizerError("SFT mode needs at least one --sft-marker MARKER=TOKEN")
    if min_tokens < 0:
        raise TokenizerError(f"min_tokens must be >= 0, got {min_tokens}")
    eod_id, eod_rule = (None, "") if eod is None else tokenizer.eod(eod)
    return RecordSettings(
        json_key=json_key,
        eod_id=eod_id,
        eod_rule=eod_rule,
        bos_id=None if bos is None else tokenizer.token_id(bos),
        min_tokens=min_tokens,
        sft=sft,
        marker_ids={m: tokenizer.token_id(t) for m, t in pairs.items()} if sft else {},
        markers=tuple(pairs),
    )


def encode_sft(
    encoder: Encoder, splitter: MarkerSplitter, marker_ids: Mapping[str, int], texts: Sequence[str]
) -> Encoded:
    """Encode SFT texts: spans between markers batched through the encoder, markers as their ids; with the
    texts (indices) that have a span the encoder's engine left to its library."""
    layouts = [splitter.split(t) for t in texts]
    owners = [d for d, layout in enumerate(layouts) for _, is_marker in layout if not is_marker]
    spans = [part for layout in layouts for part, is_marker in layout if not is_marker]
    encoded = encoder.finish(spans, encoder.encode(spans, specials=False))  # markers frame the spans
    flat, span_lengths = encoded.ids, encoded.lengths
    routed = sorted({owners[k] for k in encoded.routed})
    ends = np.cumsum(span_lengths)
    pieces: list[np.ndarray] = []
    lengths = np.zeros(len(texts), np.int64)
    k = 0
    for d, layout in enumerate(layouts):
        for part, is_marker in layout:
            if is_marker:
                piece = np.array([marker_ids[part]], np.int32)
            else:
                piece = flat[ends[k] - span_lengths[k] : ends[k]]
                k += 1
            pieces.append(piece)
            lengths[d] += len(piece)
    return Encoded((np.concatenate(pieces) if pieces else np.empty(0, np.int32)), lengths, routed)


def frame(
    flat: np.ndarray,
    lengths: np.ndarray,
    before: Sequence[int] = (),
    after: Sequence[int] = (),
    keep: np.ndarray | None = None,
    dtype: npt.DTypeLike = np.int32,
) -> tuple[np.ndarray, np.ndarray]:
    """Concatenated texts' ids with ``before`` and ``after`` put around each text's, the texts not in
    ``keep`` dropped, as ``dtype`` (int32 or uint16: an id that does not fit is an error); one compiled
    pass (``_ids.c``)."""
    dtype = np.dtype(dtype)
    if dtype not in (np.dtype("<i4"), np.dtype("<u2")):
        raise ValueError(f"token dtype {dtype} is neither int32 nor uint16")
    flat = np.ascontiguousarray(flat, np.int32)
    lengths = np.ascontiguousarray(lengths, np.int64)
    keep = np.ones(len(lengths), np.uint8) if keep is None else np.ascontiguousarray(keep, np.uint8)
    around = [int(t) for t in before], [int(t) for t in after]
    out, counts = _ids.frame(flat, lengths, keep, *around, dtype.itemsize)
    return np.frombuffer(out, dtype), np.frombuffer(counts, np.int64)


def write_long(
    builder: IndexedDatasetBuilder, tokenizer: Tokenizer, text: str, settings: RecordSettings
) -> tuple[int, int]:
    """Encode and write one long document piece by piece, never holding all its ids: ``(tokens written,
    text tokens)``; nothing is written (0) if it has fewer than ``min_tokens`` text tokens."""
    pieces = tokenizer.encode_long(text)
    head: list[np.ndarray] = []
    count = 0
    for ids in pieces:  # enough tokens to know the document is kept (almost always the first piece)
        head.append(ids)
        count += len(ids)
        if count >= max(1, settings.min_tokens):
            break
    if count < max(1, settings.min_tokens):
        return 0, count
    bos = [] if settings.bos_id is None else [np.array([settings.bos_id], np.int32)]
    eod = [] if settings.eod_id is None else [np.array([settings.eod_id], np.int32)]
    return builder.add_document_chunks(itertools.chain(bos, head, pieces, eod)), count
