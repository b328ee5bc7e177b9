"""The progress lines trainers print: iteration losses and validation results.

Read from a trainer's standard output, so a segment's record does not depend on which trainer ran:

- reference trainer: ``iteration       12/40 | loss 7.1 | lr ...`` and ``validation at 12: loss 7.3 ppl ...``
- GPT-NeoX: ``iteration       12/     40 | ... | lm_loss: 7.1E+00 | ...`` and
  ``validation results at iteration 12 | lm_loss value: 7.3E+00 | ...``
- Megatron-LM: ``iteration       12/      40 | ... | lm loss: 7.1E+00 | ...`` and
  ``validation loss at iteration 12 on validation set | lm loss value: 7.3E+00 | ...`` (and the same ``on test
  set``, which is not read)
"""

from __future__ import annotations

import re

NUMBER = r"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)"
ITERATION = re.compile(r"\biteration\s+(\d+)\s*/\s*\d+\s*\|(.*)")
VALIDATION = re.compile(
    r"\bvalidation (?:results |loss )?at (?:iteration )?(\d+)(?: on validation set)?\s*[:|](.*)"
)
LOSS = re.compile(r"\b(?:lm[ _])?loss(?: value)?:?\s+" + NUMBER)


def iteration_loss(line: str) -> tuple[int, float] | None:
    """(global iteration, training loss) of an iteration line, else None."""
    match = ITERATION.search(line)
    loss = LOSS.search(match.group(2)) if match else None
    return (int(match.group(1)), float(loss.group(1))) if match and loss else None


def validation_loss(line: str) -> tuple[int, float] | None:
    """(global iteration, validation loss) of a validation line, else None."""
    match = VALIDATION.search(line)
    loss = LOSS.search(match.group(2)) if match else None
    return (int(match.group(1)), float(loss.group(1))) if match and loss else None
