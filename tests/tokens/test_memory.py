"""The tokenize stage keeps freed memory for its next batches (tokens/memory): a block of a batch's size,
freed and taken again, faults no page in again."""

from __future__ import annotations

import subprocess
import sys

import pytest

REUSE = """
import resource, sys
from workflow_scripts.tokens import memory
if sys.argv[1] == "keep":
    assert memory.keep_freed()
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
block = bytearray(16 << 20)  # zeroed: every page touched
del block
before = faults()
block = bytearray(16 << 20)
print(faults() - before)
"""


def refaults(mode: str) -> int:
    """Pages faulted in when a freed 16 MiB block is taken again (glibc's defaults, or ``keep_freed``)."""
    run = subprocess.run([sys.executable, "-c", REUSE, mode], capture_output=True, text=True, check=True)
    return int(run.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc only")
def test_a_freed_batch_s_memory_is_reused_without_faults() -> None:
    assert refaults("default") > 1000  # 4096 pages of 4 KiB mapped afresh
    assert refaults("keep") < 100
