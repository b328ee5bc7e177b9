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

Speed: a reader thread parses JSON into batches of about ``--batch-mb`` MB of text (``reader``: most lines by
a compiled scanner, without the GIL), an encoder thread encodes the next batch with SentencePiece's batched
``encode(..., num_threads=workers)`` (which releases the GIL) while the main thread writes the one before. A
byte-level tokenizer's engine (``hf_tokenizer``) is fed the reader's strings or UTF-8 bytes and, in
pretraining, does nothing else: the main thread checks its ids (``HFTokenizer.finish``) and puts the
template's tokens around each document's with BOS and EOD in one compiled pass (``framing.frame``).
fastokens encodes a call on one thread, so ``workers`` encoder threads each encode a batch at once
(``HFTokenizer.concurrent_calls``); its build starts from the tokenizer.json before the ``tokenizers``
library reads it (``byte_engine.prebuild``). With ``--fast-encode`` (the default) the batch of a
SentencePiece model goes through gigatoken instead (``sp_engine.SpEngine``, ``--engine auto``) where it gives
SentencePiece's ids, else through ``fast_encode.FastEncoder``: one compiled memo of word-like units, each
distinct unit encoded once (by SentencePiece with ``workers`` threads) and looked up afterwards (the same
ids; the stats' ``fast_encode`` gives the engine, the memo's hit rate and size, or why the model needs
SentencePiece for every text). Memory is bounded by ``4 + encoder threads`` batches (one being read, two read
ahead, one in each encoder thread, one being written; while the encoder starts, the reader may read up to 64
MB of text ahead) plus the index arrays (12 bytes per document), whatever the shard size (and by
``--memo-entries`` on the fast path). SentencePiece needs about 50 bytes a character, so a document over 4 Mi
characters is encoded piece by piece, cut where SentencePiece starts a unit anyway (a space after a
non-space), which gives the same ids as the whole; a run of 4 Mi characters without such a space is cut where
it must and counted in the stats (``long_document_unsafe_cuts``).

This module is the command and its loop; ``tokenizer`` holds the model (token lookup, the EOD rule, batched
and long-document encoding), ``reader`` the batches and rejects read ahead in a thread, and ``framing`` the
resolved per-record settings, SFT encoding and ``[BOS] tokens [EOD]``.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import os
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import orjson

from workflow_scripts.core import naming, settings
from workflow_scripts.core.fsio import atomic_path, write_json
from workflow_scripts.core.indexed_dataset import IndexedDatasetBuilder, best_dtype
from workflow_scripts.core.progress import Progress
from workflow_scripts.core.stage_stats import check_balance
from workflow_scripts.tokens import byte_engine, kinds
from workflow_scripts.tokens.fast_encode import FastEncoder
from workflow_scripts.tokens.framing import RecordSettings, encode_sft, frame, resolve_settings, write_long
from workflow_scripts.tokens.kinds import TokenizerFiles
from workflow_scripts.tokens.reader import REASONS, Batch, Reject, in_order, pop_long, prefetch, read_batches
from workflow_scripts.tokens.settings import TokenizeSettings
from workflow_scripts.tokens.sft import MarkerSplitter

if TYPE_CHECKING:
    from workflow_scripts.tokens.byte_engine import Engine
    from workflow_scripts.tokens.hf_tokenizer import HFTokenizer
    from workflow_scripts.tokens.kinds import AnyTokenizer
    from workflow_scripts.tokens.sp_engine import SpEngine

DEFAULTS = TokenizeSettings()
START_READ_AHEAD = 64 << 20  # text the reader may read ahead while the encoder starts (its engine builds)
ROUTED_LINES = 100  # the input lines of the first documents an engine left to its library, named in the stats


def document_prefix(output_prefix: str, json_key: str = "text") -> str:
    """Megatron's output name: ``{output_prefix}_{key}_document``."""
    return naming.tokenized_prefix(output_prefix, json_key)


