"""TOKENIZE stage: one jsonl shard -> Megatron ``{prefix}_{key}_document.bin/.idx`` with SentencePiece.

Argument names follow Megatron-LM ``tools/preprocess_data.py`` where they overlap; the other options are
the ``tokenize`` settings of config/schema.yaml (with its defaults)::

    snakepack tokenize --input SHARD.jsonl[.zst|.gz] --output-prefix P --tokenizer-model M.model \\
        [--json-keys text] [--append-eod [--eod-piece auto]] [--prepend-bos [--bos-piece '<s>']] \\
        [--min-tokens N] [--mode sft] [--sft-markers '<<<|user|>>>=<|user|>' ...] [--workers N] [--batch-mb 4]

Outputs, all next to each other (D = ``P_text_document``): ``D.bin`` and ``D.idx`` (one sequence per
document: [BOS] tokens [EOD]), ``D.quarantine.jsonl`` (one line per rejected record: ``line``, ``id``,
``reason``, ``detail``) and ``D.stats.json`` (written last: ``docs_in``, ``docs_out``, ``rejected``,
``tokens``, ``bytes``, ...). All are written atomically.

Reject reasons: ``malformed_json`` (not JSON or not an object), ``missing_text`` (key missing or not a
string), ``empty_text`` (whitespace only, or encodes to no token), ``marker_in_pretraining`` (a pretraining
document containing an SFT marker), ``no_sft_marker`` (an SFT record without any marker) and
``too_few_tokens`` (fewer than ``--min-tokens`` tokens before BOS/EOD are added; SFT marker tokens
count). Blank lines are not records. ``docs_in == docs_out + sum(rejected)`` is checked.

EOD (``--eod-piece``): ``auto`` picks ``<|endoftext|>`` when the model has that piece (GPT-NeoX's
``SPMTokenizer`` rule), else the model's EOS (Megatron-LM's ``GPTSentencePieceTokenizer`` rule), else it is
an error; never ``<unk>``, which is what GPT-NeoX silently uses for a model without ``<|endoftext|>``. A
piece or ``id:N`` overrides the rule. The tokenizer the workflow trains has ``<|endoftext|>`` as its EOS, so
both rules agree for it. The id chosen, its piece and the rule are in the stats (and the data signature).

Tokens: EOD, BOS and SFT marker tokens are pieces of the model (looked up and validated: a piece missing
from the model is an error, where SentencePiece's ``piece_to_id`` would silently give ``<unk>``) or explicit
``id:N``. In SFT mode (``--sft``) the spans between markers are encoded and each marker becomes its token;
in pretraining mode the markers are only searched for.

Speed: a reader thread parses JSON into batches of about ``--batch-mb`` MB of text while the main thread
encodes the previous batch with SentencePiece's batched ``encode(..., num_threads=workers)`` (which releases
the GIL) and writes the tokens with the vectorised builder. With ``--fast-encode`` (the default) the batch
goes through ``fast_encode.FastEncoder`` instead: one compiled memo of word-like units, each distinct
unit encoded once (by SentencePiece with ``workers`` threads) and looked up afterwards (the same ids; the
stats' ``fast_encode`` gives the memo's hit rate and size, or why the model needs SentencePiece for every
text). Memory is bounded by two batches plus the index arrays (12 bytes per document), whatever the shard
size (and by ``--memo-entries`` on the fast path). SentencePiece needs about 50 bytes a character, so a
document over 4 Mi characters is encoded piece by piece, cut where SentencePiece starts a unit anyway (a
space after a non-space), which gives the same ids as the whole; a run of 4 Mi characters without such a
space is cut where it must and counted in the stats (``long_document_unsafe_cuts``).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import hashlib
import itertools
import os
import queue
import sys
import threading
from collections import Counter
from collections.abc import Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
import orjson
import sentencepiece as spm

from workflow_scripts.core import naming, settings
from workflow_scripts.core.cli import UserError
from workflow_scripts.core.fsio import atomic_path, open_binary, write_json
from workflow_scripts.core.indexed_dataset import IndexedDatasetBuilder, best_dtype
from workflow_scripts.core.progress import Progress
from workflow_scripts.core.stage_stats import check_balance
from workflow_scripts.tokens.fast_encode import FastEncoder, Plan, plan
from workflow_scripts.tokens.settings import EOD_PIECE, TokenizeOptions
from workflow_scripts.tokens.sft import MarkerSplitter, parse_marker_specs

DEFAULTS = TokenizeOptions()

LONG_CHARS = 1 << 22  # documents longer than this (4 Mi characters) are encoded in pieces
REASONS = (
    "malformed_json",
    "missing_text",
    "empty_text",
    "marker_in_pretraining",
    "no_sft_marker",
    "too_few_tokens",
)

T = TypeVar("T")


class TokenizerError(UserError, ValueError):
    """A tokenizer model or token specification that cannot be used."""


class Tokenizer:
    """A SentencePiece model with validated token lookup and batched encoding to flat numpy arrays."""

    def __init__(self, model_path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(model_path)
        try:
            self.sp = spm.SentencePieceProcessor(model_file=self.path)
        except (OSError, RuntimeError) as exc:
            raise TokenizerError(f"{self.path}: cannot load SentencePiece model: {exc}") from None
        self.vocab_size = self.sp.vocab_size()
        self.numpy_output = _has_numpy_output(self.sp)
        self.unsafe_cuts = 0  # cuts of long documents that may have changed ids (see ``pieces``)
        self.fast: FastEncoder | None = None  # set by ``fast_encoding``

    @functools.cached_property
    def fast_plan(self) -> tuple[Plan | None, str]:
        """Whether the fast path (``fast_encode``) is exact for this model: its plan, or None and why not
        (said once in the log)."""
        with open(self.path, "rb") as f:
            result, note = plan(f.read())
        if result is None:
            print(
                f"fast encoding off for {self.path}: {note}; SentencePiece encodes every text",
                file=sys.stderr,
            )
        return result, note

    @contextlib.contextmanager
    def fast_encoding(
        self, enabled: bool, workers: int, memo_entries: int, max_unit_chars: int
    ) -> Iterator[FastEncoder | None]:
        """Within the block ``encode_flat`` goes through a fresh unit memo (SentencePiece with ``workers``
        threads for the units it lacks) when ``enabled`` and exact for the model; yields that encoder (None:
        SentencePiece alone)."""
        fast_plan = self.fast_plan[0] if enabled else None
        if fast_plan is None:
            yield None
            return
        self.fast = FastEncoder(fast_plan, best_dtype(self.vocab_size), workers, memo_entries, max_unit_chars)
        try:
            yield self.fast
        finally:
            self.fast = None

    def token_id(self, spec: str) -> int:
        """The id of a piece, or of ``id:N``; a piece missing from the model is an error, never ``<unk>``."""
        if spec.startswith("id:"):
            try:
                token = int(spec[3:])
            except ValueError:
                raise TokenizerError(f"bad token id spec {spec!r} (expected id:N)") from None
            if not 0 <= token < self.vocab_size:
                raise TokenizerError(
                    f"token {spec} is outside the vocabulary of {self.path} (0..{self.vocab_size - 1})"
                )
            return token
        token = self.sp.piece_to_id(spec)
        if self.sp.id_to_piece(token) != spec:
            raise TokenizerError(
                f"piece {spec!r} is not in {self.path} (SentencePiece would silently use <unk> id {token})"
            )
        return token

    def piece(self, token: int | None) -> str | None:
        """The piece of ``token`` (None for None or an id the model does not have)."""
        return self.sp.id_to_piece(token) if token is not None and token < self.sp.get_piece_size() else None

    def eod(self, spec: str = "auto") -> tuple[int, str]:
        """The EOD id for ``spec`` and the rule that chose it (see the module docstring)."""
        if spec != "auto":
            return self.token_id(spec), f"given {spec!r}"
        if self.sp.id_to_piece(eod := self.sp.piece_to_id(EOD_PIECE)) == EOD_PIECE:
            return eod, f"auto: the model has {EOD_PIECE!r}"
        eos = self.sp.eos_id()
        if 0 <= eos < self.vocab_size and eos != self.sp.unk_id():
            return eos, f"auto: the model's EOS {self.sp.id_to_piece(eos)!r} (no {EOD_PIECE!r} piece)"
        raise TokenizerError(
            f"{self.path}: no EOD token: the model has no {EOD_PIECE!r} piece and no EOS; "
            "set tokenize.eod_piece to a piece or id:N"
        )

    @functools.cached_property
    def dummy_prefix(self) -> bool:
        """Whether the model adds a ``▁`` before the text (SentencePiece's ``add_dummy_prefix``)."""
        return self.sp.id_to_piece(self.sp.encode("a")[0]).startswith("\u2581")

    @functools.cached_property
    def splits_safely(self) -> bool:
        """Whether cutting at a space after a non-space keeps the ids of this model (not, e.g., without a
        dummy prefix but with ``remove_extra_whitespaces``, which drops a piece's leading space)."""
        probe = "ab  cd ef\n gh   ij k\tl mn  "  # cut at every space run (size 6)
        return [i for p, _ in self._cuts(probe, 6) for i in self.sp.encode(p)] == self.sp.encode(probe)

    def _cuts(self, text: str, size: int) -> Iterator[tuple[str, bool | None]]:
        """(piece, whether the cut after it is at a unit start; None for the last piece)."""
        start = 0
        while len(text) - start > size:
            cut = text.rfind(" ", start + 1, start + size)
            while cut > start and text[cut - 1] == " ":
                cut -= 1  # the start of the run of spaces
            if cut <= start:
                yield text[start : start + size], False
                start += size
                continue
            yield text[start:cut], True
            start = cut + 1 if self.dummy_prefix else cut
        yield text[start:], None

    def pieces(self, text: str, size: int) -> Iterator[str]:
        """``text`` cut into pieces of at most about ``size`` characters that encode, one after the other, to
        the ids of the whole: each cut is at a space that follows a non-space (SentencePiece starts a unit
        there), and with a dummy prefix that space is left for the model to add back. A cut that has to fall
        elsewhere (a run of ``size`` characters without such a space, or a model where cutting is not safe)
        is counted in ``unsafe_cuts``."""
        for piece, safe in self._cuts(text, size):
            if safe is not None and not (safe and self.splits_safely):
                self.unsafe_cuts += 1
            yield piece

    def encode_long(self, text: str) -> Iterator[np.ndarray]:
        """The ids of a document too long to encode at once (SentencePiece needs about 50 bytes a
        character), piece by piece."""
        for piece in self.pieces(text, LONG_CHARS):
            yield np.asarray(self.sp.encode(piece), np.int32)

    def encode_flat(self, texts: Sequence[str], threads: int) -> tuple[np.ndarray, np.ndarray]:
        """Encode ``texts``; return all ids concatenated (int32, or the output dtype through the fast path)
        and the per-text lengths (int64)."""
        if not texts:
            return np.empty(0, np.int32), np.empty(0, np.int64)
        texts = list(texts)
        long = any(len(t) > LONG_CHARS for t in texts)
        if self.fast is not None and not long:
            return self.fast.encode_flat(texts)
        if long:
            arrays = [
                np.concatenate(list(self.encode_long(t)))
                if len(t) > LONG_CHARS
                else self.encode_flat([t], threads)[0]
                for t in texts
            ]
            lengths = np.fromiter(map(len, arrays), np.int64, len(arrays))
            return np.concatenate(arrays), lengths
        if self.numpy_output:
            arrays = self.sp.encode(texts, num_threads=threads, out_type="numpy")
            lengths = np.fromiter(map(len, arrays), np.int64, len(arrays))
            return np.concatenate(arrays), lengths
        ids = self.sp.encode(texts, num_threads=threads)
        lengths = np.fromiter(map(len, ids), np.int64, len(ids))
        return np.fromiter(itertools.chain.from_iterable(ids), np.int32, int(lengths.sum())), lengths


def _has_numpy_output(sp: spm.SentencePieceProcessor) -> bool:
    """Whether this SentencePiece returns numpy arrays (``out_type="numpy"``; 0.2.3 does), which saves
    building a Python int per token; older releases give int lists, flattened with ``np.fromiter``."""
    try:
        sp.encode(["a"], out_type="numpy")
    except (ValueError, TypeError):
        return False
    return True


@dataclass(frozen=True)
class Settings:
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
) -> Settings:
    """Settings from CLI-style values; EOD/BOS/marker tokens are looked up and validated.

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
    return Settings(
        json_key=json_key,
        eod_id=eod_id,
        eod_rule=eod_rule,
        bos_id=None if bos is None else tokenizer.token_id(bos),
        min_tokens=min_tokens,
        sft=sft,
        marker_ids={m: tokenizer.token_id(t) for m, t in pairs.items()} if sft else {},
        markers=tuple(pairs),
    )


@dataclass(frozen=True)
class Reject:
    """One rejected record: its 1-based line, id (if readable), reason and a short detail."""

    line: int
    id: Any
    reason: str
    detail: str = ""


@dataclass
class Batch:
    """Accepted texts of a run of input lines, with the rejects found while parsing them."""

    texts: list[str] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)
    ids: list[Any] = field(default_factory=list)
    text_bytes: list[int] = field(default_factory=list)
    rejects: list[Reject] = field(default_factory=list)
    input_bytes: int = 0
    size: int = 0  # text bytes, to cut batches

    @property
    def docs_in(self) -> int:
        return len(self.texts) + len(self.rejects)


def classify(
    raw: bytes, line: int, settings: Settings, splitter: MarkerSplitter | None
) -> tuple[Any, str | Reject]:
    """Parse one input line: ``(id, text)`` for a record to encode, ``(None, Reject)`` otherwise."""
    try:
        record = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        return None, Reject(line, None, "malformed_json", str(exc)[:200])
    if not isinstance(record, dict):
        return None, Reject(line, None, "malformed_json", f"a JSON {type(record).__name__}, not an object")
    rid = record.get("id")
    text = record.get(settings.json_key)
    if not isinstance(text, str):
        what = "missing" if text is None else f"a {type(text).__name__}, not a string"
        return None, Reject(line, rid, "missing_text", f"{settings.json_key!r} is {what}")
    if not text.strip():
        return None, Reject(line, rid, "empty_text", "whitespace only" if text else "empty string")
    if splitter is not None:
        has_marker = splitter.contains_marker(text)
        if settings.sft and not has_marker:
            return None, Reject(line, rid, "no_sft_marker", "SFT record without any marker")
        if not settings.sft and has_marker:
            return None, Reject(
                line, rid, "marker_in_pretraining", "pretraining document contains an SFT marker"
            )
    return rid, text


def utf8_length(text: str, chunk: int = 1 << 20) -> int:
    """Bytes of ``text`` in UTF-8, without a copy of a long text."""
    if text.isascii():
        return len(text)
    return sum(len(text[i : i + chunk].encode()) for i in range(0, len(text), chunk))


def read_batches(path: str, settings: Settings, batch_bytes: int) -> Generator[Batch, None, None]:
    """Stream ``path`` (jsonl, optionally .gz/.zst) as batches of about ``batch_bytes`` bytes of text."""
    splitter = MarkerSplitter(settings.markers) if settings.markers else None
    batch = Batch()
    with open_binary(path) as f:
        for line, raw in enumerate(f, start=1):
            batch.input_bytes += len(raw)
            if raw.isspace():
                continue
            rid, text = classify(raw, line, settings, splitter)
            if isinstance(text, Reject):
                batch.rejects.append(text)
                continue
            raw = b""  # let the line go: the batch holds the text
            nbytes = utf8_length(text)
            batch.texts.append(text)
            batch.lines.append(line)
            batch.ids.append(rid)
            batch.text_bytes.append(nbytes)
            batch.size += nbytes
            del text
            if batch.size >= batch_bytes:
                yield batch
                batch = Batch()
    if batch.docs_in or batch.input_bytes:
        yield batch


def prefetch(items: Generator[T, None, None], depth: int = 2) -> Iterator[T]:
    """Run the generator ``items`` in a background thread, at most ``depth`` items ahead; its exceptions
    re-raise here. Closing the returned iterator stops the thread and closes ``items``."""
    q: queue.Queue[tuple[bool, Any]] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def produce() -> None:
        try:
            with contextlib.closing(items):
                for item in items:
                    if stop.is_set():
                        return
                    q.put((True, item))
            q.put((False, None))
        except BaseException as exc:
            q.put((False, exc))

    thread = threading.Thread(target=produce, name="tokenize-reader", daemon=True)
    thread.start()
    try:
        while True:
            ok, item = q.get()
            if not ok:
                if item is not None:
                    raise item
                return
            yield item
    finally:
        stop.set()
        while thread.is_alive():  # unblock a pending put
            with contextlib.suppress(queue.Empty):
                q.get(timeout=0.05)
        thread.join()


def encode_sft(
    tokenizer: Tokenizer,
    splitter: MarkerSplitter,
    marker_ids: Mapping[str, int],
    texts: Sequence[str],
    threads: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Encode SFT texts: spans between markers batched through SentencePiece, markers as their ids."""
    layouts = [splitter.split(t) for t in texts]
    spans = [part for layout in layouts for part, is_marker in layout if not is_marker]
    flat, span_lengths = tokenizer.encode_flat(spans, threads)
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
    return (np.concatenate(pieces) if pieces else np.empty(0, np.int32)), lengths


