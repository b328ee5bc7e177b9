"""The tokenize stage's reader: a jsonl shard (optionally .gz/.zst) parsed into batches of about
``batch_bytes`` of text, each with the records rejected while parsing it (``classify``), read ahead in a
background thread (``prefetch``) while the previous batch is encoded. ``REASONS`` are every reject reason
of the stage, in the order of its stats.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
import orjson

from workflow_scripts.core.fsio import open_binary
from workflow_scripts.tokens.framing import RecordSettings
from workflow_scripts.tokens.settings import LONG_CHARS
from workflow_scripts.tokens.sft import MarkerSplitter

REASONS = (
    "malformed_json",
    "missing_text",
    "empty_text",
    "marker_in_pretraining",
    "no_sft_marker",
    "too_few_tokens",
)

T = TypeVar("T")


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
    text_bytes: list[int] = field(default_factory=list)  # read with the UTF-8 bytes, else by ``measure``
    utf8: list[bytes] = field(default_factory=list)  # the texts' UTF-8 bytes, when asked for
    rejects: list[Reject] = field(default_factory=list)
    input_bytes: int = 0
    size: int = 0  # text bytes (characters without the UTF-8 bytes), to cut batches

    @property
    def docs_in(self) -> int:
        return len(self.texts) + len(self.rejects)

    def measure(self) -> None:
        """The texts' UTF-8 sizes, when they were read without their bytes (an ASCII text's is its length)."""
        if len(self.text_bytes) != len(self.texts):
            self.text_bytes = [len(text) if text.isascii() else len(text.encode()) for text in self.texts]

    def utf8_batch(self) -> tuple[bytes, np.ndarray]:
        """The texts' UTF-8 bytes back to back and each one's size (``read_batches(..., utf8=True)``)."""
        sizes = np.asarray(self.text_bytes, np.int64)
        if len(self.utf8) != 1 or len(self.utf8[0]) != sizes.sum():
            raise ValueError("the batch's UTF-8 bytes were not read, or it holds a long document")
        return self.utf8[0], sizes


def classify(
    raw: bytes, line: int, settings: RecordSettings, splitter: MarkerSplitter | None
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
    if not text or text.isspace():  # as ``not text.strip()``, without the copy
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


def read_batches(
    path: str, settings: RecordSettings, batch_bytes: int, utf8: bool = False
) -> Generator[Batch, None, None]:
    """Stream ``path`` (jsonl, optionally .gz/.zst) as batches of about ``batch_bytes`` bytes of text (with
    ``utf8``, their UTF-8 bytes too, joined here in the reader's thread; without, a batch's size counts
    characters and ``Batch.measure`` gives the bytes). A long document ends its batch."""
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
            if utf8 and len(text) <= LONG_CHARS:
                batch.utf8.append(text.encode())
                batch.text_bytes.append(len(batch.utf8[-1]))
                batch.size += batch.text_bytes[-1]
            else:
                batch.size += len(text)
            batch.texts.append(text)
            batch.lines.append(line)
            batch.ids.append(rid)
            full = batch.size >= batch_bytes or len(text) > LONG_CHARS
            del text
            if full:
                yield joined(batch, utf8)
                batch = Batch()
    if batch.docs_in or batch.input_bytes:
        yield joined(batch, utf8)


def joined(batch: Batch, utf8: bool) -> Batch:
    """The batch with its texts' UTF-8 bytes joined into one buffer (the long document's left out)."""
    if utf8:
        batch.utf8 = [b"".join(batch.utf8)]
    return batch


def prefetch(items: Generator[T, None, None], depth: int = 2) -> Generator[T, None, None]:
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


def pop_long(batch: Batch) -> tuple[str, int, Any, int] | None:
    """Take the batch's last document out if it is too long to encode at once: ``(text, line, id,
    bytes)``. A long document always ends its batch (and has no UTF-8 bytes or size in it)."""
    if not batch.texts or len(batch.texts[-1]) <= LONG_CHARS:
        return None
    text = batch.texts.pop()
    return text, batch.lines.pop(), batch.ids.pop(), utf8_length(text)
