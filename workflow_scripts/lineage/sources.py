"""A pack's documents back to their tokenized sources, and a source's documents to the packs that hold them.

A pack holds its slices in the plan's order (``plan_table.pack_rows``: the rows its spec was written from),
each slice its ranges ``(epoch, first, stop)`` of the source's reading order: the source's own order, or
with ``datapacks.shuffle`` the seeded permutation the plan counted in (``planner.shuffle_permutation``).
So the plan's rows are the pack's ledger at document level: document ``j`` of the pack is the ``j``-th
document of those ranges laid end to end, and no file per document is needed. GPT-NeoX's "documents" are
the ``.idx``'s sequences (``steps``): ``document_of`` maps a sequence to its document.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from workflow_scripts.core.cli import UserError
from workflow_scripts.core.indexed_dataset import IndexedDataset
from workflow_scripts.datapacks import plan_table
from workflow_scripts.datapacks.plan import Plan
from workflow_scripts.datapacks.planner import shuffle_permutation


@dataclass(frozen=True)
class SourceDocument:
    """A document of a tokenized source, read in epoch ``epoch`` of that source."""

    source: str
    prefix: str
    epoch: int
    doc: int


class PackSources:
    """The documents of one pack, from its rows of the plan."""

    def __init__(self, pack: str, rows: list[dict[str, Any]], shuffle: bool, seed: int) -> None:
        self.pack, self.rows, self.shuffle, self.seed = pack, rows, shuffle, seed
        self.ends = np.cumsum([r["documents"] for r in rows], dtype=np.int64)
        self._orders: dict[str, np.ndarray] = {}

    @classmethod
    def of_plan(cls, plan: Plan, pack: str) -> PackSources:
        if pack not in {p.name for p in (*plan.packs, *plan.validation)}:
            raise UserError(f"{plan.where}: no pack {pack}")
        return cls(pack, plan_table.pack_rows(plan, pack), plan.shuffle, plan.seed)

    @property
    def documents(self) -> int:
        return int(self.ends[-1]) if len(self.ends) else 0

    def _order(self, row: dict[str, Any]) -> np.ndarray | None:
        if not self.shuffle:
            return None
        if row["source"] not in self._orders:
            count = IndexedDataset(row["prefix"]).num_documents
            self._orders[row["source"]] = shuffle_permutation(count, self.seed, row["source"])
        return self._orders[row["source"]]

    def source_of(self, doc: int) -> SourceDocument:
        """Where the pack's document ``doc`` comes from."""
        if not 0 <= doc < self.documents:
            raise UserError(f"pack {self.pack}: no document {doc} (it has {self.documents})")
        k = int(np.searchsorted(self.ends, doc, side="right"))
        row, rest = self.rows[k], doc - (int(self.ends[k - 1]) if k else 0)
        for epoch, first, stop in row["ranges"]:
            if rest < stop - first:
                order = self._order(row)
                position = first + rest
                source_doc = position if order is None else int(order[position])
                return SourceDocument(row["source"], row["prefix"], epoch, source_doc)
            rest -= stop - first
        raise UserError(
            f"pack {self.pack}: the plan's ranges of {row['source']} hold fewer documents than it says"
        )

    def row_documents(self, k: int) -> np.ndarray:
        """The source documents of row ``k``'s pack documents, in the pack's order (array arithmetic)."""
        row = self.rows[k]
        ranges = [np.arange(first, stop, dtype=np.int64) for _, first, stop in row["ranges"]]
        positions = np.concatenate(ranges) if ranges else np.empty(0, np.int64)
        order = self._order(row)
        return positions if order is None else order[positions]

    def pack_documents(self, source: str, doc: int) -> list[int]:
        """The pack's documents that are document ``doc`` of ``source`` (one per epoch read in the pack)."""
        found = []
        for k, row in enumerate(self.rows):
            if row["source"] != source:
                continue
            order = self._order(row)
            position = doc if order is None else int(np.flatnonzero(order == doc)[0])
            base = int(self.ends[k - 1]) if k else 0
            for _, first, stop in row["ranges"]:
                if first <= position < stop:
                    found.append(base + position - first)
                base += stop - first
        return found


def document_of(doc_idx: np.ndarray, sequence: int) -> int:
    """The document that sequence ``sequence`` belongs to, by the ``.idx``'s ``doc_idx``."""
    return int(np.searchsorted(doc_idx, sequence, side="right")) - 1
