"""The plan's limits, checked after planning: a plan that breaks one is refused, one line per problem.

Packs are cut in whole documents, so a pack holds a little more than its budget: the planner carries each
source's overshoot over to the sources after it in the pack, so only the pack's last document passes the
budget. The rule a plan must keep, with the pack size ``P`` (``max_tokens_per_pack``, or
``max_iters_per_pack`` iterations' tokens) and one iteration's tokens ``I`` (``seq_length x
global_batch_size``):

* a pack passes its budget by less than ``max(I, P // 10)`` tokens (its allowance);
* a pack trains at most ``max_iters_per_pack`` iterations: the planner caps it there, as an ``iters`` phase's
  packs at theirs, and the tokens past the last iteration (less than the allowance) are not read;
* a phase passes its budget by less than one allowance per pack.

A document at least as long as the allowance breaks the rule where it is the one that passes the budget; the
refusal names it (its number in its tokenized source and its tokens) and the limit it breaks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from workflow_scripts.datapacks.iterations import train_iters

ALLOWANCE_SHARE = 10  # a pack may pass its budget by less than a tenth of the pack size (or an iteration)


@dataclass(frozen=True)
class Document:
    """A pack's longest document: where it is and its tokens."""

    source: str  # its tokenized source (the file name the count stage links)
    number: int  # its place in that source, from 0
    tokens: int


@dataclass(frozen=True)
class Limits:
    """What the config allows: the iteration math, the pack size and the iteration limit per pack (None:
    none given)."""

    seq_length: int
    global_batch_size: int
    epoch_rule: str
    pack_max: int
    max_iters_per_pack: int | None

    @property
    def tokens_per_iter(self) -> int:
        return self.seq_length * self.global_batch_size

    @property
    def allowance(self) -> int:
        """What a pack may pass its budget by, exclusive."""
        return max(self.tokens_per_iter, self.pack_max // ALLOWANCE_SHARE)


def pack_problem(pack: dict[str, Any], limits: Limits, longest: Callable[[], Document]) -> str | None:
    """One line if ``pack`` holds too many tokens or trains too many iterations, naming its longest document
    (``longest``, asked only then)."""
    cap, over = limits.max_iters_per_pack, pack["tokens"] - pack["budget"]
    too_many_iters = (
        cap is not None and pack["train_iters"] > cap
    )  # the planner caps them: checked all the same
    if over < limits.allowance and not too_many_iters:
        return None
    needs = train_iters(pack["tokens"], limits.seq_length, limits.global_batch_size, limits.epoch_rule)
    iters = f"{needs} iterations to read it" + (f", max_iters_per_pack {cap}" if cap else "")
    doc = longest()
    return (
        f"pack {pack['name']} (phase {pack['phase']}) holds {pack['tokens']:,} tokens for a budget of "
        f"{pack['budget']:,} ({iters}): {over:,} over, where less than {limits.allowance:,} is allowed; its "
        f"longest document, document {doc.number} of {doc.source}, has {doc.tokens:,} tokens"
    )


def phase_problem(name: str, budget: int, packs: list[dict[str, Any]], limits: Limits) -> str | None:
    """One line if the packs of phase ``name`` pass its budget by one allowance per pack or more."""
    tokens = sum(p["tokens"] for p in packs)
    allowed = len(packs) * limits.allowance
    if tokens - budget < allowed:
        return None
    iters = sum(p["train_iters"] for p in packs)
    return (
        f"phase {name}: {tokens:,} tokens for a budget of {budget:,} ({iters} iterations in {len(packs)} "
        f"pack(s)), {tokens - budget:,} over where less than {allowed:,} is allowed"
    )


def refusal(problems: list[str], fix: str) -> str:
    """The message of a plan that breaks its limits: a heading, a line per problem and one with the fix."""
    return "\n".join(
        [
            "the plan breaks its limits (a pack may pass its budget by less than one iteration's tokens or a "
            "tenth of the pack size, whichever is more; a phase by less than that per pack):",
            *(f"- {p}" for p in problems),
            f"- {fix}",
        ]
    )
