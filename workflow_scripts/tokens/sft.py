"""SFT control markers: parse ``MARKER=TOKEN`` specs, find markers in text, split marked text.

SFT records carry markers such as ``<<<|user|>>>`` in their text (seed 003); the text between markers is
encoded normally and each marker becomes one control-token id. Markers and their tokens come from the
configuration, never from code: ``--sft-marker '<<<|user|>>>=<|user|>'`` (a piece of the tokenizer model)
or ``--sft-marker '<<<|user|>>>=id:7'`` (an explicit id); the tokenizer module resolves the token.
"""

from __future__ import annotations

import re
from collections.abc import Sequence


def parse_marker_specs(specs: Sequence[str]) -> dict[str, str]:
    """``MARKER=TOKEN`` specs (split at the last ``=``) as ``{marker: token}``; duplicates are an error."""
    pairs: dict[str, str] = {}
    for spec in specs:
        marker, sep, token = spec.rpartition("=")
        if not sep or not marker or not token:
            raise ValueError(f"SFT marker spec must be MARKER=PIECE or MARKER=id:N, got {spec!r}")
        if marker in pairs:
            raise ValueError(f"SFT marker {marker!r} given more than once")
        pairs[marker] = token
    return pairs


class MarkerSplitter:
    """Finds the configured markers in text and splits text at them."""

    def __init__(self, markers: Sequence[str]) -> None:
        if not markers or not all(markers):
            raise ValueError(f"SFT markers must be non-empty strings, got {list(markers)!r}")
        self.markers = tuple(markers)
        # Longest first, so that a marker containing another one wins.
        alternatives = sorted(self.markers, key=len, reverse=True)
        self._pattern = re.compile("(" + "|".join(map(re.escape, alternatives)) + ")")

    def contains_marker(self, text: str) -> bool:
        """True when ``text`` contains any marker (one search for them all)."""
        return self._pattern.search(text) is not None

    def split(self, text: str) -> list[tuple[str, bool]]:
        """``(part, is_marker)`` pairs in order; whitespace-only text spans are dropped.

        Dropping whitespace-only spans follows the Tilde SFT tokenizer: ``<<<|user|>>><<<|assistant|>>>``
        or a newline between two turns adds no tokens.
        """
        parts = self._pattern.split(text)  # text, marker, text, marker, ..., text
        return [(p, k % 2 == 1) for k, p in enumerate(parts) if k % 2 or p.strip()]
