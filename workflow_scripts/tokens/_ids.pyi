"""Types of the compiled loops over token ids (``_ids.c``; what each call does is said there)."""

from typing import Any

Buffer = Any  # bytes or an array: anything with the buffer protocol

def flagged(table: Buffer, ids: Buffer, lengths: Buffer) -> bytes: ...
def holds_flagged(table: Buffer, text: str) -> bool: ...
def frame(
    ids: Buffer, lengths: Buffer, keep: Buffer, before: list[int], after: list[int], itemsize: int
) -> tuple[bytes, bytes]: ...
