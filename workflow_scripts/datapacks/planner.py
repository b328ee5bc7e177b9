"""Phases to datapacks: token budgets, per-source document ranges from a persistent cursor, iteration math.

The plan is computed from the index lengths alone (no ``.bin`` is read), so a 300B-token run plans in
seconds, and it is exact: the pack writer (``packer``) later copies exactly the document ranges written here.

* Phases are given by ``iters`` (the pack is sized so exactly that many iterations read it once),
  ``tokens``, or ``fraction`` of all training tokens up to the end of that phase (a cooldown, seed 000's
  ``--cd_phase``): it is carved out of the phase before it, so that total stays as planned, and phases
  appended later (a context extension) change nothing before them.
* A phase is cut into packs of at most ``max_tokens_per_pack`` (the last one holds the remainder; an
  ``iters`` phase is cut in whole iterations, each pack sized for its own share of them).
* A pack's budget is shared over sources by the phase's mixture. Each source is read from its cursor in
  whole documents until its share is reached, less what the sources before it in the pack gave over theirs
  (one whose share that overshoot covers gives nothing to this pack), so a pack holds its budget to within
  its last document. A source that runs out wraps around to its first document: an extra epoch, reported.
* The plan keeps its limits or is refused (``limits``): a pack passes its budget by less than one
  iteration's tokens or a tenth of the pack size and trains at most ``max_iters_per_pack``, a phase passes
  its budget by less than that per pack; a document too long for that is named, with the pack size (a
  power-of-two multiple of the given one) whose plan would keep them, if any.
* Held-out validation (``validation_tokens`` per language): whole documents at the end of a language's
  sources are set aside before any pack is cut, so no pack (and no wrap-around) ever reads them; they
  become one validation pack per language (``valid_{lang}``), the trainers' ``valid_data_paths``. The
  largest source gives them; one that cannot keep half of itself for training gives what it can, and the
  next largest the rest (a source whose last document alone is over half of it is skipped, with a note).
* Packs kept (``Kept``: those up to the last one whose training started) are not planned again: their rows
  are read again as they were, each source's cursor moving as they say, and the packs after them are
  planned from there with the mixtures and phases as they are now (a re-mix). A change that would alter a
  kept pack (its place, budget, a source it reads or what training may read of it) is refused, naming it;
  one that no longer excludes documents it was planned without names them (``Unexcluded``).
"""

from __future__ import annotations

import dataclasses
import functools
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from workflow_scripts.core import naming
from workflow_scripts.core.cli import UserError
from workflow_scripts.datapacks import limits
from workflow_scripts.datapacks.iterations import tokens_for_iters, train_iters, wall_time_hours
from workflow_scripts.datapacks.mixture import compute_shares
from workflow_scripts.datapacks.settings import DatapacksSettings, Phase, PlanSettings, TrainingSettings

MAX_EPOCHS_PER_SLICE = 100  # a source read more often than this within one pack is a configuration mistake
FIT_FACTORS = (2, 4, 8, 16, 32, 64)  # the multiples of the pack size tried for a plan that breaks its limits


class PlanError(UserError, ValueError):
    """A datapack configuration that cannot be planned."""


@dataclass(frozen=True)
class Kept:
    """A pack kept as it was planned (its spec's ``name``, ``budget`` and rows) and ``why`` (what shows
    that its training started)."""

    name: str
    budget: int
    slices: list[dict[str, Any]]
    why: str

    def refusal(self, reason: str) -> PlanError:
        return PlanError(
            f"pack {self.name} has started training ({self.why}) and the new configuration changes it: "
            f"{reason}. Keep what changes it, or set datapacks.replan_started: true to plan it again anyway "
            "(its checkpoints were then trained on other data)"
        )


class Unexcluded(PlanError):
    """A kept pack was planned without documents that ``exclude`` no longer names: ``skipped``, source ->
    their own numbers; ``named`` says so with their names (``exclude.names``: raw file and line, hash)."""

    def __init__(self, pack: Kept, skipped: dict[str, list[int]]) -> None:
        self.pack, self.skipped = pack, skipped
        super().__init__(self.named({s: [f"document {d}" for d in docs] for s, docs in skipped.items()}))

    def named(self, names: Mapping[str, Sequence[str]]) -> PlanError:
        listed = [f"{', '.join(n)} (source {s})" for s, n in names.items()]
        count = sum(len(n) for n in names.values())
        return PlanError(
            f"datapacks.exclude no longer lists {'; '.join(listed)}: started pack {self.pack.name} was "
            f"planned without {'it' if count == 1 else 'them'} ({self.pack.why}). To go on, keep the entry "
            "in datapacks.exclude, or set datapacks.replan_started: true to plan the started packs again "
            "(their checkpoints were then trained on other data)"
        )


