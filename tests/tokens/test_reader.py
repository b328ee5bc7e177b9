"""The tokenize reader: the compiled scanner (``_jsonl.c``) reads exactly what orjson and ``classify`` read,
and leaves them every line it cannot vouch for; the read-ahead thread."""

from __future__ import annotations

import dataclasses
import io
import json
import random
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.utils import write_jsonl
from workflow_scripts.tokens import _jsonl, reader
from workflow_scripts.tokens.framing import RecordSettings

TRICKY = [
    b'{"id": "a", "text": "plain"}',
    b'  {"text":"spaces around"}  \r',
    b"",
    b"   \t ",
    b'{"text": "esc \\" \\\\ \\/ \\b \\f \\n \\r \\t \\u00e9 \\ud83d\\ude00 \\u0000 end"}',
    b'{"text": "lone \\ud800 high"}',
    b'{"text": "lone \\udc00 low"}',
    b'{"text": "bad \\x escape"}',
    b'{"text": "raw\ttab"}',
    b'{"text": "\xff invalid utf-8"}',
    b'{"text": "\xed\xa0\x80 utf-8 surrogate"}',
    b'{"text": "\xc0\xaf overlong"}',
    b'{"text": "\xf4\x90\x80\x80 past U+10FFFF"}',
    b'{"text": "del \x7f and \xc2\x85 next line"}',
    b'\xef\xbb\xbf{"text": "bom"}',
    b'{"text": "dup", "text": "last wins"}',
    b'{"id": 1, "id": 2, "text": "dup id"}',
    b'{"te\\u0078t": "escaped key"}',
    b'{"text": 5}',
    b'{"text": null}',
    b'{"id": 3}',
    b'{"text": ""}',
    b'{"text": "  \\n\\t "}',
    b'{"text": "\xe3\x80\x80\xe2\x80\xa8"}',
    b'{"text": "\\u001c\\u001f"}',
    b'{"text": "\xe4\xb8\xad\xe6\x96\x87 only"}',
    b'{"text": "\xe4\xb8\xad"}',
    b'{"text": "' + "\u6771\u4eac\u00e9".encode() * 9 + b'\xe4\xb8 cut in a long text"}',
    b'{"text": "' + "\u6771\u4eac\u00e9".encode() * 9 + b'\xed\xa0\x80 surrogate in a long text"}',
    b'{"text": "' + "\u6771\u4eac\u00e9".encode() * 9 + b'\xe4\xb8"}',
    b'{"text": "' + "\u3000 \u00a0  \u2028".encode() * 5 + b'"}',
    b'{"text": "' + "\u3000 \u00a0  \u2028".encode() * 5 + b'\xff"}',
    b'{"text": "' + "\u3000 \u00a0  \u2028".encode() * 5 + "\u6771".encode() + b'"}',
    b'{"id": 12345678901234567890, "text": "big id"}',
    b'{"id": -42, "text": "negative id"}',
    b'{"id": 1.5, "text": "float id"}',
    b'{"id": true, "text": "true id"}',
    b'{"id": null, "text": "null id"}',
    b'{"id": {"a": 1}, "text": "object id"}',
    b'{"meta": {"a": [1, 2.5, -0, {"b": null}], "c": "\\u00e9"}, "text": "nested"}',
    b'{"meta": 1e5, "text": "exponent"}',
    b'{"meta": 01, "text": "leading zero"}',
    b'{"meta": 1., "text": "no fraction digits"}',
    b'{"meta": -, "text": "sign only"}',
    b'{"meta": 123456789012345678901, "text": "many digits"}',
    b'{"meta": tru, "text": "cut literal"}',
    b'{"text": "trailing comma",}',
    b'{"text": "unclosed"',
    b'{"text": "junk after"} x',
    b'{"text": "nul after"}\x00',
    b'["text", "an array"]',
    b'"a string"',
    b"{}",
    b'{"text": "a marker <<<|user|>>> inside"}',
    b'{"text": "another <<<|assistant|>>> inside"}',
    b'{"text": "their start <<<| alone, <<<|assistant|> cut, <<<|user"}',
    b'{"text": "[INST] a marker of another shape"}',
    b'{"text": "' + b"[" * 70 + b'"}',
    b'{"meta": ' + b"[" * 70 + b"]" * 70 + b', "text": "deep"}',
    b'{"text": "' + b"long " * 1000 + b'"}',
    b'{"text": "at", "source": "a.jsonl", "line": 7}',
    b'{"text": "next", "source": "a.jsonl", "line": 8, "meta": {}}',
    b'{"line": 9, "text": "before", "source": "b\\u00e9.txt"}',
    b'{"text": "neg", "source": "a.jsonl", "line": -1}',
    b'{"text": "float", "source": "a.jsonl", "line": 2.0}',
    b'{"text": "str line", "source": "a.jsonl", "line": "3"}',
    b'{"text": "no line", "source": "a.jsonl"}',
    b'{"text": "int source", "source": 4, "line": 3}',
    b'{"text": "null source", "source": null, "line": 3}',
    b'{"text": "dup", "source": "a", "source": "b", "line": 3}',
    b'{"text": "dup line", "source": "a", "line": 3, "line": 4}',
    b'{"text": "big", "source": "a", "line": 9223372036854775808}',
    b'{"source": "the text", "line": 1}',
    b'{"text": "last line without a newline"}',
]


