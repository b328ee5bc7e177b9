"""``choose``: the one place an encoder is picked for a tokenizer and the ``tokenize`` settings.

With ``fast_encode`` off, the tokenizer's own library encodes every text. With it on, the fastest encoder
that gives the library's ids on this tokenizer, each checked where it starts:

- a SentencePiece model: gigatoken (``engine`` ``auto`` or ``gigatoken``; ``sp_gigatoken``), else the unit
  memo (``sp_memo``), else SentencePiece; fastokens reads no SentencePiece model (``fastokens``: the memo);
- a ``tokenizer.json`` or GPT-2 pair: fastokens, then gigatoken (``auto``; or the one named;
  ``byte_engines``), else the unit memo (``byte_memo``; ``memo`` goes there at once), else ``tokenizers``.

Why each was or was not taken is said once in the log and kept in the encoder for the stats
(``Encoder.stats``). A SentencePiece model's checks run once per loaded tokenizer, and a model that passed
gigatoken's is remembered on disk (``sp_gigatoken``); a byte-level engine's build is shared per process and
its check remembered on disk (``byte_engines``). ``prebuild`` starts that build before the tokenizer loads.
"""

from __future__ import annotations

import os
import sys
import weakref
from typing import TYPE_CHECKING, Any

from workflow_scripts.tokens.engines.base import Encoder, Tokenizer

if TYPE_CHECKING:
    from workflow_scripts.tokens.engines.hf_tokenizer import HFTokenizer
    from workflow_scripts.tokens.engines.sp_tokenizer import SentencePieceTokenizer
    from workflow_scripts.tokens.kinds import TokenizerFiles
    from workflow_scripts.tokens.settings import TokenizeSettings

_STARTED: weakref.WeakKeyDictionary[Tokenizer, dict[str, Any]] = weakref.WeakKeyDictionary()


def choose(tokenizer: Tokenizer, settings: TokenizeSettings) -> Encoder:
    """The encoder of ``tokenizer`` under ``settings`` (``fast_encode``, ``engine``, ``threads``,
    ``memo_entries``, ``memo_unit_chars``); see the module docstring."""
    if tokenizer.kind == "sentencepiece":
        return _sentencepiece(tokenizer, settings)  # type: ignore[arg-type]
    return _byte_level(tokenizer, settings)  # type: ignore[arg-type]


def prebuild(files: TokenizerFiles, settings: TokenizeSettings) -> None:
    """Start building the engine ``choose`` tries first for a ``tokenizer.json``, before the tokenizer loads
    (``byte_engines.prebuild``); nothing for other kinds or with ``fast_encode`` off."""
    if files.kind == "hf" and settings.fast_encode:
        from workflow_scripts.tokens.engines import byte_engines

        byte_engines.prebuild(files.model, settings.engine, settings.threads)


def _once(tokenizer: Tokenizer, key: str, start: Any) -> Any:
    """``start()``, once per tokenizer."""
    started = _STARTED.setdefault(tokenizer, {})
    if key not in started:
        started[key] = start()
    return started[key]


def _sentencepiece(tokenizer: SentencePieceTokenizer, settings: TokenizeSettings) -> Encoder:
    from workflow_scripts.tokens.engines import sp_memo
    from workflow_scripts.tokens.engines.sp_gigatoken import SpGigatoken
    from workflow_scripts.tokens.engines.sp_tokenizer import SentencePieceEncoder

    threads, engine = settings.threads, settings.engine
    if not settings.fast_encode:
        return SentencePieceEncoder(tokenizer, threads, "turned off")
    if engine == "fastokens":
        print("encoder: fastokens reads no SentencePiece model; the unit memo instead", file=sys.stderr)
    if engine in ("auto", "gigatoken"):
        started, note = _once(tokenizer, "gigatoken", lambda: SpGigatoken.start(tokenizer))
        print(f"encoder: {note}" + ("" if started else "; the unit memo instead"), file=sys.stderr)
        if started is not None:
            return started.on_threads(threads)
    plan, note = _once(tokenizer, "memo", lambda: _sp_plan(tokenizer))
    if plan is None:
        return SentencePieceEncoder(tokenizer, threads, note)
    return sp_memo.SpUnitMemo(tokenizer, plan, note, threads, settings.memo_entries, settings.memo_unit_chars)


def _sp_plan(tokenizer: SentencePieceTokenizer) -> tuple[Any, str]:
    """Whether the unit memo is exact for the model (``sp_memo.plan``); why not is said in the log."""
    from workflow_scripts.tokens.engines import sp_memo

    plan, note = sp_memo.plan(tokenizer.model)
    if plan is None:
        print(
            f"fast encoding off for {tokenizer.path}: {note}; SentencePiece encodes every text",
            file=sys.stderr,
        )
    return plan, note


def _byte_level(tokenizer: HFTokenizer, settings: TokenizeSettings) -> Encoder:
    from workflow_scripts.tokens.engines import byte_engines, byte_memo
    from workflow_scripts.tokens.engines.hf_tokenizer import TokenizersEncoder

    threads, engine = settings.threads, settings.engine
    os.environ.setdefault("RAYON_NUM_THREADS", str(max(1, threads)))  # read when the library's pool starts
    if not settings.fast_encode:
        return TokenizersEncoder(tokenizer, threads, "turned off", "turned off")
    specials = [t.content for t in tokenizer.backend.get_added_tokens_decoder().values()]
    if engine == "memo":
        started, note = None, f"engine {engine!r}: the unit memo over the tokenizers library"
    else:
        json = byte_engines.json_of(tokenizer.path) if tokenizer.from_file else None
        started, note = byte_engines.start(tokenizer.backend, specials, engine, threads, json)
    print(f"encoder: {note}", file=sys.stderr, flush=True)
    if started is not None:
        memo_note = f"{started.library} encodes whole documents (faster)"
        print(f"unit memo: off: {memo_note}", file=sys.stderr, flush=True)
        library = TokenizersEncoder(tokenizer, threads, note, memo_note)
        return byte_engines.EngineEncoder(tokenizer, started, library, memo_note)
    exact, memo_note = byte_memo.plan(tokenizer.backend)
    if exact:
        probe = byte_memo.ByteUnitMemo(tokenizer, note, memo_note, threads, 1 << 12, 64)
        wrong = byte_memo.self_check(probe, specials)
        if wrong:
            exact, memo_note = False, wrong
        else:
            memo_note += ": the tokenizers library's ids on the probe texts"
    print(f"unit memo: {'on' if exact else 'off'}: {memo_note}", file=sys.stderr, flush=True)
    if not exact:
        return TokenizersEncoder(tokenizer, threads, note, memo_note)
    entries, unit_chars = settings.memo_entries, settings.memo_unit_chars
    return byte_memo.ByteUnitMemo(tokenizer, note, memo_note, threads, entries, unit_chars)
