"""TOKENIZE stage: one jsonl shard -> Megatron ``{prefix}_{key}_document.bin/.idx`` with the data's tokenizer.

Argument names follow Megatron-LM ``tools/preprocess_data.py`` where they overlap; the other options are
the ``tokenize`` settings of config/schema.yaml (with its defaults)::

    snakepack tokenize --input SHARD.jsonl[.zst|.gz] --output-prefix P --tokenizer-model M.model \\
        [--json-keys text] [--append-eod [--eod-piece auto]] [--prepend-bos [--bos-piece '<s>']] \\
        [--min-tokens N] [--mode sft] [--sft-markers '<<<|user|>>>=<|user|>' ...] [--workers N] [--batch-mb 4]

Outputs, all next to each other (D = ``P_text_document``): ``D.bin`` and ``D.idx`` (one sequence per
document: [BOS] tokens [EOD]), ``D.quarantine.jsonl`` (one line per rejected record: ``line``, ``id``,
``reason``, ``detail``), ``D.ledger.npz`` (each document's raw file, line and content hash: ``ledger``) and
``D.stats.json`` (written last: ``docs_in``, ``docs_out``, ``rejected``,
``tokens``, ``bytes``, ...). All are written atomically.

Reject reasons: ``malformed_json`` (not JSON or not an object), ``missing_text`` (key missing or not a
string), ``empty_text`` (whitespace only, or encodes to no token), ``marker_in_pretraining`` (a pretraining
document containing an SFT marker), ``no_sft_marker`` (an SFT record without any marker) and
``too_few_tokens`` (fewer than ``--min-tokens`` tokens before BOS/EOD are added; SFT marker tokens
count). Blank lines are not records. ``docs_in == docs_out + sum(rejected)`` is checked.

Tokenizers: a SentencePiece ``.model``, a Hugging Face ``tokenizer.json`` or a GPT-2 ``vocab.json`` with its
``merges.txt`` (``kinds``), each encoded as the trainers' own preprocessing encodes it (``engines``).

EOD (``--eod-piece``): ``auto`` is the tokenizer's rule: for a SentencePiece model ``<|endoftext|>`` when the
model has that piece (GPT-NeoX's ``SPMTokenizer`` rule), else the model's EOS (Megatron-LM's
``GPTSentencePieceTokenizer`` rule), else it is an error (never ``<unk>``, which is what GPT-NeoX silently
uses for a model without ``<|endoftext|>``); for a tokenizer.json ``<|endoftext|>``, else the ``eos_token``
of the ``tokenizer_config.json`` beside it. A piece, token or ``id:N`` overrides the rule. The tokenizer the
workflow trains has ``<|endoftext|>`` as its EOS, so both rules agree for it. The id chosen, its piece and the
rule are in the stats (and the data signature).

Tokens: EOD, BOS and SFT marker tokens are pieces or tokens of the model (looked up and validated: one
missing from the model is an error, where SentencePiece's ``piece_to_id`` would silently give ``<unk>``) or
explicit ``id:N``. In SFT mode (``--sft``) the spans between markers are encoded and each marker becomes its
token; in pretraining mode the markers are only searched for.

Speed: a reader thread parses JSON into batches of about ``--batch-mb`` MB of text (``reader``: most lines by
a compiled scanner, without the GIL), encoder threads encode the next batches while the main thread writes
the one before (``reader.in_order``). The encoder is the one ``engines.choose`` picks (``--fast-encode``, the
default, and ``--engine``): an engine library or a unit memo where it gives the library's ids, else the
library itself (SentencePiece's batched ``encode(..., num_threads=workers)``, or the ``tokenizers``
library), each releasing the GIL; the stats' ``fast_encode`` gives the engine and why, the documents it left
to its library or the memo's hit rate and size. The loop talks to the encoder only through
``engines.base.Encoder``: it reads the UTF-8 bytes the encoder asks for (``reads_utf8``), encodes
``concurrent_calls`` batches at once (fastokens encodes a call on one thread, so ``workers`` encoder threads
each encode a batch; a plain file of fewer batches than that gets an encoder of as many threads as it has
batches: a small shard's gigatoken then takes its one-thread path), and in its main thread finishes each
batch (``Encoder.finish``: a byte-level engine's ids checked for the documents it may read differently) and
puts the post-processor's tokens around each document's with BOS and EOD in one compiled pass
(``framing.frame``). A byte-level engine's build starts from the tokenizer.json before the ``tokenizers``
library reads it (``choose.prebuild``). Memory is bounded by
``4 + encoder threads`` batches (one being read, two read ahead, one in each encoder thread, one being
written; while the encoder starts, the reader may read up to 64 MB of text ahead) plus the index arrays (12
bytes per document), whatever the shard size (and by ``--memo-entries`` on the fast path). The library
needs about 50 bytes a character, so a document over 4 Mi characters is encoded piece by piece, cut where
the tokenizer starts a unit anyway (a space after a non-space), which gives the same ids as the whole; a run
of 4 Mi characters without such a space is cut where it must and counted in the stats
(``long_document_unsafe_cuts``).

This module is the command and its loop; ``engines`` holds the tokenizers (token lookup, the EOD rule,
long-document cuts) and their encoders, ``reader`` the batches and rejects read ahead in a thread, and
``framing`` the resolved per-record settings, SFT encoding and ``[BOS] tokens [EOD]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import itertools
import os
import sys
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np
import orjson

from workflow_scripts.core import naming, settings
from workflow_scripts.core.fsio import atomic_path, write_json
from workflow_scripts.core.indexed_dataset import IndexedDatasetBuilder, best_dtype
from workflow_scripts.core.progress import Progress
from workflow_scripts.core.stage_stats import check_balance
from workflow_scripts.tokens import kinds, memory
from workflow_scripts.tokens.engines import choose
from workflow_scripts.tokens.engines.base import Encoded, Encoder, Tokenizer
from workflow_scripts.tokens.framing import RecordSettings, encode_sft, frame, resolve_settings, write_long
from workflow_scripts.tokens.kinds import TokenizerFiles
from workflow_scripts.tokens.ledger import LedgerBuilder, long_text_hash, str_hashes, utf8_hashes
from workflow_scripts.tokens.reader import (
    REASONS,
    Batch,
    Long,
    Reject,
    in_order,
    pop_long,
    prefetch,
    read_batches,
)
from workflow_scripts.tokens.settings import TokenizeSettings
from workflow_scripts.tokens.sft import MarkerSplitter

DEFAULTS = TokenizeSettings()
START_READ_AHEAD = 64 << 20  # text the reader may read ahead while the encoder starts (its engine builds)
ROUTED_LINES = 100  # the input lines of the first documents an engine left to its library, named in the stats


def document_prefix(output_prefix: str, json_key: str = "text") -> str:
    """Megatron's output name: ``{output_prefix}_{key}_document``."""
    return naming.tokenized_prefix(output_prefix, json_key)


