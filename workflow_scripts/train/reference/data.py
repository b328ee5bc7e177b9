"""The trainers' datasets over a merged pack: the index mappings, cached beside the pack, and the samples.

For ``pack_impl: packed`` (GPT-NeoX's default) a path asked for N samples of ``seq_length + 1`` tokens gets

- a document index: every sequence of the ``.idx`` once per epoch, all epochs shuffled together by
  ``np.random.RandomState(seed)`` (GPT-NeoX's ``_build_doc_idx``), epochs being the fewest whose tokens cover
  N samples (``_num_epochs``),
- a sample index: (position in the document index, offset) of every sample's first token; sample ``s``
  starts at token ``s x seq_length`` of the documents laid end to end, so consecutive samples overlap by one
  token and cross document boundaries (GPT-NeoX's ``helpers.build_sample_idx``, vectorised here),
- a shuffle index: the samples in an order drawn by the same generator (``_build_shuffle_idx``).

Megatron-LM's ``GPTDataset`` (``trainer="megatron"``) builds the same three with two differences: a path
is asked for exactly N samples (no 1.005 surplus: one path is not blended), and when the last of several
epochs would give under 80% of an epoch's samples, that epoch's documents and samples are shuffled apart
from the others (``separate_final_epoch``, ``final_epoch_start``).

GPT-NeoX's are saved as ``{prefix}_{name}_indexmap_{N}ns_{S}sl_{seed}s_{impl}pi_ac_{kind}_idx.npy`` (kind:
doc, sample, shuffle), its names, and reused when all three exist; Megatron-LM's as
``{prefix}_{name}_megatron_{N}ns_{S}sl_{seed}s_{kind}_idx.npy`` (Megatron-LM caches its own under a hashed
name). ``k_bin_packed`` (the LUMI fork's SFT packing) puts whole documents into at most 16 open bins of
``seq_length + 1`` tokens (``k_bin_index``); a sample is one bin, padded with 0. Several paths are blended by
GPT-NeoX's ``build_blending_indices`` (a Megatron-LM run reads one path a pack; its validation paths are
blended as Megatron-LM's ``BlendedMegatronDatasetBuilder`` sizes them: ``megatron_valid_specs``, whose
``GPTDataset`` has every sample of its index, one more than GPT-NeoX's). A pretraining path whose N
samples need a second epoch is refused (``EpochError``): that is the plan's single-epoch arithmetic checked
independently. Tokens are read from the ``.bin`` by memmap (``IndexedDataset``).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

from workflow_scripts.core.cli import UserError
from workflow_scripts.core.fsio import atomic_path
from workflow_scripts.core.indexed_dataset import IndexedDataset
from workflow_scripts.datapacks.iterations import NEOX_SURPLUS
from workflow_scripts.datapacks.iterations import train_iters as single_epoch_iters

if TYPE_CHECKING:
    from workflow_scripts.train.reference.run_config import MegatronValidation, RunConfig

K_BINS = 16
TRAINER_NAMES = {"neox": "GPT-NeoX", "megatron": "Megatron-LM"}
INDEX_KINDS = ("doc", "sample", "shuffle")


class EpochError(UserError, ValueError):
    """A ``train_iters`` that would read a pretraining pack more than once."""


# --- GPT-NeoX's sample counts -------------------------------------------------------------------------------


def weighted_num_samples(total: int, weights: list[float]) -> list[int]:
    """Samples asked of each path: ``ceil(total x normalised weight x 1.005)`` (GPT-NeoX's
    ``get_normalized_weights_and_num_samples``; one path: ``neox_samples``)."""
    weight_sum = sum(weights)
    return [math.ceil(total * (w / weight_sum) * NEOX_SURPLUS) for w in weights]


def num_epochs(tokens_per_epoch: int, seq_length: int, num_samples: int) -> int:
    """The fewest epochs whose tokens give ``num_samples`` samples (GPT-NeoX's ``_num_epochs``)."""
    if tokens_per_epoch <= 1:
        raise UserError(f"a dataset of {tokens_per_epoch} tokens gives no sample")
    # (e x T - 1) // S >= N  <=>  e x T >= N x S + 1
    return max(1, -(-(num_samples * seq_length + 1) // tokens_per_epoch))


# --- the index mappings -------------------------------------------------------------------------------------


def build_doc_idx(
    num_documents: int, epochs: int, rng: np.random.RandomState, separate_final: bool = False
) -> np.ndarray:
    """Every document once per epoch, all epochs shuffled together (GPT-NeoX's ``_build_doc_idx``); with
    ``separate_final``, the last epoch shuffled apart after the others (Megatron-LM's)."""
    if separate_final and epochs > 1:
        first = build_doc_idx(num_documents, epochs - 1, rng)
        return np.concatenate((first, build_doc_idx(num_documents, 1, rng)))
    doc_idx = np.tile(np.arange(num_documents, dtype=np.int32), epochs)
    rng.shuffle(doc_idx)
    return doc_idx


def build_sample_idx(sizes: np.ndarray, doc_idx: np.ndarray, seq_length: int, tokens: int) -> np.ndarray:
    """``[(position in doc_idx, offset)]`` of samples ``0..(tokens - 1) // seq_length`` (the last row ends
    the last sample): GPT-NeoX's ``build_sample_idx`` for ``tokens`` = epochs x tokens per epoch."""
    count = (tokens - 1) // seq_length
    starts = np.zeros(len(doc_idx) + 1, dtype=np.int64)
    np.cumsum(sizes[doc_idx], dtype=np.int64, out=starts[1:])
    position = np.arange(count + 1, dtype=np.int64) * seq_length
    doc = np.searchsorted(starts, position, side="right") - 1
    dtype = np.int32 if 2 * (count + 1) < np.iinfo(np.int32).max else np.int64
    out = np.empty((count + 1, 2), dtype=dtype)
    out[:, 0] = doc
    out[:, 1] = position - starts[doc]
    return out


def build_shuffle_idx(size: int, rng: np.random.RandomState, first: int | None = None) -> np.ndarray:
    """``range(size)`` shuffled (GPT-NeoX's ``_build_shuffle_idx``); with ``first``, ``range(first)`` and
    ``range(first, size)`` each shuffled (Megatron-LM's, for a separate final epoch)."""
    dtype = np.uint32 if size < np.iinfo(np.uint32).max - 1 else np.int64
    if first is not None and first < size:
        head, tail = np.arange(first, dtype=dtype), np.arange(first, size, dtype=dtype)
        rng.shuffle(head)
        rng.shuffle(tail)
        return np.concatenate((head, tail))
    shuffle = np.arange(size, dtype=dtype)
    rng.shuffle(shuffle)
    return shuffle


def final_epoch_start(tokens: int, seq_length: int, num_samples: int, epochs: int) -> int | None:
    """The samples before the last epoch when Megatron-LM shuffles that epoch apart (it would give under
    80% of an epoch's samples), else None (``GPTDataset``'s ``separate_final_epoch``)."""
    if epochs == 1:
        return None
    before = ((epochs - 1) * tokens - 1) // seq_length
    per_epoch = (tokens - 1) // seq_length
    return before if num_samples - before < int(0.80 * per_epoch) else None


def k_bin_index(
    sizes: np.ndarray, seq_length: int, num_samples: int, rng: np.random.RandomState, k: int = K_BINS
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """The LUMI fork's ``k_bin_packed`` mappings (doc, sample, shuffle) and the passes it made.

    Documents, shuffled per pass, go to the open bin they fill best; a document longer than a bin is skipped;
    when a 17th bin would be needed the fullest is retired as a sample; at the end of a pass (and when enough
    samples exist) the open bins are merged, fullest first, into samples. ``workflow_scripts.train.sft``
    counts the same samples from the lengths alone.
    """
    capacity = seq_length + 1
    if not (sizes <= capacity).any():
        raise UserError(f"k_bin_packed: no document fits a bin of {capacity} tokens")
    doc_idx: list[int] = []
    sample_idx: list[list[int]] = []
    bins: list[tuple[list[int], int]] = []  # (documents, tokens used)

    def flush(open_bins: list[tuple[list[int], int]]) -> None:
        ptr, used = len(doc_idx), 0
        for docs, size in sorted(open_bins, key=lambda b: b[1], reverse=True):
            if used + size >= capacity:
                if used > 0:
                    sample_idx.append([ptr, 0])
                ptr, used = len(doc_idx), 0
            doc_idx.extend(docs)
            used += size
        if used > 0:
            sample_idx.append([ptr, 0])
        open_bins.clear()

    documents = np.arange(len(sizes), dtype=np.int32)
    rng.shuffle(documents)
    passes, cursor = 1, 0
    while len(sample_idx) < num_samples:
        if cursor == len(documents):
            flush(bins)
            rng.shuffle(documents)
            passes, cursor = passes + 1, 0
            continue
        doc = int(documents[cursor])
        cursor += 1
        size = int(sizes[doc])
        if size > capacity:
            continue
        best, slack = -1, capacity + 1
        for i, (_, used) in enumerate(bins):
            room = capacity - used - size
            if 0 <= room < slack:
                best, slack = i, room
        if best >= 0:
            bins[best][0].append(doc)
            bins[best] = (bins[best][0], bins[best][1] + size)
            continue
        if len(bins) == k:
            fullest = max(range(len(bins)), key=lambda i: bins[i][1])
            flush([bins.pop(fullest)])
        bins.append(([doc], size))
    flush(bins)
    sample_idx.append([len(doc_idx), 0])
    doc_idx.append(doc_idx[0])  # the fork's sentinel document
    samples = np.asarray(sample_idx, dtype=np.int64)
    shuffle = np.arange(len(samples) - 1, dtype=np.int64)
    rng.shuffle(shuffle)
    return np.asarray(doc_idx, dtype=np.int64), samples, shuffle, passes


# --- one path -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class IndexSpec:
    """One path's index mappings: what GPT-NeoX's ``_build_index_mappings`` is asked for."""

    prefix: str
    name: str  # train, valid
    num_samples: int
    seq_length: int
    seed: int
    pack_impl: str
    trainer: str = "neox"  # whose index building: neox or megatron

    @property
    def stem(self) -> str:
        """GPT-NeoX's file name stem (``allow_chopped`` is true by default: ``_ac``), or ours for
        Megatron-LM's mappings."""
        if self.trainer == "megatron":
            return f"{self.prefix}_{self.name}_megatron_{self.num_samples}ns_{self.seq_length}sl_{self.seed}s"
        return (
            f"{self.prefix}_{self.name}_indexmap_{self.num_samples}ns_{self.seq_length}sl_{self.seed}s_"
            f"{self.pack_impl}pi_ac"
        )

    def files(self) -> dict[str, str]:
        return {kind: f"{self.stem}_{kind}_idx.npy" for kind in INDEX_KINDS}

    @cached_property
    def lengths(self) -> np.ndarray:
        return IndexedDataset(self.prefix).lengths

    @property
    def tokens(self) -> int:
        return int(self.lengths.sum(dtype=np.int64))

    @property
    def one_epoch_samples(self) -> int:
        """Samples one epoch gives (packed)."""
        return max(0, (self.tokens - 1) // self.seq_length)

    def epochs(self) -> int:
        """Epochs GPT-NeoX reads to give ``num_samples`` (packed)."""
        return num_epochs(self.tokens, self.seq_length, self.num_samples)

    def build(self) -> dict[str, np.ndarray]:
        """The three mappings, computed."""
        rng = np.random.RandomState(seed=self.seed)
        sizes = self.lengths
        if self.pack_impl == "k_bin_packed":
            doc, sample, shuffle, _ = k_bin_index(sizes, self.seq_length, self.num_samples, rng)
        else:
            epochs = self.epochs()
            final = None
            if self.trainer == "megatron":
                final = final_epoch_start(self.tokens, self.seq_length, self.num_samples, epochs)
            doc = build_doc_idx(len(sizes), epochs, rng, separate_final=final is not None)
            sample = build_sample_idx(sizes, doc, self.seq_length, epochs * self.tokens)
            shuffle = build_shuffle_idx(len(sample) - 1, rng, first=final)
        return {"doc": doc, "sample": sample, "shuffle": shuffle}

    def ensure(self) -> bool:
        """Build and save the mappings unless all three files exist (as GPT-NeoX); return whether it built.
        Each file is written under a temporary name and renamed, so a killed build leaves no partial file."""
        files = self.files()
        if all(os.path.isfile(f) for f in files.values()):
            return False
        for kind, array in self.build().items():
            with atomic_path(files[kind]) as tmp, open(tmp, "wb") as f:
                np.save(f, array, allow_pickle=False)
        return True


class GPTDataset:
    """GPT-NeoX's ``GPT2Dataset`` over one path: sample ``i`` is shuffled sample ``shuffle_idx[i]``."""

    def __init__(self, spec: IndexSpec) -> None:
        self.spec = spec
        self.data = IndexedDataset(spec.prefix)
        files = spec.files()
        self.doc_idx = np.load(files["doc"], mmap_mode="r")
        self.sample_idx = np.load(files["sample"], mmap_mode="r")
        self.shuffle_idx = np.load(files["shuffle"], mmap_mode="r")
        self._starts = self.data.pointers // self.data.dtype.itemsize

    def __len__(self) -> int:
        """GPT-NeoX's length: ``min(len(shuffle_idx) - 1, len(sample_idx) - 1)``; Megatron-LM's has every
        sample: ``len(sample_idx) - 1``."""
        if self.spec.trainer == "megatron":
            return len(self.sample_idx) - 1
        return min(len(self.shuffle_idx) - 1, len(self.sample_idx) - 1)

    def _get(self, doc: int, offset: int = 0, length: int | None = None) -> np.ndarray:
        start = int(self._starts[doc]) + offset
        stop = int(self._starts[doc]) + int(self.data.lengths[doc]) if length is None else start + length
        return self.data.tokens[start:stop]

    def sample(self, index: int) -> tuple[np.ndarray, int]:
        """(``seq_length + 1`` tokens as int64, how many of them are real, not padding)."""
        if not 0 <= index < len(self):
            raise IndexError(f"{self.spec.prefix}: sample {index} of {len(self)}")
        idx = int(self.shuffle_idx[index])
        (first, offset_f), (last, offset_l) = self.sample_idx[idx], self.sample_idx[idx + 1]
        width = self.spec.seq_length + 1
        if self.spec.pack_impl == "k_bin_packed":
            parts = [self._get(int(d)) for d in self.doc_idx[first:last]]
        elif first == last:
            parts = [self._get(int(self.doc_idx[first]), int(offset_f), int(offset_l - offset_f + 1))]
        else:
            parts = [self._get(int(self.doc_idx[first]), int(offset_f))]
            parts += [self._get(int(d)) for d in self.doc_idx[first + 1 : last]]
            parts.append(self._get(int(self.doc_idx[last]), 0, int(offset_l) + 1))
        tokens = np.concatenate(parts).astype(np.int64)[:width]
        real = len(tokens)
        if real < width:
            tokens = np.pad(tokens, (0, width - real), constant_values=0)
        return tokens, real


# --- blends -------------------------------------------------------------------------------------------------


def blending_indices(weights: list[float], size: int) -> tuple[np.ndarray, np.ndarray]:
    """(dataset, sample within it) of blended samples ``0..size-1``: GPT-NeoX's ``build_blending_indices``
    (each sample goes to the dataset furthest behind its share)."""
    w = np.asarray(weights, dtype=np.float64)
    w /= w.sum()
    which = np.zeros(size, dtype=np.uint8)
    within = np.zeros(size, dtype=np.int64)
    if len(w) == 1:
        within[:] = np.arange(size)
        return which, within
    current = np.zeros(len(w), dtype=np.int64)
    for i in range(size):
        errors = w * max(float(i), 1.0) - current
        d = int(np.argmax(errors))  # the first of equal errors, as the C++ loop's strict >
        which[i], within[i] = d, current[d]
        current[d] += 1
    return which, within


class Blend:
    """Several paths as one stream (GPT-NeoX's ``BlendableDataset``), for its first ``size`` samples."""

    def __init__(self, datasets: list[GPTDataset], weights: list[float], size: int) -> None:
        self.datasets = datasets
        self.size = min(size, sum(len(d) for d in datasets))
        self.which, self.within = blending_indices(weights, self.size)

    def __len__(self) -> int:
        return self.size

    def sample(self, index: int) -> tuple[np.ndarray, int]:
        if not 0 <= index < self.size:
            raise IndexError(f"blended sample {index} of {self.size}")
        return self.datasets[int(self.which[index])].sample(int(self.within[index]))

    def batch(self, indices: range) -> tuple[np.ndarray, np.ndarray]:
        """Samples ``indices`` stacked: (tokens [n, seq_length + 1], real lengths [n])."""
        pairs = [self.sample(i) for i in indices]
        return np.stack([p[0] for p in pairs]), np.asarray([p[1] for p in pairs], dtype=np.int64)


# --- what a run asks for ------------------------------------------------------------------------------------


def train_specs(
    pack: str,
    paths: list[str],
    weights: list[float],
    train_iters: int,
    batch: int,
    seq_length: int,
    seed: int,
    pack_impl: str,
    trainer: str = "neox",
) -> list[IndexSpec]:
    """The training paths' index specs, with the single-epoch check of a pretraining (packed) run."""
    if trainer == "megatron":
        if len(paths) != 1:
            raise UserError(
                f"pack {pack}: {len(paths)} --train-data-path prefixes: Megatron-LM blends several with its "
                "BlendedDataset, which the reference does not implement (the workflow writes one a pack)"
            )
        counts, asked = [train_iters * batch], f"Megatron-LM asks {train_iters} x {batch}"
    else:
        counts = weighted_num_samples(train_iters * batch, weights)
        asked = f"GPT-NeoX asks ceil({train_iters} x {batch} x {NEOX_SURPLUS})"
    specs = [
        IndexSpec(p, "train", n, seq_length, seed, pack_impl, trainer)
        for p, n in zip(paths, counts, strict=True)
    ]
    if pack_impl != "packed":
        return specs  # SFT packs (k_bin_packed) may be read for several epochs
    for spec in specs:
        if spec.num_samples > spec.one_epoch_samples:
            most = ""
            if len(specs) == 1:
                most = single_epoch_iters(spec.tokens, seq_length, batch, trainer)
                most = f"; its single-epoch train_iters is {most}"
            raise EpochError(
                f"pack {pack}: train_iters {train_iters} needs {spec.num_samples} samples of "
                f"{seq_length + 1} tokens from {spec.prefix} ({asked}), but its {spec.tokens} tokens give "
                f"{spec.one_epoch_samples} in one epoch: {TRAINER_NAMES[trainer]} would read a second, "
                f"shuffled epoch (some documents twice){most}"
            )
    return specs


def run_train_specs(cfg: RunConfig) -> list[IndexSpec]:
    """The training paths' specs of a run's config (``train_specs`` with its keys and trainer)."""
    args = (cfg.train_iters, cfg.batch, cfg.seq_length, cfg.seed, cfg.pack_impl, cfg.trainer)
    return train_specs(cfg.name, cfg.train_paths, cfg.train_weights, *args)


def valid_specs(
    paths: list[str],
    weights: list[float],
    train_iters: int,
    eval_interval: int,
    eval_iters: int,
    batch: int,
    seq_length: int,
    seed: int,
    pack_impl: str,
) -> list[IndexSpec]:
    """The validation paths' specs, sized as GPT-NeoX sizes them:
    ``(train_iters // eval_interval + 1) x eval_iters x batch`` samples, weighted (several epochs allowed)."""
    if not paths or eval_iters <= 0:
        return []
    total = (train_iters // eval_interval + 1) * eval_iters * batch
    counts = weighted_num_samples(total, weights)
    return [IndexSpec(p, "valid", n, seq_length, seed, pack_impl) for p, n in zip(paths, counts, strict=True)]


def megatron_valid_specs(
    paths: list[str], validation: MegatronValidation, seq_length: int, seed: int, pack_impl: str
) -> list[IndexSpec]:
    """The validation paths' specs as Megatron-LM's ``BlendedMegatronDatasetBuilder`` asks them
    (``run_config.MegatronValidation``): one prefix ``samples``; several with weights
    ``ceil(ceil(samples x w) x (1 + surplus))`` each; several without weights one epoch each."""
    if not paths:
        return []
    v = validation
    if len(paths) == 1:
        counts = [v.samples]
    elif v.weighted:
        counts = [math.ceil(math.ceil(v.samples * w) * (1 + v.surplus)) for w in v.normalized]
    else:  # num_samples None: one epoch, every sample of it
        counts = [IndexSpec(p, "valid", 1, seq_length, seed, pack_impl).one_epoch_samples for p in paths]
    return [
        IndexSpec(p, "valid", n, seq_length, seed, pack_impl, "megatron")
        for p, n in zip(paths, counts, strict=True)
    ]


def megatron_valid_blend(datasets: list[GPTDataset], validation: MegatronValidation) -> Blend:
    """Megatron-LM's validation dataset over ``datasets`` (``megatron_valid_specs``): one prefix's own
    samples, or a ``BlendedDataset`` of ``sum(ceil(samples x w))`` samples (weights given) or of
    ``min(samples, their lengths' sum)`` blended by their lengths (none given)."""
    v = validation
    if len(datasets) == 1:
        return Blend(datasets, [1.0], v.samples)
    if v.weighted:
        return Blend(datasets, v.weights, sum(math.ceil(v.samples * w) for w in v.normalized))
    lengths = [float(len(d)) for d in datasets]
    return Blend(datasets, lengths, min(v.samples, int(sum(lengths))))


def run_valid_specs(cfg: RunConfig) -> list[IndexSpec]:
    """The validation paths' specs of a run's config: Megatron-LM's (``megatron_valid_specs``) for its
    arguments, GPT-NeoX's (``valid_specs``) otherwise."""
    if cfg.megatron_validation is not None:
        if cfg.eval_iters <= 0:
            return []
        args = (cfg.seq_length, cfg.seed, cfg.pack_impl)
        return megatron_valid_specs(cfg.valid_paths, cfg.megatron_validation, *args)
    return valid_specs(
        cfg.valid_paths, cfg.valid_weights, cfg.train_iters, cfg.eval_interval, cfg.eval_iters,
        cfg.batch, cfg.seq_length, cfg.seed, cfg.pack_impl,
    )  # fmt: skip


def run_valid(cfg: RunConfig, datasets: list[GPTDataset]) -> Blend:
    """The validation dataset of a run's config over its specs' datasets (``run_valid_specs``)."""
    if cfg.megatron_validation is not None:
        return megatron_valid_blend(datasets, cfg.megatron_validation)
    return Blend(datasets, cfg.valid_weights, cfg.eval_iters * cfg.batch)
