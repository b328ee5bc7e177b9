"""The tokenize stage's reader: a jsonl shard (optionally .gz/.zst) parsed into batches of about
``batch_bytes`` of text, each with the records rejected while parsing it, read ahead in a background
thread (``prefetch``) while the previous batches are encoded (``in_order``: one a thread, results in
order). The compiled scanner (``_jsonl.c``) reads the records it can vouch for (most of them) without the
GIL; ``classify`` reads every other line. Each record's raw position (ingest's ``source`` and ``line``
members, ``raw_position``) rides along for the lineage ledger (``ledger``). For an engine that reads the
texts' UTF-8, a batch holds that and no str per text (``Batch.strings`` decodes one when asked).
``REASONS`` are every reject reason of the stage, in the order of its stats."""

from __future__ import annotations

import collections
import contextlib
import queue
import threading
from collections.abc import Callable, Generator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any, TypeVar

import numpy as np
import orjson

from workflow_scripts.core import compiled
from workflow_scripts.core.fsio import open_binary
from workflow_scripts.tokens.framing import RecordSettings
from workflow_scripts.tokens.settings import LONG_CHARS
from workflow_scripts.tokens.sft import MarkerSplitter

if TYPE_CHECKING:
    from workflow_scripts.tokens import _jsonl
else:
    _jsonl = compiled.load("workflow_scripts.tokens._jsonl")

scan = _jsonl.scan

REASONS = (
    "malformed_json",
    "missing_text",
    "empty_text",
    "marker_in_pretraining",
    "no_sft_marker",
    "too_few_tokens",
)

BLOCK = 1 << 20  # input bytes read at a time
SCAN_BYTES = 1 << 18  # text bytes one scan takes at most: it holds the GIL while it makes their strings
T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True)
class Reject:
    """One rejected record: its 1-based line, id (if readable), reason and a short detail."""

    line: int
    id: Any
    reason: str
    detail: str = ""


@dataclass
class Batch:
    """Accepted texts of a run of input lines, with the rejects found while parsing them. ``texts``: None
    for a text held only as UTF-8 (``utf8``; ``strings`` decodes it)."""

    texts: list[str | None] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)
    ids: list[Any] = field(default_factory=list)
    text_bytes: list[int] = field(default_factory=list)  # UTF-8 sizes (not the long document's)
    utf8: list[bytes] = field(default_factory=list)  # the texts' UTF-8 bytes, when asked for
    sources: list[str | None] = field(default_factory=list)  # each text's raw file (None: unknown)
    raw_lines: list[int] = field(default_factory=list)  # and raw line (-1: unknown)
    rejects: list[Reject] = field(default_factory=list)
    input_bytes: int = 0
    size: int = 0  # text bytes, to cut batches

    @property
    def docs_in(self) -> int:
        return len(self.texts) + len(self.rejects)

    def add_scanned(
        self,
        texts: list[str] | None,
        ids: list[Any],
        lines: bytes,
        sizes: bytes,
        utf8: bytes | None,
        sources: list[str | None],
        raw_lines: bytes,
        read: int,
    ) -> None:
        """Take in what the scanner took from ``read`` input bytes (``_jsonl.scan``'s results)."""
        taken = np.frombuffer(sizes, np.int64).tolist()
        self.sources += sources
        self.raw_lines += np.frombuffer(raw_lines, np.int64).tolist()
        self.texts += [None] * len(taken) if texts is None else texts
        self.ids += ids
        self.lines += np.frombuffer(lines, np.int64).tolist()
        self.text_bytes += taken
        self.size += sum(taken)
        if utf8 is not None:
            self.utf8.append(utf8)
        self.input_bytes += read

    def strings(self) -> Sequence[str]:
        """The texts as strings: those held only as UTF-8 decoded when asked for (one at a time)."""
        return self.texts if not self.utf8 else Strings(self)  # type: ignore[return-value]

    def utf8_batch(self) -> tuple[bytes, np.ndarray]:
        """The texts' UTF-8 bytes back to back and each one's size (``read_batches(..., utf8=True)``)."""
        sizes = np.asarray(self.text_bytes, np.int64)
        if len(self.utf8) != 1 or len(self.utf8[0]) != sizes.sum():
            raise ValueError("the batch's UTF-8 bytes were not read, or it holds a long document")
        return self.utf8[0], sizes