def batches(path: Path, settings: RecordSettings, size: int, utf8: bool) -> list[dict[str, object]]:
    """Each batch's fields, and its texts as strings (``Batch.strings``)."""
    read = reader.read_batches(str(path), settings, size, utf8)
    return [dataclasses.asdict(b) | {"strings": list(b.strings())} for b in read]


def corpus(seed: int) -> Iterator[bytes]:
    """Seeded random records: every kind of character, written with and without ASCII escapes, ids and
    metadata of every type, whitespace around."""
    rng = random.Random(seed)
    pools = [range(0x20, 0x7F), range(0x80, 0x800), range(0x800, 0xD800), range(0xE000, 0x110000)]
    spaces = [" ", "\t", "\n", "\u3000", "\u00a0", "\u2028", "\x1c"]
    for n in range(400):
        chars = [
            chr(rng.choice(rng.choice(pools))) if rng.random() < 0.8 else rng.choice(spaces)
            for _ in range(rng.randrange(0, 30))
        ]
        text: object = "".join(chars)
        record: dict[str, object] = {}
        if rng.random() < 0.8:
            record["id"] = rng.choice([f"doc-{n}", n, -n, None, True, float(n) + 0.5, [n]])
        if rng.random() < 0.7:
            record["source"] = rng.choice(["f.jsonl", "f.jsonl", "g\u00e9.txt", None, 3])
            record["line"] = rng.choice([n, n, n + 1, -n, None, "1", float(n)])
        if rng.random() < 0.3:
            record["meta"] = {"score": rng.random(), "tags": ["a", "\u00e9"], "n": rng.randrange(10**20)}
        if rng.random() < 0.05:
            text = rng.choice([None, 7, ["x"]])
        record["text"] = text
        line = json.dumps(record, ensure_ascii=rng.random() < 0.5).encode()
        yield rng.choice([b"", b" ", b"\t"]) + line + rng.choice([b"", b" ", b"\r"])


