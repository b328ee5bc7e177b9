"""How much of each language and domain the run has read, over global steps and at each checkpoint.

A pack's document counts as read at the first global step that reads any of its tokens, in the trainer's
order (``lineage.steps.StepMap``, the trainer's index mappings and blend for the pack's config); its tokens
then count for the language and domain of the source it came from (the plan's rows,
``lineage.sources.PackSources``). The share is over the tokens the plan can train from (``available``:
held-out documents excluded), so 1.0 is one epoch and an upsampled source passes it. Every sample's
reads are computed with array arithmetic over the mappings (``StepMap.first_steps``: no loop per sample).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from workflow_scripts.core.indexed_dataset import IndexedDataset
from workflow_scripts.datapacks import plan_table
from workflow_scripts.datapacks.plan import Plan
from workflow_scripts.lineage.sources import PackSources
from workflow_scripts.lineage.steps import StepMap
from workflow_scripts.train.reference.run_config import RunConfig


def pack_reads(cfg: RunConfig, plan: Plan) -> pd.DataFrame:
    """One row per document of the config's packs: its first global ``step``, ``tokens``, ``lang`` and
    ``domain``."""
    steps, frames = StepMap(cfg), []
    for path, prefix in enumerate(cfg.train_paths):
        dataset = IndexedDataset(prefix)
        starts = np.asarray(dataset.doc_idx[:-1], dtype=np.int64)
        sequence_step = steps.first_steps(path)
        lengths = np.asarray(dataset.lengths, dtype=np.int64)
        rows = PackSources.of_plan(plan, prefix.rsplit("/", 1)[-1]).rows
        row_of = np.repeat(np.arange(len(rows)), [r["documents"] for r in rows])
        frames.append(
            pd.DataFrame(
                {
                    "step": np.minimum.reduceat(sequence_step, starts) if len(starts) else starts,
                    "tokens": np.add.reduceat(lengths, starts) if len(starts) else starts,
                    "lang": np.asarray([r["lang"] for r in rows], dtype=object)[row_of],
                    "domain": np.asarray([r["domain"] for r in rows], dtype=object)[row_of],
                }
            )
        )
    return pd.concat(frames, ignore_index=True)


def consumption(configs: Sequence[RunConfig], plan: Plan, checkpoints: Sequence[int]) -> pd.DataFrame:
    """Per language and domain (``group``), the share of its available tokens read by each global step in
    ``checkpoints``: columns ``step``, ``group``, ``tokens_read``, ``available``, ``share``."""
    reads = pd.concat([pack_reads(cfg, plan) for cfg in configs], ignore_index=True)
    reads["group"] = reads["lang"] + "/" + reads["domain"]
    sources = plan_table.source_frame(plan)
    available = (
        (sources["lang"] + "/" + sources["domain"]).to_frame("group").assign(available=sources["available"])
    )
    available = available.groupby("group")["available"].sum()
    rows = []
    for step in sorted(checkpoints):
        read = reads[reads["step"] <= step].groupby("group")["tokens"].sum()
        for group, total in available.items():
            tokens = int(read.get(group, 0))
            rows.append((step, group, tokens, int(total), tokens / total if total else 0.0))
    return pd.DataFrame(rows, columns=["step", "group", "tokens_read", "available", "share"])