@dataclass
class Cursor:
    """Where the next document of a source is read: completed epochs and the document index."""

    epoch: int = 0
    doc: int = 0

    def as_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "doc": self.doc}


@dataclass(slots=True)
class Source:
    """A tokenized source: its name and cumulative token counts (in the order it is read), read from its index
    only when a pack or the hold-out reads it (most sources of a large run are read by few packs)."""

    name: str
    prefix: str
    tokens: int  # the signature's count (the index's own once it is read)
    load: Callable[[], np.ndarray]  # the document lengths, from its index
    seed: int | None = None  # read in a seeded order (``shuffle_permutation``), else in its own
    lang: str = ""
    domain: str = ""
    cursor: Cursor = field(default_factory=Cursor)
    path: str = ""  # the tokenized source, as errors name it
    order: np.ndarray | None = None  # the reading order (shuffled): the source's document of each place
    count: int | None = None  # its documents, as the signature counts them (None: from its index)
    excluded: np.ndarray | None = None  # the places (reading order) taken out: ``exclude``
    shift: int = 0  # the tokens its cursor had taken before ``exclude`` less what it takes now
    _cumsum: np.ndarray | None = None

    @property
    def cumsum(self) -> np.ndarray:
        """int64, len = documents + 1, cumsum[0] == 0, in the reading order."""
        if self._cumsum is None:
            lens = np.asarray(self.load(), dtype=np.int64)
            if self.seed is not None:
                self.order = shuffle_permutation(len(lens), self.seed, self.name)
                lens = lens[self.order]
            self._cumsum = np.concatenate([[0], np.cumsum(lens)])
        return self._cumsum

    @cumsum.setter
    def cumsum(self, value: np.ndarray) -> None:
        self._cumsum = value

    @property
    def total(self) -> int:
        """Its tokens (the signature's until the index is read)."""
        return self.tokens if self._cumsum is None else int(self._cumsum[-1])

    def longest(self, ranges: Sequence[Sequence[int]]) -> limits.Document:
        """The longest document of ``ranges`` ((epoch, start, stop) in the reading order)."""
        best, place = -1, 0
        for _, start, stop in ranges:
            sizes = np.diff(self.cumsum[start : stop + 1])
            if len(sizes) and int(sizes.max()) > best:
                best, place = int(sizes.max()), start + int(sizes.argmax())
        number = int(self.order[place]) if self.order is not None else place
        return limits.Document(self.path or self.name, number, best)

    @property
    def documents(self) -> int:
        return len(self.cumsum) - 1

    def position(self) -> int:
        """The tokens the cursor has taken (whole epochs and the documents before it)."""
        if not (self.cursor.epoch or self.cursor.doc):  # not read: no need to read its index
            return 0
        return self.cursor.epoch * self.total + int(self.cumsum[self.cursor.doc]) + self.shift

    def mark(self, documents: Sequence[int]) -> np.ndarray:
        """Set ``excluded`` to the places of ``documents`` (its own numbers) in the reading order, the
        held-out ones left aside, and return them: the kept packs may skip them (``skip_to``)."""
        places, readable = np.asarray(documents, np.int64), self.documents  # reads the index and the order
        if self.order is not None:
            places = np.argsort(self.order)[places]
        self.excluded = np.unique(places[places < readable])
        return self.excluded

    def skip_to(self, epoch: int, doc: int) -> None:
        """Move the cursor on to ``epoch:doc`` over excluded places only (a kept pack planned without them
        skipped them), their tokens counted as not taken; it stays where it is at another place."""
        if self.excluded is None or (self.cursor.epoch, self.cursor.doc) == (epoch, doc):
            return
        places, at, shift = set(self.excluded.tolist()), self.cursor, 0
        for _ in range(len(places)):
            if (at.epoch, at.doc) == (epoch, doc) or at.doc not in places:
                break
            shift += int(self.cumsum[at.doc + 1] - self.cumsum[at.doc])
            at = Cursor(at.epoch + 1, 0) if at.doc + 1 == self.documents else Cursor(at.epoch, at.doc + 1)
        if (at.epoch, at.doc) == (epoch, doc):
            self.cursor, self.shift = at, self.shift - shift

    def unexcluded(self, epoch: int, doc: int) -> list[int]:
        """The documents (own numbers) at the places from the cursor up to ``epoch:doc`` that are not
        excluded: those a kept pack planned without them skipped; none when ``epoch:doc`` is not ahead."""
        at = self.cursor
        if (epoch, doc) <= (at.epoch, at.doc) or doc > self.documents:
            return []
        if epoch == at.epoch:
            places = np.arange(at.doc, doc)
        elif epoch == at.epoch + 1:
            places = np.union1d(np.arange(at.doc, self.documents), np.arange(doc))
        else:
            places = np.arange(self.documents)
        places = places if self.excluded is None else np.setdiff1d(places, self.excluded)
        return sorted((places if self.order is None else self.order[places]).tolist())

    def exclude(self) -> np.ndarray:
        """Read none of the ``excluded`` places from now on: they hold no tokens, and the ranges ``take``
        gives skip them; return them."""
        assert self.excluded is not None
        before = self.position()
        lens = np.diff(self.cumsum)
        lens[self.excluded] = 0
        self._cumsum = np.concatenate([[0], np.cumsum(lens)])
        self.shift += before - self.position()
        return self.excluded

    def _skip_excluded(self, ranges: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
        """``ranges`` split around the excluded places."""
        places, out = self.excluded, []
        assert places is not None
        for epoch, start, stop in ranges:
            cut = places[np.searchsorted(places, start) : np.searchsorted(places, stop)].tolist()
            bounds = zip([start, *(c + 1 for c in cut)], [*cut, stop], strict=True)
            out += [(epoch, a, b) for a, b in bounds if a < b]
        return out

    def epochs(self) -> float:
        if self.cursor.doc == 0:  # not read, or read to the end of an epoch: no need to read its index
            return float(self.cursor.epoch)
        return self.cursor.epoch + self.cursor.doc / self.documents

    def take(self, target: int) -> list[tuple[int, int, int]]:
        """Take whole documents until ``target`` tokens are reached; return (epoch, start, stop) ranges."""
        ranges: list[tuple[int, int, int]] = []
        cs = self.cumsum
        if self.documents == 0 or cs[-1] == 0:
            raise PlanError(f"source {self.name} has no tokens to take {target} from")
        if target > MAX_EPOCHS_PER_SLICE * cs[-1]:
            raise PlanError(
                f"source {self.name} ({int(cs[-1])} tokens) would be read over {MAX_EPOCHS_PER_SLICE} times "
                f"for one pack ({target} tokens): lower its probability or add data"
            )
        while target > 0:
            start = self.cursor.doc
            left = int(cs[-1] - cs[start])
            if target <= left:
                stop = int(np.searchsorted(cs, cs[start] + target, side="left"))
                target = 0
            else:
                stop = self.documents
                target -= left
            ranges.append((self.cursor.epoch, start, stop))
            self.cursor.doc = stop
            if stop == self.documents:
                self.cursor = Cursor(self.cursor.epoch + 1, 0)
        return ranges if self.excluded is None or not len(self.excluded) else self._skip_excluded(ranges)


def shuffle_permutation(documents: int, seed: int, name: str) -> np.ndarray:
    """The fixed order in which a shuffled source's documents are read (seeded per source name)."""
    return np.random.default_rng([seed, zlib.crc32(name.encode())]).permutation(documents)


def max_tokens_per_pack(training: TrainingSettings, datapacks: DatapacksSettings) -> int:
    """The pack size limit, from ``max_tokens_per_pack`` or ``max_iters_per_pack``."""
    if datapacks.max_tokens_per_pack:
        return int(datapacks.max_tokens_per_pack)
    if datapacks.max_iters_per_pack:
        return datapacks.max_iters_per_pack * training.tokens_per_iter
    raise PlanError("datapacks needs max_tokens_per_pack or max_iters_per_pack")


def pack_sizes(training: TrainingSettings, phase: Phase, budget: int, pack_max: int) -> list[tuple[int, int]]:
    """(token budget, iteration cap or 0) of each pack of a phase; an ``iters`` phase is cut in iterations."""
    if phase.iters is not None:
        seq, batch, rule = training.seq_length, training.global_batch_size, training.epoch_rule
        per_pack = max(1, pack_max // training.tokens_per_iter)
        chunks = [min(per_pack, phase.iters - k) for k in range(0, phase.iters, per_pack)]
        return [(tokens_for_iters(k, seq, batch, rule), k) for k in chunks]
    return [(min(pack_max, budget - k), 0) for k in range(0, budget, pack_max)] or [(0, 0)]


def phase_budgets(training: TrainingSettings, phases: Sequence[Phase], pack_max: int) -> list[int]:
    """Token budget of each phase; ``fraction`` phases are carved out of the ``tokens`` phase before them."""
    budgets = [
        sum(t for t, _ in pack_sizes(training, p, 0, pack_max)) if p.iters is not None else int(p.tokens or 0)
        for p in phases
    ]
    for i, phase in enumerate(phases):
        if phase.fraction is None:
            continue
        if i == 0 or phases[i - 1].tokens is None:
            raise PlanError(f"phase {phase.name}: a fraction phase must follow a phase given in tokens")
        budgets[i] = round(phase.fraction * sum(budgets[:i]))
        budgets[i - 1] -= budgets[i]
        if budgets[i - 1] <= 0:
            raise PlanError(f"phase {phase.name} ({budgets[i]} tokens) is larger than {phases[i - 1].name}")
    return budgets


def split_budget(total: int, probabilities: list[float]) -> list[int]:
    """Integer shares of ``total`` in proportion to ``probabilities``, summing exactly (largest remainder)."""
    raw = np.asarray(probabilities, dtype=np.float64) * total
    shares = np.floor(raw).astype(np.int64)
    order = np.argsort(-(raw - shares), kind="stable")
    shares[order[: total - int(shares.sum())]] += 1
    return [int(s) for s in shares]


def check_one_tokenizer(signature: list[dict[str, Any]]) -> None:
    """Refuse to plan over sources tokenized with different tokenizers or token settings: their ids would
    mean different things within one pack."""
    kinds: dict[str, list[str]] = {}
    for entry in signature:
        tokenizer = (entry.get("identity") or {}).get("tokenizer")
        if tokenizer is not None:
            key = f"{tokenizer['tokenizer_sha256']} (EOD {tokenizer['eod_id']}, BOS {tokenizer['bos_id']})"
            kinds.setdefault(key, []).append(entry["name"])
    if len(kinds) > 1:
        listed = "; ".join(f"{k}: {v[0]} and {len(v) - 1} more" for k, v in sorted(kinds.items()))
        raise PlanError(f"the sources were tokenized with different tokenizers: {listed}")


def make_plan(
    settings: PlanSettings,
    signature: list[dict[str, Any]],
    lengths: Callable[[str], np.ndarray],
    kept: Sequence[Kept] = (),
    excluded: Mapping[str, Sequence[int]] | None = None,
) -> dict[str, Any]:
    """The whole datapack plan: packs, their exact slices, train_iters, offsets, epochs and estimates;
    refused (``limits``) where a pack or phase passes its budget by too much. The first packs are
    ``kept``'s rows, refused (``Kept.refusal``) where they no longer fit. The packs after them read none of
    the documents ``excluded`` names (source -> its document numbers: ``exclude.resolve``); the plan's
    ``excluded`` says which of the kept packs hold them.

    Its form is ``plan.json``'s (``plan.Plan``) with each pack's rows under ``slices`` and the sources' table,
    as columns, under ``sources`` (``conservation``): ``plan_table`` writes them as the plan's table."""
    check_one_tokenizer(signature)
    # a refused plan is made again with larger packs; copies: an index's own array would keep it open
    lengths = functools.cache(lambda prefix, read=lengths: np.array(read(prefix), dtype=np.int64))
    excluded = excluded or {}
    plan, problems = _plan(settings, signature, lengths, kept, excluded)
    if problems:
        fit = _fitting_pack_size(settings, signature, lengths, kept, excluded)
        raise PlanError(limits.refusal(problems, fit))
    return plan


def _fitting_pack_size(
    settings: PlanSettings,
    signature: list[dict[str, Any]],
    lengths: Callable[[str], np.ndarray],
    kept: Sequence[Kept],
    excluded: Mapping[str, Sequence[int]],
) -> str:
    """The fix to name: the smallest multiple of the pack size in ``FIT_FACTORS`` whose plan keeps its
    limits, or removing the long documents."""
    packs = settings.datapacks
    key = "max_tokens_per_pack" if packs.max_tokens_per_pack else "max_iters_per_pack"
    given = getattr(packs, key)
    for factor in FIT_FACTORS:
        value = int(given * factor)
        larger = dataclasses.replace(settings, datapacks=dataclasses.replace(packs, **{key: value}))
        try:
            if not _plan(larger, signature, lengths, kept, excluded)[1]:
                return f"datapacks.{key}: {value} holds every document within these limits"
        except PlanError:
            continue
    return (
        f"no datapacks.{key} up to {int(given * FIT_FACTORS[-1])} holds them: remove or split the "
        "document(s) named in the raw input"
    )


def _plan(
    settings: PlanSettings,
    signature: list[dict[str, Any]],
    lengths: Callable[[str], np.ndarray],
    kept: Sequence[Kept] = (),
    excluded: Mapping[str, Sequence[int]] | None = None,
) -> tuple[dict[str, Any], list[str]]:
    """The plan and the limits it breaks (one line each)."""
    training, datapacks, mixtures = settings.training, settings.datapacks, settings.mixtures
    seq, batch, rule = training.seq_length, training.global_batch_size, training.epoch_rule
    tpi, pack_max = training.tokens_per_iter, max_tokens_per_pack(training, datapacks)
    phases = datapacks.phases
    budgets = phase_budgets(training, phases, pack_max)
    shuffle, seed = datapacks.shuffle, settings.seed
    names_of = {e["prefix"]: naming.source_name(e["name"]) for e in signature}
    sources = {
        names_of[e["prefix"]]: Source(
            names_of[e["prefix"]],
            e["prefix"],
            int(e["tokens"]),
            functools.partial(lengths, e["prefix"]),
            seed if shuffle else None,
            e["lang"],
            e["domain"],
            path=e.get("source", ""),
            count=e.get("documents"),
        )
        for e in signature
    }
    validation, notes = hold_out(signature, names_of, sources, datapacks.validation_tokens)
    packs: list[dict[str, Any]] = []
    iters_cap = None if datapacks.max_tokens_per_pack else datapacks.max_iters_per_pack
    bounds = limits.Limits(seq, batch, rule, pack_max, iters_cap)
    problems: list[str] = []
    offset = 0
    shares_of: dict[str, list[Any]] = {}  # a mixture's shares, once for all its phases
    places: dict[str, np.ndarray] | None = None if excluded else {}  # taken out after the kept packs
    for name, docs in (excluded or {}).items():
        sources[name].mark(docs)
    for phase, budget in zip(phases, budgets, strict=True):
        if phase.mixture not in mixtures:
            raise PlanError(f"phase {phase.name} uses unknown mixture {phase.mixture!r}")
        if phase.mixture not in shares_of:
            shares_of[phase.mixture] = compute_shares(signature, mixtures[phase.mixture])
        shares = shares_of[phase.mixture]
        names = [names_of[s.prefix] for s in shares]
        first = len(packs)
        for pack_tokens, cap in pack_sizes(training, phase, budget, pack_max):
            if len(packs) < len(kept):
                pack = _keep(kept[len(packs)], len(packs), phase, pack_tokens, sources)
            else:
                places = _exclude(sources, excluded) if places is None else places
                pack = _slice_pack(len(packs), phase, pack_tokens, names, shares, sources)
            iters = train_iters(pack["tokens"], seq, batch, rule)
            # an iters phase's pack is sized for exactly its iterations, any pack for at most
            # max_iters_per_pack; it may hold a little more (less than the allowance of ``limits``), not read
            iters = min(iters, cap or iters, iters_cap or iters)
            pack.update(train_iters=iters, iteration_offset=offset, trained_tokens=iters * tpi)
            pack["wall_hours"] = _wall_hours(training, pack["trained_tokens"])
            offset += iters
            packs.append(pack)
            problems += filter(None, [limits.pack_problem(pack, bounds, lambda p=pack: _longest(p, sources))])
        problems += filter(None, [limits.phase_problem(phase.name, budget, packs[first:], bounds)])
    if len(kept) > len(packs):
        raise kept[len(packs)].refusal(f"the phases now end with {len(packs)} packs: it is no longer planned")
    plan = {
        "tokens_per_iter": tpi,
        "seq_length": seq,
        "global_batch_size": batch,
        "epoch_rule": rule,
        "max_tokens_per_pack": pack_max,
        "shuffle": shuffle,
        "seed": seed,
        "phases": [
            {"name": p.name, "mixture": p.mixture, "tokens": b} for p, b in zip(phases, budgets, strict=True)
        ],
        "packs": packs,
        "validation": validation,
        **({"notes": notes} if notes else {}),  # only when there is something to say: a plan stays as it was
        **(
            {"excluded": _excluded(excluded, places or _exclude(sources, excluded), packs[: len(kept)])}
            if excluded
            else {}
        ),
        "total_train_iters": offset,
        "sources": conservation(sources, packs, validation),
    }
    return plan, problems


def hold_out(
    signature: list[dict[str, Any]], names_of: dict[str, str], sources: dict[str, Source], tokens: int
) -> tuple[list[dict[str, Any]], list[str]]:
    """Set aside about ``tokens`` tokens per language and return one validation pack per language, and notes.

    The language's sources are taken largest first; each gives whole documents from its end (it then ends
    before them) until ``tokens`` are held out, but never more than half of itself. A source that cannot
    give even its last document is skipped, with a note; a language whose sources together cannot give
    ``tokens`` is refused, with the most they can give.
    """
    if not tokens:
        return [], []
    by_lang: dict[str, list[Source]] = {}
    for entry in signature:
        by_lang.setdefault(entry["lang"], []).append(sources[names_of[entry["prefix"]]])
    packs: list[dict[str, Any]] = []
    notes: list[str] = []
    for lang in sorted(by_lang):
        ordered = sorted(by_lang[lang], key=lambda s: (s.total, s.name), reverse=True)
        starts = _hold_out_starts(ordered, tokens)
        if starts is None:
            most = sum(int(s.cumsum[-1] - s.cumsum[_end_start(s, int(s.cumsum[-1]))]) for s in ordered)
            fix = (
                f"set validation_tokens to {most} or less, or to 0 to hold out nothing"
                if most
                else "set validation_tokens to 0 to hold out nothing, or add data to this language"
            )
            raise PlanError(
                f"datapacks.validation_tokens {tokens}: language {lang}'s {len(ordered)} source(s) can hold "
                f"out at most {most} tokens in whole documents from their ends (more would leave less than "
                f"half for training): {fix}"
            )
        name = naming.validation_name(lang)
        held = [(src, start, int(src.cumsum[-1] - src.cumsum[start])) for src, start in starts]
        used = ", ".join(src.name for src, _, n in held if n)
        notes += [
            f"{name}: source {src.name} skipped: holding out even its last document "
            f"({int(src.cumsum[-1] - src.cumsum[-2])} of its {int(src.cumsum[-1])} tokens) would leave less "
            f"than half of it for training; held out from {used} instead"
            for src, _, n in held
            if not n
        ]
        slices = []
        for src, start, n in held:
            if not n:
                continue
            documents = src.documents
            src.cumsum = src.cumsum[: start + 1]
            slices.append(
                {
                    "source": src.name,
                    "prefix": src.prefix,
                    "lang": lang,
                    "tokens": n,
                    "documents": documents - start,
                    "ranges": [[0, start, documents]],
                    "epochs_after": 0.0,
                    "upsampled": False,
                    "name": naming.slice_name(src.name, 0, start, n) + "_valid",
                }
            )
        packs.append(
            {
                "name": name,
                "phase": "validation",
                "lang": lang,
                "budget": tokens,
                "tokens": sum(s["tokens"] for s in slices),
                "documents": sum(s["documents"] for s in slices),
                "sources": len(slices),
                "slices": slices,
            }
        )
    return packs, notes


def _end_start(src: Source, tokens: int) -> int:
    """The first of the fewest whole documents at the end of ``src`` that hold ``tokens`` tokens, moved on
    until they are at most half of it (the source's document count when not even the last one is)."""
    cs, total = src.cumsum, int(src.cumsum[-1])
    start = max(int(np.searchsorted(cs, total - tokens, side="right")) - 1, 0)
    lowest = max(int(np.searchsorted(cs, total - total // 2, side="left")), 1)
    return min(max(start, lowest), src.documents)


def _hold_out_starts(ordered: list[Source], tokens: int) -> list[tuple[Source, int]] | None:
    """Where each source's held-out documents start (largest source first, each giving what is still
    needed, at most half of itself), up to the one that completes ``tokens``; ``None`` if they cannot."""
    starts = []
    for src in ordered:
        start = _end_start(src, tokens)
        starts.append((src, start))
        tokens -= int(src.cumsum[-1] - src.cumsum[start])
        if tokens <= 0:
            return starts
    return None


def conservation(
    sources: dict[str, Source], packs: list[dict[str, Any]], validation: Sequence[dict[str, Any]] = ()
) -> dict[str, list[Any]]:
    """The sources' table, as columns: per source its name, link prefix, language and domain, documents (the
    held-out ones included), tokens available, taken by all packs, epochs read and held out for validation
    (None: nothing); checked to add up.

    The tokens taken from a source equal its cursor position (epochs x available + the tokens before the
    cursor), and all sources together give exactly the packs' tokens.
    """
    taken = dict.fromkeys(sources, 0)
    for pack in packs:
        for s in pack["slices"]:
            taken[s["source"]] += s["tokens"]
    held = {v["source"]: v["tokens"] for pack in validation for v in pack["slices"]}
    for name, src in sources.items():
        position = src.position()
        if taken[name] != position:
            raise PlanError(f"source {name}: {taken[name]} tokens taken but the cursor is at {position}")
    packed = sum(p["tokens"] for p in packs)
    if sum(taken.values()) != packed:
        raise PlanError(f"the sources give {sum(taken.values())} tokens, the packs {packed}")
    return {
        "source": list(sources),
        "prefix": [src.prefix for src in sources.values()],
        "lang": [src.lang for src in sources.values()],
        "domain": [src.domain for src in sources.values()],
        "documents": [src.count if src.count is not None else len(src.load()) for src in sources.values()],
        "available": [src.total for src in sources.values()],
        "taken": list(taken.values()),
        "epochs": [round(src.epochs(), 6) for src in sources.values()],
        "held_out": [held.get(name) for name in sources],
    }


def _exclude(sources: dict[str, Source], excluded: Mapping[str, Sequence[int]] | None) -> dict[str, Any]:
    """Take the ``excluded`` documents (``Source.mark``) out of what their sources read from now on; their
    places."""
    return {name: sources[name].exclude() for name in excluded or {}}


def _excluded(
    excluded: Mapping[str, Sequence[int]], places: dict[str, np.ndarray], kept: Sequence[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The plan's ``excluded``: per source its documents taken out, their places in the reading order
    (those training may read) and the kept packs that hold one of them."""
    entries = []
    for name, docs in excluded.items():
        at = places[name]
        holding = [
            pack["name"]
            for pack in kept
            if any(
                np.searchsorted(at, a) < np.searchsorted(at, b)
                for s in pack["slices"]
                if s["source"] == name
                for _, a, b in s["ranges"]
            )
        ]
        entries.append(
            {
                "source": name,
                "documents": sorted({int(d) for d in docs}),
                "places": at.tolist(),
                "started_packs": holding,
            }
        )
    return entries


def _longest(pack: dict[str, Any], sources: dict[str, Source]) -> limits.Document:
    """The longest document a pack reads."""
    found = (sources[s["source"]].longest(s["ranges"]) for s in pack["slices"])
    return max(found, key=lambda d: d.tokens, default=limits.Document("", 0, 0))


def _wall_hours(training: TrainingSettings, tokens: int) -> float | None:
    if not (training.model_params and training.gpus and training.tflops_per_gpu):
        return None
    hours = wall_time_hours(tokens, training.model_params, training.gpus, training.tflops_per_gpu)
    return float(f"{hours:.4g}")


def _slice_pack(
    index: int,
    phase: Phase,
    tokens: int,
    names: list[str],
    shares: list[Any],
    sources: dict[str, Source],
) -> dict[str, Any]:
    name = naming.pack_name(phase.name, index)
    shares_of = split_budget(tokens, [s.probability for s in shares])
    slices = []
    carry = 0  # what the sources before gave over their shares
    for source_name, share, part in zip(names, shares, shares_of, strict=True):
        target = part - carry
        if target <= 0:
            carry = -target
            continue
        src = sources[source_name]
        start = src.cursor.as_dict()
        epochs_before = src.epochs()
        ranges = src.take(target)
        taken = sum(int(src.cumsum[b] - src.cumsum[a]) for _, a, b in ranges)
        carry = taken - target
        slices.append(
            {
                "source": source_name,
                "prefix": src.prefix,
                "lang": share.lang,
                "domain": share.domain,
                "target": target,
                "tokens": taken,
                "documents": sum(b - a for _, a, b in ranges),
                "ranges": [list(r) for r in ranges],
                "start": start,
                "end": src.cursor.as_dict(),
                "epochs_before": round(epochs_before, 6),
                "epochs_after": round(src.epochs(), 6),
                "upsampled": any(epoch > 0 for epoch, _, _ in ranges),
                "name": naming.slice_name(source_name, index, ranges[0][1], taken),
            }
        )
    return _pack_entry(name, phase, tokens, slices)


def _pack_entry(name: str, phase: Phase, budget: int, slices: list[dict[str, Any]]) -> dict[str, Any]:
    """A pack of the plan (its JSON form): its phase, budget, slices and their totals."""
    return {
        "name": name,
        "phase": phase.name,
        "mixture": phase.mixture,
        "budget": budget,
        "tokens": sum(s["tokens"] for s in slices),
        "documents": sum(s["documents"] for s in slices),
        "sources": len(slices),
        "upsampled_sources": sum(s["upsampled"] for s in slices),
        "slices": slices,
    }


def _keep(kept: Kept, index: int, phase: Phase, tokens: int, sources: dict[str, Source]) -> dict[str, Any]:
    """Pack ``index`` as ``kept`` planned it, each source's cursor moved as its rows say; refused where the
    phases now plan another pack there or a row no longer reads the same documents, tokens and epochs."""
    name = naming.pack_name(phase.name, index)
    if (name, tokens) != (kept.name, kept.budget):
        raise kept.refusal(
            f"the phases now plan pack {index} as {name} of {tokens} tokens (budget {kept.budget})"
        )
    changed = "what training may read of it changed (the hold-out, or its content)"
    skipped: dict[str, list[int]] = {}  # documents it was planned without that exclude no longer names
    for row in kept.slices:
        src = sources.get(row["source"])
        if src is None or src.prefix != row["prefix"]:
            raise kept.refusal(f"its source {row['source']} ({row['prefix']}) is no longer in the data")
        if src.cursor.as_dict() != row["start"]:
            raise kept.refusal(f"source {src.name} is read from {src.cursor.as_dict()}, not {row['start']}")
        epochs_before, taken = round(src.epochs(), 6), 0
        for epoch, start, stop in row["ranges"]:
            src.skip_to(epoch, start)
            if unexcluded := src.unexcluded(epoch, start):
                skipped.setdefault(src.name, []).extend(unexcluded)
                src.cursor = Cursor(epoch, start)
            if (epoch, start) != (src.cursor.epoch, src.cursor.doc) or stop > src.documents:
                raise kept.refusal(
                    f"source {src.name}: its documents {start}:{stop} (epoch {epoch}): {changed}"
                )
            taken += int(src.cumsum[stop] - src.cumsum[start])
            src.cursor = Cursor(epoch + 1, 0) if stop == src.documents else Cursor(epoch, stop)
        if taken != row["tokens"]:
            raise kept.refusal(
                f"source {src.name}: its documents {row['ranges']} hold {taken} tokens, not {row['tokens']}"
            )
        src.skip_to(row["end"]["epoch"], row["end"]["doc"])
        if unexcluded := src.unexcluded(row["end"]["epoch"], row["end"]["doc"]):
            skipped.setdefault(src.name, []).extend(unexcluded)
            src.cursor = Cursor(row["end"]["epoch"], row["end"]["doc"])
        if (src.cursor.as_dict(), epochs_before, round(src.epochs(), 6)) != (
            row["end"],
            row["epochs_before"],
            row["epochs_after"],
        ):
            raise kept.refusal(f"source {src.name}: {changed}")
    if skipped:
        raise Unexcluded(kept, skipped)
    slices = [dict(row) for row in kept.slices]
    return _pack_entry(name, phase, tokens, slices)