def tokenize_file(
    input_path: str,
    output_prefix: str,
    tokenizer: AnyTokenizer,
    settings: RecordSettings,
    *,
    workers: int = 1,
    batch_bytes: int = 4 << 20,
    fast_encode: bool = DEFAULTS.fast_encode,
    engine: str = DEFAULTS.engine,
    memo_entries: int = DEFAULTS.memo_entries,
    memo_unit_chars: int = DEFAULTS.memo_unit_chars,
) -> dict[str, Any]:
    """Tokenize one shard into ``{output_prefix}_{key}_document``; return (and write) its stats. With
    ``fast_encode`` (and a model it is exact for) texts go through gigatoken (``engine`` ``auto``) or a unit
    memo (``fast_encode.py``)."""
    prefix = document_prefix(output_prefix, settings.json_key)
    splitter = MarkerSplitter(settings.markers) if settings.sft else None
    dtype = best_dtype(tokenizer.vocab_size)
    rejected: Counter[str] = Counter(dict.fromkeys(REASONS, 0))
    docs_in = docs_out = tokens = text_bytes = input_bytes = 0
    named: list[int] = []  # the lines of the documents an engine left to its library (the first ROUTED_LINES)
    routed_docs = 0  # how many documents an engine left to its library
    unsafe_before = tokenizer.unsafe_cuts
    plain = not input_path.endswith((".gz", ".zst"))
    with (
        Progress(f"tokenize {input_path}", os.path.getsize(input_path) if plain else None) as progress,
        tokenizer.fast_encoding(fast_encode, workers, memo_entries, memo_unit_chars, engine) as fast,
        IndexedDatasetBuilder(prefix, dtype) as builder,
        atomic_path(prefix + ".quarantine.jsonl") as quarantine_tmp,
        open(quarantine_tmp, "wb") as quarantine,
    ):
        bos = [] if settings.bos_id is None else [settings.bos_id]
        eod = [] if settings.eod_id is None else [settings.eod_id]
        reading = read_batches(input_path, settings, batch_bytes, tokenizer.reads_utf8)
        batches = prefetch(reading, early=START_READ_AHEAD // batch_bytes)
        calls = tokenizer.concurrent_calls(workers)  # batches encoded at once, on workers // calls threads
        encode = functools.partial(encode_batch, tokenizer, splitter, settings, workers // calls)
        for batch, long, ids in in_order(encode, batches, calls):
            flat, lengths, routed = ids.ids, ids.lengths, ids.routed
            template: tuple[list[int], list[int]] = ([], [])  # the post-processor's, not in ``flat`` yet
            if not ids.final:  # a byte-level engine's ids (``encode_raw``), made final here
                finishing = cast("HFTokenizer", tokenizer)
                flat, lengths = finishing.finish(batch.texts, flat, lengths, specials=False)
                routed, template = finishing.last_routed, finishing.specials
            named += [batch.lines[i] for i in routed[: ROUTED_LINES - len(named)]]
            routed_docs += len(routed)
            counts = lengths + len(template[0]) + len(template[1])  # the tokenizer's own encode's
            keep = (counts > 0) & (counts >= settings.min_tokens)
            rejects = batch.rejects + [
                Reject(
                    batch.lines[i],
                    batch.ids[i],
                    "empty_text" if counts[i] == 0 else "too_few_tokens",
                    f"{counts[i]} tokens" + ("" if counts[i] == 0 else f" < {settings.min_tokens}"),
                )
                for i in np.flatnonzero(~keep)
            ]
            before, after = [*bos, *template[0]], [*template[1], *eod]
            out, out_lengths = frame(flat, lengths, before, after, keep, builder.dtype)
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
        fast_stats = fast_summary(tokenizer, fast, fast_encode, routed_docs)
        fast_stats |= routed_lines(named, fast_stats)
    stats = {
        "input": input_path,
        "output_prefix": prefix,
        "tokenizer_model": tokenizer.path,
        "tokenizer_type": tokenizer.kind,
        "tokenizer_merges": tokenizer.merges,
        "tokenizer_sha256": TokenizerFiles.of(tokenizer).sha256(),
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


@dataclass(frozen=True)
class BatchIds:
    """A batch's ids back to back and each text's count, with the texts (indices) the tokenizer's engine left
    to its library. Not ``final``: a byte-level engine's ids as it gave them (``encode_raw``), which the
    caller finishes (``finish`` also finds the routed texts)."""

    ids: np.ndarray
    lengths: np.ndarray
    routed: list[int] = field(default_factory=list)
    final: bool = True


def encode_batch(
    tokenizer: AnyTokenizer,
    splitter: MarkerSplitter | None,
    settings: RecordSettings,
    threads: int,
    batch: Batch,
) -> tuple[Batch, tuple[str, int, Any, int] | None, BatchIds]:
    """The batch with its long document taken out (pretraining) and its ids, encoded on ``threads`` threads;
    run by ``in_order``'s threads, so that the next batches encode while this one is written. A byte-level
    engine's ids are not final: the caller finishes them beside the next batches' encoding."""
    long = pop_long(batch) if splitter is None else None  # a batch ends with its long document
    utf8 = batch.utf8_batch() if batch.utf8 else None  # the reader's UTF-8 bytes, when read
    raw = None if splitter is not None else tokenizer.encode_raw(batch.texts, threads, utf8)
    if raw is not None:  # finished by the caller
        return batch, long, BatchIds(*raw, final=False)
    if splitter is not None:
        flat, lengths, routed = encode_sft(tokenizer, splitter, settings.marker_ids, batch.texts, threads)
        return batch, long, BatchIds(flat, lengths, routed)
    # SentencePiece, or the tokenizers library (it reads the strings)
    flat, lengths = tokenizer.encode_flat(batch.texts, threads)
    return batch, long, BatchIds(flat, lengths, tokenizer.last_routed)


def routed_lines(lines: list[int], fast: dict[str, Any]) -> dict[str, Any]:
    """The stats' ``routed_lines`` where an engine may leave documents to its library (``routed_to_*``): the
    input lines of the first ``ROUTED_LINES`` of them (said in the log too)."""
    count = next((n for key, n in fast.items() if key.startswith("routed_to_")), None)
    if count is None:
        return {}
    if lines:
        shown = ", ".join(map(str, lines[:10])) + (", ..." if count > min(len(lines), 10) else "")
        print(
            f"{count:,} documents encoded by the library, where the engine may differ: lines {shown}",
            file=sys.stderr,
        )
    return {"routed_lines": lines}


def fast_summary(
    tokenizer: AnyTokenizer, fast: SpEngine | FastEncoder | Engine | None, enabled: bool, routed: int
) -> dict[str, Any]:
    """The fast path's stats (and one log line): whether it ran, and its engine (with the documents it left
    to its library, ``routed``: an SFT record counts once, however many of its spans) or its memo's
    figures."""
    if tokenizer.kind != "sentencepiece":
        return tokenizer.engine_stats(fast, routed)
    if fast is None:
        return {"enabled": False, "why": tokenizer.fast_plan[1] if enabled else "turned off"}
    if isinstance(fast, FastEncoder):
        stats = fast.stats()
        print(
            f"fast encoding: {stats['units']:,} units, memo hit rate {stats['hit_rate']:.1%}, "
            f"{stats['units_encoded']:,} encoded, memo {stats['memo_entries']:,} entries",
            file=sys.stderr,
            flush=True,
        )
        return {"enabled": True, "engine": "unit memo", "plan": tokenizer.fast_plan[1], **stats}
    print(f"fast encoding: {fast.name}, {routed:,} documents to SentencePiece", file=sys.stderr)
    why = tokenizer.engine_start[1]
    return {"enabled": True, "engine": fast.name, "why": why, "routed_to_sentencepiece": routed}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--input", required=True, help="jsonl shard (.jsonl, .jsonl.gz, .jsonl.zst)")
    parser.add_argument("--output-prefix", required=True, help="writes {prefix}_{key}_document.{bin,idx,...}")
    kinds.add_arguments(parser)
    parser.add_argument("--json-keys", nargs="+", default=["text"], help="the text field (exactly one)")
    settings.add_arguments(parser, TokenizeSettings, "tokenize settings")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    opts = settings.from_args(TokenizeSettings, args)
    if len(args.json_keys) != 1:
        parser.error("exactly one --json-keys value is supported (one output per run)")
    if opts.threads < 1 or opts.batch_mb <= 0:
        parser.error("--threads must be >= 1 and --batch-mb > 0")
    files = kinds.from_args(args)
    if files.kind == "hf" and opts.fast_encode:  # the engine builds while the tokenizer loads
        byte_engine.prebuild(files.model, opts.engine, opts.threads)
    tokenizer = files.load()
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
        engine=opts.engine,
        memo_entries=opts.memo_entries,
        memo_unit_chars=opts.memo_unit_chars,
    )
    return 0
