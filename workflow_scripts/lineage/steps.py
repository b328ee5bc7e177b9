"""Which sequences of a pack each global step reads, and which steps read a sequence.

GPT-NeoX calls the ``.idx``'s sequences documents; with one sequence a document (the tokenizer's default)
they are the same (``sources.document_of`` maps one to the other).

A pack's trainer config decides its reading order: the index mappings of each ``train_data_paths`` entry
(document, sample and shuffle index) and the blend of the paths, for ``train_iters x train_batch_size``
samples (``train.reference.data`` computes them as GPT-NeoX or Megatron-LM does; tests/train/
test_lineage_compat.py checks them against both trainers' own code). A Megatron-LM arguments file holds
every pack's phase (``--phase-transition-iterations``); ``pack_config`` reads it in its pack's phase, whose
dataset is that pack's ``train_iters x global batch`` samples from its first iteration. Local iteration
``i`` reads blended samples ``[i x B, (i + 1) x B)``, and its global step, the checkpoint that first holds
it, is ``iteration_offset + i + 1``. A packed sample reads its first
document from an offset and its last one up to an offset, inclusive (``seq_length + 1`` tokens, overlapping
the next sample by one); a ``k_bin_packed`` sample (the fork's SFT) reads whole documents. ``StepMap``
answers both ways with array arithmetic over the mappings, built in memory (nothing is written beside
the pack).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from workflow_scripts.core.cli import UserError
from workflow_scripts.datapacks.plan import Plan
from workflow_scripts.train.reference import data
from workflow_scripts.train.reference.config import load_config
from workflow_scripts.train.reference.run_config import RunConfig

NEVER = np.iinfo(np.int64).max  # the first step of a sequence no step of the pack reads


def pack_config(path: str, plan: Plan | None) -> RunConfig:
    """A pack's trainer config as lineage reads it; a Megatron-LM arguments file in its pack's phase (the
    pack's place among the plan's packs, found by the name of its data path), whatever its checkpoints."""
    if not path.endswith(".args"):
        return load_config([path])
    if plan is None:
        raise UserError(
            f"{path}: a Megatron-LM arguments file holds every pack's phase; --plan says which is its pack's"
        )
    pack = os.path.basename(load_config([path], evaluation=True).train_paths[0])
    names = [p.name for p in plan.packs]
    if pack not in names:
        raise UserError(f"{path}: its data path's pack {pack} is not one of the plan's ({', '.join(names)})")
    return load_config([path], pack_phase=names.index(pack))


@dataclass(frozen=True)
class SequenceRead:
    """Tokens of one sequence (GPT-NeoX's "document") of ``train_data_paths[path]`` read by some steps."""

    path: int
    sequence: int
    tokens: int


class _PathIndex:
    """One path's mappings, and the blended positions of its samples."""

    def __init__(self, spec: data.IndexSpec, blended: np.ndarray) -> None:
        built = spec.build()
        self.k_bin = spec.pack_impl == "k_bin_packed"
        self.doc_idx = np.asarray(built["doc"], dtype=np.int64)
        self.first = np.asarray(built["sample"][:, 0], dtype=np.int64)  # doc_idx position of each start
        self.offset = np.asarray(built["sample"][:, 1], dtype=np.int64)
        self.shuffle = np.asarray(built["shuffle"], dtype=np.int64)
        self.lengths = spec.lengths.astype(np.int64)
        self.blended = blended  # blended position of this path's k-th shuffled sample

    def spans(self, shuffled: int) -> list[tuple[int, int, int]]:
        """(document, first token, stop) of this path's shuffled sample ``shuffled``, in reading order."""
        i = int(self.shuffle[shuffled])
        first, last = int(self.first[i]), int(self.first[i + 1])
        if self.k_bin:
            return [(int(d), 0, int(self.lengths[d])) for d in self.doc_idx[first:last]]
        off_first, off_last = int(self.offset[i]), int(self.offset[i + 1])
        docs = self.doc_idx[first : last + 1]
        if first == last:
            return [(int(docs[0]), off_first, off_last + 1)]
        out = [(int(docs[0]), off_first, int(self.lengths[docs[0]]))]
        out += [(int(d), 0, int(self.lengths[d])) for d in docs[1:-1]]
        return [*out, (int(docs[-1]), 0, off_last + 1)]

    def shuffled_samples(self, doc: int) -> np.ndarray:
        """The shuffled positions of the samples that read ``doc`` (each epoch's copy), sorted."""
        positions = np.flatnonzero(self.doc_idx == doc)
        count = len(self.first) - 1
        samples = []
        for p in positions:
            if self.k_bin:  # sample i holds doc_idx[first[i]:first[i + 1]]
                i = int(np.searchsorted(self.first, p, side="right")) - 1
                samples.append(np.arange(i, i + 1) if 0 <= i < count and p < self.first[i + 1] else [])
            else:  # sample i reads positions first[i]..first[i + 1]
                lo = int(np.searchsorted(self.first[1:], p, side="left"))
                hi = int(np.searchsorted(self.first[:-1], p, side="right"))
                samples.append(np.arange(lo, min(hi, count)))
        wanted = np.unique(np.concatenate(samples)) if samples else np.empty(0, dtype=np.int64)
        inverse = np.empty_like(self.shuffle)
        inverse[self.shuffle] = np.arange(len(self.shuffle))
        return np.sort(inverse[wanted[wanted < len(self.shuffle)]])


class StepMap:
    """A pack's steps and documents, both ways, from its run config (``reference.config.load_config``)."""

    def __init__(self, cfg: RunConfig) -> None:
        self.cfg = cfg
        specs = data.run_train_specs(cfg)
        size = cfg.train_iters * cfg.batch
        self.which, self.within = data.blending_indices(cfg.train_weights, size)
        self.paths = [_PathIndex(spec, np.flatnonzero(self.which == k)) for k, spec in enumerate(specs)]

    def _local(self, step: int) -> int:
        cfg = self.cfg
        if not cfg.offset < step <= cfg.end:
            raise UserError(
                f"{cfg.path}: global step {step} is not one of this pack's ({cfg.offset + 1} to {cfg.end})"
            )
        return step - cfg.offset - 1

    def sample_spans(self, k: int) -> list[tuple[int, int, int, int]]:
        """(path, document, first token, stop) that blended sample ``k`` reads, in order."""
        path = int(self.which[k])
        return [(path, *span) for span in self.paths[path].spans(int(self.within[k]))]

    def sequences(self, first_step: int, last_step: int) -> list[SequenceRead]:
        """The sequences global steps ``first_step..last_step`` read, with the tokens read of each, in
        (path, sequence) order."""
        batch = self.cfg.batch
        lo, hi = self._local(first_step) * batch, (self._local(last_step) + 1) * batch
        totals: dict[tuple[int, int], int] = {}
        for k in range(lo, hi):
            for path, doc, start, stop in self.sample_spans(k):
                totals[path, doc] = totals.get((path, doc), 0) + stop - start
        return [SequenceRead(p, q, t) for (p, q), t in sorted(totals.items())]

    def first_steps(self, path: int) -> np.ndarray:
        """The global step that first reads each sequence of ``train_data_paths[path]`` (``NEVER``: none), for
        all the path's sequences at once: array arithmetic over the mappings, no loop per sample."""
        index, cfg = self.paths[path], self.cfg
        samples = len(index.first) - 1
        sample_step = np.full(samples, NEVER, dtype=np.int64)
        read = min(len(index.blended), len(index.shuffle))
        sample_step[index.shuffle[:read]] = cfg.offset + 1 + index.blended[:read] // cfg.batch
        # sample i reads doc_idx positions first[i]..first[i + 1], the last one included unless k_bin_packed
        counts = index.first[1:] - index.first[:-1] + (0 if index.k_bin else 1)
        sample_of = np.repeat(np.arange(samples), counts)
        run_starts = index.first[:-1] - np.cumsum(counts) + counts
        positions = np.repeat(run_starts, counts) + np.arange(len(sample_of))
        position_step = np.full(len(index.doc_idx), NEVER, dtype=np.int64)
        np.minimum.at(position_step, positions, sample_step[sample_of])
        sequence_step = np.full(len(index.lengths), NEVER, dtype=np.int64)
        np.minimum.at(sequence_step, index.doc_idx, position_step)
        return sequence_step

    def steps(self, path: int, sequence: int) -> list[int]:
        """The global steps that read sequence ``sequence`` of ``train_data_paths[path]``, ascending."""
        index = self.paths[path]
        if not 0 <= sequence < len(index.lengths):
            raise UserError(
                f"{self.cfg.train_paths[path]}: no sequence {sequence} (it has {len(index.lengths)})"
            )
        shuffled = index.shuffled_samples(sequence)
        blended = index.blended[shuffled[shuffled < len(index.blended)]]
        local = np.unique(blended // self.cfg.batch)
        return [int(self.cfg.offset + i + 1) for i in local]