def frame(
    flat: np.ndarray, lengths: np.ndarray, keep: np.ndarray, bos_id: int | None, eod_id: int | None
) -> tuple[np.ndarray, np.ndarray]:
    """Drop the documents not in ``keep`` and wrap the others as ``[BOS] tokens [EOD]`` (vectorised)."""
    if not keep.all():
        flat = flat[np.repeat(keep, lengths)]
        lengths = lengths[keep]
    extra = (bos_id is not None) + (eod_id is not None)
    if not extra:
        return flat, lengths
    out_lengths = lengths + extra
    ends = np.cumsum(out_lengths)
    out = np.empty(int(ends[-1]) if len(ends) else 0, flat.dtype)
    is_text = np.ones(len(out), bool)
    if bos_id is not None:
        starts = ends - out_lengths
        out[starts] = bos_id
        is_text[starts] = False
    if eod_id is not None:
        out[ends - 1] = eod_id
        is_text[ends - 1] = False
    out[is_text] = flat
    return out, out_lengths


def pop_long(batch: Batch) -> tuple[str, int, Any, int] | None:
    """Take the batch's last document out if it is too long to encode at once: ``(text, line, id,
    bytes)``. Batches are cut by size, so a long document is always the last of its batch."""
    if not batch.texts or len(batch.texts[-1]) <= LONG_CHARS:
        return None
    return batch.texts.pop(), batch.lines.pop(), batch.ids.pop(), batch.text_bytes.pop()