class Strings(Sequence[str]):
    """A batch's texts, each held only as UTF-8 decoded when asked for (a batch's long document, last, is a
    str already)."""

    def __init__(self, batch: Batch) -> None:
        self.texts = batch.texts
        self.blob = batch.utf8[0] if len(batch.utf8) == 1 else b"".join(batch.utf8)
        self.ends = np.cumsum(batch.text_bytes).tolist()

    def __len__(self) -> int:
        return len(self.texts)

    def __getitem__(self, i: int) -> str:  # type: ignore[override]
        text = self.texts[i]
        if text is not None:
            return text
        k = range(len(self.texts))[i]
        return self.blob[self.ends[k - 1] if k else 0 : self.ends[k]].decode()


def raw_position(record: dict[str, Any]) -> tuple[str | None, int]:
    """A record's raw file and line (ingest's ``source`` and ``line``); ``(None, -1)`` unless ``source`` is a
    string and ``line`` an integer from 0 to 2**63 - 1."""
    source, line = record.get("source"), record.get("line")
    if isinstance(source, str) and type(line) is int and 0 <= line < 1 << 63:
        return source, line
    return None, -1


def classify(
    raw: bytes, line: int, settings: RecordSettings, splitter: MarkerSplitter | None
) -> tuple[Any, str | Reject, dict[str, Any]]:
    """Parse one input line: ``(id, text, record)`` for a record to encode, ``(None, Reject, {})``
    otherwise."""
    try:
        record = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        return None, Reject(line, None, "malformed_json", str(exc)[:200]), {}
    if not isinstance(record, dict):
        detail = f"a JSON {type(record).__name__}, not an object"
        return None, Reject(line, None, "malformed_json", detail), {}
    rid = record.get("id")
    text = record.get(settings.json_key)
    if not isinstance(text, str):
        what = "missing" if text is None else f"a {type(text).__name__}, not a string"
        return None, Reject(line, rid, "missing_text", f"{settings.json_key!r} is {what}"), {}
    if not text or text.isspace():  # as ``not text.strip()``, without the copy
        return None, Reject(line, rid, "empty_text", "whitespace only" if text else "empty string"), {}
    if splitter is not None:
        has_marker = splitter.contains_marker(text)
        if settings.sft and not has_marker:
            return None, Reject(line, rid, "no_sft_marker", "SFT record without any marker"), {}
        if not settings.sft and has_marker:
            reason = "pretraining document contains an SFT marker"
            return None, Reject(line, rid, "marker_in_pretraining", reason), {}
    return rid, text, record


def utf8_length(text: str, chunk: int = 1 << 20) -> int:
    """Bytes of ``text`` in UTF-8, without a copy of a long text."""
    if text.isascii():
        return len(text)
    return sum(len(text[i : i + chunk].encode()) for i in range(0, len(text), chunk))


def blocks(f: IO[bytes], size: int) -> Generator[memoryview, None, None]:
    """The bytes of ``f`` in blocks of whole lines (about ``size`` bytes; a longer line is a block), the
    last one as it ends: views of one buffer that ``f`` reads into, each valid until the next is asked for
    (no copy of the input; a line cut by a read moves to the buffer's start)."""
    buf = bytearray(size)
    filled = 0  # the start of a line the last read cut, at the buffer's start
    while True:
        if filled == len(buf):  # a line longer than the buffer: a larger one (the old one may be in use)
            buf = buf + bytes(len(buf))
        with memoryview(buf) as free:
            got = f.readinto(free[filled:])
        if not got:
            if filled:
                yield memoryview(buf)[:filled]
            return
        end = filled + got
        cut = buf.rfind(b"\n", filled, end) + 1
        if not cut:
            filled = end
            continue
        yield memoryview(buf)[:cut]
        buf[: end - cut] = buf[cut:end]  # the same size: allowed while the block's view lives
        filled = end - cut


def read_batches(
    path: str, settings: RecordSettings, batch_bytes: int, utf8: bool = False
) -> Generator[Batch, None, None]:
    """Stream ``path`` (jsonl, optionally .gz/.zst) as batches of about ``batch_bytes`` bytes of text (UTF-8;
    with ``utf8``, the bytes themselves too). A long document ends its batch. The compiled scanner
    (``_jsonl.c``) takes the records it can vouch for, without the GIL; every other line is ``classify``'s."""
    splitter = MarkerSplitter(settings.markers) if settings.markers else None
    markers = [marker.encode() for marker in settings.markers]
    key = settings.json_key.encode()
    batch = Batch()
    line = 0
    with open_binary(path) as f:
        for block in blocks(f, BLOCK):
            pos = 0
            while pos < len(block):
                start = pos
                limit = min(batch_bytes - batch.size, SCAN_BYTES)
                pos, line, stopped, texts, ids, lines, sizes, blob, sources, raw_lines = scan(
                    block, pos, line, key, markers, settings.sft, limit, utf8, LONG_CHARS
                )
                batch.add_scanned(texts, ids, lines, sizes, blob, sources, raw_lines, pos - start)
                if batch.size >= batch_bytes:
                    yield joined(batch, utf8)
                    batch = Batch()
                if not stopped:
                    continue
                newline = block.obj.find(b"\n", pos, len(block))  # in the buffer the block views
                start, pos, line = pos, newline + 1 or len(block), line + 1
                if add_line(batch, bytes(block[start:pos]), line, settings, splitter, utf8, batch_bytes):
                    yield joined(batch, utf8)
                    batch = Batch()
    if batch.docs_in or batch.input_bytes:
        yield joined(batch, utf8)