@pytest.mark.parametrize("utf8", [False, True])
@pytest.mark.parametrize("sft", [False, True])
@pytest.mark.parametrize(
    "markers",
    [("<<<|user|>>>",), ("<<<|user|>>>", "<<<|assistant|>>>"), ("<<<|user|>>>", "[INST]")],
    ids=["one", "same-start", "other-start"],
)
def test_the_scanner_reads_what_orjson_and_classify_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, utf8: bool, sft: bool, markers: tuple[str, ...]
) -> None:
    """Every batch (texts, ids, lines, sizes, UTF-8 bytes, rejects, input bytes) is the same with the
    scanner as with ``classify`` alone, on tricky and on random lines, small batches, short reads and a long
    document; with markers that start alike (searched in one pass) or not."""
    monkeypatch.setattr(reader, "LONG_CHARS", 4000)
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"\n".join([*TRICKY, *corpus(0), *TRICKY]))
    settings = RecordSettings(markers=markers, sft=sft)
    taken: list[int] = []

    def counted(*args: object) -> tuple[object, ...]:
        result = _jsonl.scan(*args)
        taken.append(len(result[6]) // 8)  # the sizes of the texts taken (int64)
        return result

    def stops(block: object, pos: int, line: int, *rest: object) -> tuple[object, ...]:
        """A scanner that takes nothing: every line is ``classify``'s."""
        return pos, line, True, [], [], b"", b"", b"" if rest[-2] else None, [], b""

    for size, block in ((1 << 20, 1 << 20), (700, 64)):  # small batches, lines longer than a read
        monkeypatch.setattr(reader, "BLOCK", block)
        monkeypatch.setattr(reader, "scan", counted)
        scanned = batches(path, settings, size, utf8)
        monkeypatch.setattr(reader, "scan", stops)
        assert batches(path, settings, size, utf8) == scanned
    assert sum(taken) > (0 if sft else 300)  # the scanner's own


def test_the_scanner_takes_plain_records_and_stops_at_the_others() -> None:
    """Plain lines are all the scanner's, in one call and without the GIL; it stops before a line it leaves
    to ``classify`` and after ``limit`` bytes of text."""
    lines = b"".join(json.dumps({"id": i, "text": f"t\u00e9xt {i}"}).encode() + b"\n" for i in range(100))
    pos, line, stopped, texts, ids, _, _, blob, _, _ = _jsonl.scan(lines, 0, 0, b"text", [], 0, 1 << 20, 1, 9)
    assert (pos, line, stopped) == (len(lines), 100, False) and ids == list(range(100))
    assert texts is None and blob == "".join(f"t\u00e9xt {i}" for i in range(100)).encode()
    data = b'{"text": "a"}\n\n{"text": 5}\n{"text": "b"}\n'
    assert _jsonl.scan(data, 0, 0, b"text", [], False, 1 << 20, False, 99)[:4] == (15, 2, True, ["a"])
    assert _jsonl.scan(data, 0, 0, b"text", [], False, 1, False, 99)[:4] == (14, 1, False, ["a"])
    assert _jsonl.scan(b'{"id": "x"}', 0, 0, b"id", [], False, 99, False, 99)[:4] == (0, 0, True, [])
    for start in (-1, len(data) + 1):
        with pytest.raises(ValueError, match="outside the block"):
            _jsonl.scan(data, start, 0, b"text", [], False, 99, False, 99)


def test_the_scanner_leaves_every_whitespace_only_text_to_python() -> None:
    """A text of one character is the scanner's unless ``str.isspace`` says it is whitespace (then it is
    ``classify``'s, an empty text): the scanner's whitespace is this Python's, for every code point."""
    for c in [*range(0xD800), *range(0xE000, 0x30000), *range(0xE0000, 0x110000, 7)]:
        line = json.dumps({"text": chr(c)}).encode()
        taken = _jsonl.scan(line, 0, 0, b"text", [], False, 1 << 20, False, 99)[3]
        assert bool(taken) != chr(c).isspace(), hex(c)


@pytest.mark.skipif(not (3, 11) <= sys.version_info[:2] <= (3, 13), reason="CPython 3.11 to 3.13 only")
def test_scanned_strings_keep_their_utf8() -> None:
    """A non-ASCII text comes with its UTF-8 kept in the str (what an engine reading it would make under the
    GIL): ``sys.getsizeof`` counts it."""
    text = "t\u00e9xt \u6771\u4eac \U0001f642"
    line = json.dumps({"text": text}).encode()
    taken = _jsonl.scan(line, 0, 0, b"text", [], False, 1 << 20, False, 99)[3][0]
    fresh = "".join(list(text))
    assert taken == text and sys.getsizeof(taken) == sys.getsizeof(fresh) + len(text.encode()) + 1


def test_with_the_blob_the_scanner_makes_no_string_and_checks_the_utf8_itself() -> None:
    """With the texts' UTF-8 back to back (``blob``, what an engine reading UTF-8 takes) the scanner makes
    no str (``texts`` is None; ``Batch.strings`` decodes one when asked) and checks the UTF-8 itself, without
    the GIL: a text that is not strict UTF-8 stops the scan before its line, as the decoder does without."""
    text = "t\u00e9xt \u6771\u4eac \U0001f642 " * 3
    good = json.dumps({"text": text}, ensure_ascii=False).encode() + b"\n"
    for bad in (
        b"\xff",
        b"\xed\xa0\x80",
        b"\xc0\xaf",
        b"\xf4\x90\x80\x80",
        b"\xe4\xb8",
        b"\x80",
        b"\xf0\x9f\x98",
    ):
        for where in (b"", b"abc \xe4\xb8\xad" * 3):
            data = good + b'{"text": "' + where + bad + b' end"}\n' + good
            plain = _jsonl.scan(data, 0, 0, b"text", [], False, 1 << 20, False, 99)
            _, _, _, texts, _, _, sizes, blob, _, _ = scanned = _jsonl.scan(
                data, 0, 0, b"text", [], False, 1 << 20, True, 99
            )
            assert scanned[:3] == plain[:3] == (len(good), 1, True), bad
            assert texts is None and plain[3] == [text] and blob == text.encode() and sizes == plain[6]


def test_each_text_keeps_its_raw_position(tmp_path: Path) -> None:
    """Ingest's ``source`` and ``line`` members ride along with each text, the scanner's and ``classify``'s
    alike; a record without both (or with another type) has none (None, -1)."""
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"\n".join(TRICKY[-14:]))
    (batch,) = reader.read_batches(str(path), RecordSettings(), 1 << 20)
    assert list(zip(batch.strings(), batch.sources, batch.raw_lines, strict=True)) == [
        ("at", "a.jsonl", 7),
        ("next", "a.jsonl", 8),
        ("before", "b\u00e9.txt", 9),
        *[(t, None, -1) for t in ("neg", "float", "str line", "no line", "int source", "null source")],
        ("dup", "b", 3),
        ("dup line", "a", 4),
        ("big", None, -1),
        ("last line without a newline", None, -1),
    ]
    assert batch.sources[0] is batch.sources[1]  # one str for a run of one file