def write_long(
    builder: IndexedDatasetBuilder, tokenizer: Tokenizer, text: str, settings: Settings
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


def document_prefix(output_prefix: str, json_key: str = "text") -> str:
    """Megatron's output name: ``{output_prefix}_{key}_document``."""
    return naming.tokenized_prefix(output_prefix, json_key)


def tokenize_file(
    input_path: str,
    output_prefix: str,
    tokenizer: Tokenizer,
    settings: Settings,
    *,
    workers: int = 1,
    batch_bytes: int = 4 << 20,
    fast_encode: bool = DEFAULTS.fast_encode,
    memo_entries: int = DEFAULTS.memo_entries,
    memo_unit_chars: int = DEFAULTS.memo_unit_chars,
) -> dict[str, Any]:
    """Tokenize one shard into ``{output_prefix}_{key}_document``; return (and write) its stats. With
    ``fast_encode`` (and a model it is exact for) texts go through a unit memo (``fast_encode.py``)."""
    prefix = document_prefix(output_prefix, settings.json_key)
    splitter = MarkerSplitter(settings.markers) if settings.sft else None
    dtype = best_dtype(tokenizer.vocab_size)
    rejected: Counter[str] = Counter(dict.fromkeys(REASONS, 0))
    docs_in = docs_out = tokens = text_bytes = input_bytes = 0
    unsafe_before = tokenizer.unsafe_cuts
    plain = not input_path.endswith((".gz", ".zst"))
    with (
        Progress(f"tokenize {input_path}", os.path.getsize(input_path) if plain else None) as progress,
        tokenizer.fast_encoding(fast_encode, workers, memo_entries, memo_unit_chars) as fast,
        IndexedDatasetBuilder(prefix, dtype) as builder,
        atomic_path(prefix + ".quarantine.jsonl") as quarantine_tmp,
        open(quarantine_tmp, "wb") as quarantine,
    ):
        for batch in prefetch(read_batches(input_path, settings, batch_bytes)):
            long = pop_long(batch) if splitter is None else None  # a batch ends with its long document
            if splitter is not None:
                flat, lengths = encode_sft(tokenizer, splitter, settings.marker_ids, batch.texts, workers)
            else:
                flat, lengths = tokenizer.encode_flat(batch.texts, workers)
            keep = (lengths > 0) & (lengths >= settings.min_tokens)
            rejects = batch.rejects + [
                Reject(
                    batch.lines[i],
                    batch.ids[i],
                    "empty_text" if lengths[i] == 0 else "too_few_tokens",
                    f"{lengths[i]} tokens" + ("" if lengths[i] == 0 else f" < {settings.min_tokens}"),
                )
                for i in np.flatnonzero(~keep)
            ]
            out, out_lengths = frame(flat, lengths, keep, settings.bos_id, settings.eod_id)
            builder.add_documents(out, out_lengths)
            for r in sorted(rejects, key=lambda r: r.line):
                quarantine.write(orjson.dumps(r.__dict__) + b"\n")
                rejected[r.reason] += 1
            docs_in += batch.docs_in
            docs_out += int(keep.sum())
            tokens += len(out)
            text_bytes += sum(itertools.compress(batch.text_bytes, keep))
            input_bytes += batch.input_bytes
            if long is not None:
                text, line, rid, nbytes = long
                del long
                written, count = write_long(builder, tokenizer, text, settings)
                del text
                docs_in += 1
                if written:
                    docs_out, tokens, text_bytes = docs_out + 1, tokens + written, text_bytes + nbytes
                else:
                    reject = Reject(line, rid, "too_few_tokens", f"{count} tokens < {settings.min_tokens}")
                    quarantine.write(orjson.dumps(reject.__dict__) + b"\n")
                    rejected[reject.reason] += 1
            progress.advance(batch.input_bytes, batch.docs_in)
        # inside the block: a mismatch leaves no output
        check_balance({"docs_in": docs_in, "docs_out": docs_out, "rejected": rejected}, input_path)
        run = progress.summary(docs_in, docs_out, sum(rejected.values()))
        fast_stats = fast_summary(tokenizer, fast, fast_encode)
    stats = {
        "input": input_path,
        "output_prefix": prefix,
        "tokenizer_model": tokenizer.path,
        "tokenizer_sha256": _sha256(tokenizer.path),
        "vocab_size": tokenizer.vocab_size,
        "dtype": dtype.name,
        "mode": "sft" if settings.sft else "pretrain",
        "eod_id": settings.eod_id,
        "eod_piece": tokenizer.piece(settings.eod_id),
        "eod_rule": settings.eod_rule,
        "bos_id": settings.bos_id,
        "min_tokens": settings.min_tokens,
        "sft_markers": dict(settings.marker_ids) if settings.sft else list(settings.markers),
        "docs_in": docs_in,
        "docs_out": docs_out,
        "rejected": dict(rejected),
        "tokens": tokens,
        "bytes": text_bytes,
        "input_bytes": input_bytes,
        "long_document_unsafe_cuts": tokenizer.unsafe_cuts - unsafe_before,
        "fast_encode": fast_stats,
        "run": run | {"workers": workers, "tokens_per_s": round(tokens / max(run["seconds"], 1e-9))},
    }
    write_json(prefix + ".stats.json", stats)
    return stats


def fast_summary(tokenizer: Tokenizer, fast: FastEncoder | None, enabled: bool) -> dict[str, Any]:
    """The fast path's stats (and one log line): whether it ran, and its memo's figures."""
    if fast is None:
        return {"enabled": False, "why": tokenizer.fast_plan[1] if enabled else "turned off"}
    stats = fast.stats()
    print(
        f"fast encoding: {stats['units']:,} units, memo hit rate {stats['hit_rate']:.1%}, "
        f"{stats['units_encoded']:,} encoded, memo {stats['memo_entries']:,} entries",
        file=sys.stderr,
        flush=True,
    )
    return {"enabled": True, "plan": tokenizer.fast_plan[1], **stats}


def _sha256(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--input", required=True, help="jsonl shard (.jsonl, .jsonl.gz, .jsonl.zst)")
    parser.add_argument("--output-prefix", required=True, help="writes {prefix}_{key}_document.{bin,idx,...}")
    parser.add_argument("--tokenizer-model", required=True, help="SentencePiece .model file")
    parser.add_argument("--json-keys", nargs="+", default=["text"], help="the text field (exactly one)")
    settings.add_arguments(parser, TokenizeOptions, "tokenize settings")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    opts = settings.from_args(TokenizeOptions, args)
    if len(args.json_keys) != 1:
        parser.error("exactly one --json-keys value is supported (one output per run)")
    if opts.threads < 1 or opts.batch_mb <= 0:
        parser.error("--threads must be >= 1 and --batch-mb > 0")
    tokenizer = Tokenizer(args.tokenizer_model)
    resolved = resolve_settings(
        tokenizer,
        json_key=args.json_keys[0],
        eod=opts.eod_piece if opts.append_eod else None,
        bos=opts.bos_piece if opts.prepend_bos else None,
        min_tokens=opts.min_tokens,
        sft=opts.mode == "sft",
        sft_markers=[f"{marker}={token}" for marker, token in opts.sft_markers.items()],
    )
    tokenize_file(
        args.input,
        args.output_prefix,
        tokenizer,
        resolved,
        workers=opts.threads,
        batch_bytes=int(opts.batch_mb * (1 << 20)),
        fast_encode=opts.fast_encode,
        memo_entries=opts.memo_entries,
        memo_unit_chars=opts.memo_unit_chars,
    )
    return 0