def add_line(
    batch: Batch,
    raw: bytes,
    line: int,
    settings: RecordSettings,
    splitter: MarkerSplitter | None,
    utf8: bool,
    batch_bytes: int,
) -> bool:
    """Read one input line into ``batch`` with ``classify``; whether the batch is full (a long document ends
    it, and has no UTF-8 bytes or size in it)."""
    batch.input_bytes += len(raw)
    if raw.isspace():
        return False
    rid, text, record = classify(raw, line, settings, splitter)
    if isinstance(text, Reject):
        batch.rejects.append(text)
        return False
    batch.lines.append(line)
    batch.ids.append(rid)
    source, raw_line = raw_position(record)
    batch.sources.append(source)
    batch.raw_lines.append(raw_line)
    if len(text) > LONG_CHARS:
        batch.texts.append(text)
        return True
    batch.texts.append(None if utf8 else text)
    if utf8:
        batch.utf8.append(text.encode())
    size = len(batch.utf8[-1]) if utf8 else utf8_length(text)
    batch.text_bytes.append(size)
    batch.size += size
    return batch.size >= batch_bytes


def joined(batch: Batch, utf8: bool) -> Batch:
    """The batch with its texts' UTF-8 bytes joined into one buffer (the long document's left out)."""
    if utf8:
        batch.utf8 = [b"".join(batch.utf8)]
    return batch


def in_order(fn: Callable[[T], R], items: Generator[T, None, None], threads: int) -> Generator[R, None, None]:
    """``fn`` of each item, in order, computed by ``threads`` threads while the caller takes the results: at
    most ``threads + 1`` items are under way. Closing it (or an exception) closes ``items``, cancels what has
    not started and waits for what has."""
    pending: collections.deque[Future[R]] = collections.deque()
    with (
        contextlib.closing(items),
        ThreadPoolExecutor(threads, thread_name_prefix="tokenize-encoder") as pool,
    ):
        try:
            for item in items:
                pending.append(pool.submit(fn, item))
                if len(pending) > threads:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:
            for future in pending:
                future.cancel()


def prefetch(items: Generator[T, None, None], depth: int = 2, early: int = 0) -> Generator[T, None, None]:
    """Run the generator ``items`` in a background thread, at most ``depth`` items ahead (``early``, when
    larger, until the first item is taken: the consumer's own start may take a while); its exceptions
    re-raise here. Closing the returned iterator stops the thread and closes ``items``."""
    q: queue.Queue[tuple[bool, Any]] = queue.Queue()
    room = threading.Semaphore(max(depth, early))
    stop = threading.Event()

    def produce() -> None:
        try:
            with contextlib.closing(items):
                for item in items:
                    while not room.acquire(timeout=0.05):
                        if stop.is_set():
                            return
                    if stop.is_set():
                        return
                    q.put((True, item))
            q.put((False, None))
        except BaseException as exc:
            q.put((False, exc))

    thread = threading.Thread(target=produce, name="tokenize-reader", daemon=True)
    thread.start()
    spare = max(0, early - depth)  # the room taken back as the first items go
    try:
        while True:
            ok, item = q.get()
            if not ok:
                if item is not None:
                    raise item
                return
            if spare:
                spare -= 1
            else:
                room.release()
            yield item
    finally:
        stop.set()
        thread.join()


@dataclass(frozen=True)
class Long:
    """A batch's last document, too long to encode at once: its text, line, id, UTF-8 size and raw
    position."""

    text: str
    line: int
    id: Any
    size: int
    source: str | None
    raw_line: int


def pop_long(batch: Batch) -> Long | None:
    """Take the batch's last document out if it is too long to encode at once. A long document always ends
    its batch (and has no UTF-8 bytes or size in it)."""
    text = batch.texts[-1] if batch.texts else None
    if text is None or len(text) <= LONG_CHARS:
        return None
    batch.texts.pop()
    line, rid, size = batch.lines.pop(), batch.ids.pop(), utf8_length(text)
    return Long(text, line, rid, size, batch.sources.pop(), batch.raw_lines.pop())
