"""The tokenize stage's use of the C allocator: glibc gives back each large block (a batch's texts, ids and
output, megabytes each) as soon as it is freed and maps fresh zeroed pages for the next one, so every batch
pays its memory's page faults again (a tenth of the stage's CPU on SentencePiece's fast path). ``keep_freed``
lets it keep and reuse them instead; peak memory stays what the batches in flight need."""

from __future__ import annotations

import ctypes
import functools

M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3  # glibc's malloc.h
KEPT = 1 << 30  # freed memory kept for reuse, at most
MAPPED = 256 << 20  # blocks larger than this still get their own mapping (a long document's)


@functools.cache
def keep_freed() -> bool:
    """Have glibc's malloc keep freed memory for reuse (once a process); False where the C library is not
    glibc (nothing changes)."""
    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)
    if mallopt is None:
        return False
    return all(
        mallopt(ctypes.c_int(option), ctypes.c_int(value))
        for option, value in ((M_MMAP_THRESHOLD, MAPPED), (M_TRIM_THRESHOLD, KEPT), (M_TOP_PAD, 64 << 20))
    )
