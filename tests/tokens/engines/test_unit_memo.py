"""The compiled unit memo (``_unitmemo.c``, wrapped by tokens/engines/unit_memo): batches in flight, texts
left whole, first units keyed apart."""

from __future__ import annotations

import numpy as np
import pytest

from workflow_scripts.tokens import _unitmemo


def test_memo_batches_in_flight_and_texts_left_whole() -> None:
    """Two batches scanned before either is emitted; a literal ``▁`` or a lone surrogate leaves the text to
    SentencePiece whole; units over ``max_unit_chars`` (characters, not bytes) are not kept."""
    memo = _unitmemo.UnitMemo(100, 3, False)
    a = memo.scan(["x y", "y z\u2581", "a \ud800"])
    b = memo.scan(["y x", ""])
    assert (a.firsts, a.laters, b.laters) == ([], ["x", " y"], ["y", " x"])
    with pytest.raises(RuntimeError, match="filled"):
        memo.emit(a)
    with pytest.raises(ValueError, match="1 id lists for 2 units"):
        a.fill([], [[1]])
    a.fill([], [[1], [2]])
    b.fill([], [[3], [4, 5]])
    ids, lengths, whole = memo.emit(a)
    assert (list(_ints(ids, 4)), list(_ints(lengths, 8)), whole) == ([1, 2], [2, 0, 0], [1, 2])
    ids, lengths, whole = memo.emit(b)
    assert (list(_ints(ids, 4)), list(_ints(lengths, 8)), whole) == ([3, 4, 5], [3, 0], [])
    with pytest.raises(RuntimeError, match="once"):
        memo.emit(b)
    c = memo.scan(["x y x", "éé  long"])
    assert c.laters == ["éé", "  long"]
    c.fill([], [[6], [7]])
    assert list(_ints(memo.emit(c)[0], 4)) == [1, 2, 4, 5, 6, 7]
    assert memo.counters() == {"units": 9, "units_encoded": 6, "docs_encoded_whole": 2, "memo_entries": 5}
    with pytest.raises(TypeError, match="str"):
        memo.scan([b"bytes"])


def test_memo_first_units_apart() -> None:
    """With a separate model for later units, a first unit that encodes to nothing while more units follow
    leaves its text whole, whether it was missing or found."""
    memo = _unitmemo.UnitMemo(100, 64, True)
    batch = memo.scan([" a b", " c", " a"])
    assert (batch.firsts, batch.laters) == ([" a", " c"], [" b"])
    batch.fill([[], [7]], [[5]])
    ids, lengths, whole = memo.emit(batch)
    assert (list(_ints(ids, 4)), list(_ints(lengths, 8)), whole) == ([7], [0, 1, 0], [0])
    again = memo.scan([" a b"])
    again.fill([], [])
    assert memo.emit(again)[2] == [0]


def _ints(data: bytes, size: int) -> np.ndarray:
    return np.frombuffer(data, np.int32 if size == 4 else np.int64)