def tokenize_file(
    input_path: str,
    output_prefix: str,
    tokenizer: Tokenizer,
    settings: RecordSettings,
    *,
    workers: int = 1,
    batch_bytes: int = 4 << 20,
    fast_encode: bool = DEFAULTS.fast_encode,
    engine: str = DEFAULTS.engine,
    memo_entries: int = DEFAULTS.memo_entries,
    memo_unit_chars: int = DEFAULTS.memo_unit_chars,
) -> dict[str, Any]:
    """Tokenize one shard into ``{output_prefix}_{key}_document``; return (and write) its stats. The encoder
    is ``engines.choose``'s for ``fast_encode``, ``engine``, ``workers`` and the memo's size."""
    prefix = document_prefix(output_prefix, settings.json_key)
    splitter = MarkerSplitter(settings.markers) if settings.sft else None
    dtype = best_dtype(tokenizer.vocab_size)
    rejected: Counter[str] = Counter(dict.fromkeys(REASONS, 0))
    docs_in = docs_out = tokens = text_bytes = input_bytes = 0
    named: list[int] = []  # the lines of the documents an engine left to its library (the first ROUTED_LINES)
    routed_docs = 0  # how many documents an engine left to its library
    unsafe_before = tokenizer.unsafe_cuts
    plain = not input_path.endswith((".gz", ".zst"))
    ledger = LedgerBuilder()
    options = dataclasses.replace(
        DEFAULTS,
        threads=workers,
        fast_encode=fast_encode,
        engine=engine,
        memo_entries=memo_entries,
        memo_unit_chars=memo_unit_chars,
    )
    with (
        Progress(f"tokenize {input_path}", os.path.getsize(input_path) if plain else None) as progress,
        IndexedDatasetBuilder(prefix, dtype) as builder,
        atomic_path(prefix + ".quarantine.jsonl") as quarantine_tmp,
        open(quarantine_tmp, "wb") as quarantine,
    ):
        encoder = choose.choose(tokenizer, options)
        batches = -(-os.path.getsize(input_path) // batch_bytes) if plain else None
        if batches is not None and encoder.concurrent_calls > max(batches, 1):  # a thread a batch: no more
            encoder = choose.choose(tokenizer, dataclasses.replace(options, threads=max(batches, 1)))
        bos = [] if settings.bos_id is None else [settings.bos_id]
        eod = [] if settings.eod_id is None else [settings.eod_id]
        reading = read_batches(input_path, settings, batch_bytes, encoder.reads_utf8)
        batches = prefetch(reading, early=START_READ_AHEAD // batch_bytes)
        encode = functools.partial(encode_batch, encoder, splitter, settings)
        for batch, long, encoded, hashes in in_order(encode, batches, encoder.concurrent_calls):
            encoded = encoder.finish(batch.strings(), encoded)  # here, beside the next batches' encoding
            lengths, routed = encoded.lengths, encoded.routed
            named += [batch.lines[i] for i in routed[: ROUTED_LINES - len(named)]]
            routed_docs += len(routed)
            counts = lengths + len(encoded.before) + len(encoded.after)  # the tokenizer's own encode's
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
            before, after = [*bos, *encoded.before], [*encoded.after, *eod]
            out, out_lengths = frame(encoded.ids, lengths, before, after, keep, builder.dtype)
            builder.add_documents(out, out_lengths)
            if keep.all():
                ledger.add(batch.sources, batch.raw_lines, hashes)
            else:
                kept = np.flatnonzero(keep).tolist()
                ledger.add([batch.sources[i] for i in kept], [batch.raw_lines[i] for i in kept], hashes[keep])
            for r in sorted(rejects, key=lambda r: r.line):
                quarantine.write(orjson.dumps(r.__dict__) + b"\n")
                rejected[r.reason] += 1
            docs_in += batch.docs_in
            docs_out += int(keep.sum())
            tokens += len(out)
            text_bytes += sum(itertools.compress(batch.text_bytes, keep))
            input_bytes += batch.input_bytes
            if long is not None:
                text, line, rid, nbytes = long.text, long.line, long.id, long.size
                where = [long.source], [long.raw_line], [long_text_hash(text)]
                del long
                written, count = write_long(builder, tokenizer, text, settings)
                del text
                docs_in += 1
                if written:
                    docs_out, tokens, text_bytes = docs_out + 1, tokens + written, text_bytes + nbytes
                    ledger.add(*where)
                else:
                    reject = Reject(line, rid, "too_few_tokens", f"{count} tokens < {settings.min_tokens}")
                    quarantine.write(orjson.dumps(reject.__dict__) + b"\n")
                    rejected[reject.reason] += 1
            progress.advance(batch.input_bytes, batch.docs_in)
        # inside the block: a mismatch leaves no output
        check_balance({"docs_in": docs_in, "docs_out": docs_out, "rejected": rejected}, input_path)
        ledger.write(prefix)
        run = progress.summary(docs_in, docs_out, sum(rejected.values()))
        fast_stats = encoder.stats(routed_docs)
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


def encode_batch(
    encoder: Encoder, splitter: MarkerSplitter | None, settings: RecordSettings, batch: Batch
) -> tuple[Batch, Long | None, Encoded, np.ndarray]:
    """The batch with its long document taken out (pretraining), its ids and its texts' hashes (the
    ledger's); run by ``in_order``'s threads, so that the next batches encode while this one is written (and
    the caller ``finish``es it)."""
    if splitter is not None:
        texts = batch.strings()
        return batch, None, encode_sft(encoder, splitter, settings.marker_ids, texts), str_hashes(texts)
    long = pop_long(batch)  # a batch ends with its long document
    utf8 = batch.utf8_batch() if batch.utf8 else None  # the reader's UTF-8 bytes, when read
    hashes = str_hashes(batch.strings()) if utf8 is None else utf8_hashes(utf8[0], batch.text_bytes)
    return batch, long, encoder.encode(batch.strings(), utf8), hashes


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
    memory.keep_freed()
    files = kinds.from_args(args)
    choose.prebuild(files, opts)  # a byte-level engine builds while the tokenizer loads
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
