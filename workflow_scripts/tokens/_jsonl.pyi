"""Types of the tokenize reader's compiled scanner (``_jsonl.c``; what the call does is said there)."""

from typing import Any

Buffer = Any  # bytes, a bytearray or a memoryview: anything with the buffer protocol

def scan(
    block: Buffer,
    start: int,
    line: int,
    key: bytes,
    markers: list[bytes],
    sft: bool,
    limit: int,
    blob: bool,
    long_bytes: int,
) -> tuple[
    int, int, bool, list[str] | None, list[Any], bytes, bytes, bytes | None, list[str | None], bytes
]: ...