def test_write_jsonl_records_scan_as_written(tmp_path: Path) -> None:
    """Records as the stages write them (orjson) are all the scanner's."""
    records = [{"id": f"d{i}", "text": f'line\n{i} \u00e9 "quoted" \\ back'} for i in range(50)]
    data = write_jsonl(tmp_path / "r.jsonl", records).read_bytes()
    taken = _jsonl.scan(data, 0, 0, b"text", [], False, 1 << 20, False, 1 << 22)[3]
    assert taken == [r["text"] for r in records]


class Trickle(io.RawIOBase):
    """A file that returns at most ``most`` bytes a read."""

    def __init__(self, data: bytes, most: int) -> None:
        self.data, self.pos, self.most = data, 0, most

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        n = min(len(buffer), self.most, len(self.data) - self.pos)
        buffer[:n] = self.data[self.pos : self.pos + n]
        self.pos += n
        return n


@pytest.mark.parametrize(("size", "most"), [(16, 1000), (16, 5), (1 << 10, 1 << 20), (7, 3)])
def test_blocks_are_whole_lines_of_the_file(size: int, most: int) -> None:
    """Blocks hold whole lines (the last as the file ends; a line longer than the buffer whole too), whatever
    the reads return; together they are the file."""
    rng = random.Random(size + most)
    data = b"".join(b"x" * rng.choice([0, 1, 5, 40, 300]) + b"\n" for _ in range(200)) + b"tail"
    got = [bytes(block) for block in reader.blocks(Trickle(data, most), size)]
    assert b"".join(got) == data and all(b.endswith(b"\n") for b in got[:-1]) and got[-1].endswith(b"tail")


def test_prefetch_reads_further_ahead_until_the_first_item_is_taken() -> None:
    """``early`` items (and the one in hand) before the consumer takes one, then ``depth``."""
    made: list[int] = []

    def items() -> Iterator[int]:
        for i in range(100):
            made.append(i)
            yield i

    def settled(count: int) -> bool:
        deadline = time.monotonic() + 5
        while len(made) < count and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.1)
        return len(made) == count

    stream = reader.prefetch(items(), depth=2, early=5)
    assert next(stream) == 0 and settled(6)  # 5 queued (one taken now) and one in hand
    assert [next(stream) for _ in range(3)] == [1, 2, 3] and settled(7)  # down to depth: 2 queued + 1
    assert list(stream) == list(range(4, 100))


def test_in_order_gives_every_result_in_order_with_few_under_way() -> None:
    """Results come in the items' order whichever thread finishes first; at most ``threads + 1`` items are
    taken ahead of the caller; a failure re-raises at its place; closing it closes the items."""
    taken: list[int] = []
    closed: list[bool] = []

    def items(n: int) -> Iterator[int]:
        try:
            for i in range(n):
                taken.append(i)
                yield i
        finally:
            closed.append(True)

    def slow_evens(i: int) -> int:
        time.sleep(0.02 if i % 2 == 0 else 0)
        if i == 7:
            raise ValueError("seven")
        return i * i

    stream = reader.in_order(slow_evens, items(7), 2)
    assert next(stream) == 0 and len(taken) == 3  # the one given and two under way
    assert list(stream) == [i * i for i in range(1, 7)] and closed == [True]
    del taken[:]
    failing = reader.in_order(slow_evens, items(20), 3)
    with pytest.raises(ValueError, match="seven"):
        list(failing)
    assert closed == [True, True] and len(taken) <= 7 + 1 + 3  # no further than 3 past the failure
