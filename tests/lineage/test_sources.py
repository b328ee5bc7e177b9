"""A pack's documents back to their sources (lineage/sources.py), on packs the pack writer made: every
document of every pack holds the tokens of the source document the plan's rows name for it, and that
source document maps back to it; ordered and shuffled, an upsampled source's epochs included."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.datapacks.test_packer import plan_for
from workflow_scripts.core.cli import UserError
from workflow_scripts.core.indexed_dataset import IndexedDataset
from workflow_scripts.datapacks import packer
from workflow_scripts.datapacks.specs import pack_spec
from workflow_scripts.lineage.sources import PackSources, document_of

pytestmark = pytest.mark.fast


def document(ds: IndexedDataset, doc: int) -> np.ndarray:
    """A document's tokens (its sequences laid end to end)."""
    first, stop = int(ds.doc_idx[doc]), int(ds.doc_idx[doc + 1])
    return np.concatenate([np.asarray(ds[s]) for s in range(first, stop)])


@pytest.mark.parametrize(("shuffle", "sequences"), [(False, 2), (True, 1)])  # a gathered document: one
def test_every_pack_document_is_the_source_document_the_plan_names(
    tmp_path: Path, shuffle: bool, sequences: int
) -> None:
    plan = plan_for(tmp_path, shuffle, sequences)
    packs = [(i, p.name) for i, p in enumerate(plan.packs)] + [(None, v.name) for v in plan.validation]
    epochs = set()
    for index, name in packs:
        out = tmp_path / "merged" / name
        packer.write_pack(pack_spec(plan, index, {}, name), out)
        pack, sources = IndexedDataset(out), PackSources.of_plan(plan, name)
        assert sources.documents == pack.num_documents
        for j in range(pack.num_documents):
            where = sources.source_of(j)
            epochs.add((where.source, where.epoch))
            expected = document(IndexedDataset(where.prefix), where.doc)
            assert np.array_equal(document(pack, j), expected), (name, j)
            assert j in sources.pack_documents(where.source, where.doc), (name, j)
            assert document_of(pack.doc_idx, int(pack.doc_idx[j + 1]) - 1) == j  # its last sequence
    assert ("de_web_a", 1) in epochs, "the small source is read in a second epoch"
    with pytest.raises(UserError, match="no document"):
        PackSources.of_plan(plan, plan.packs[0].name).source_of(10**6)
