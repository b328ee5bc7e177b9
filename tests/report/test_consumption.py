"""The consumption of each language and domain at each checkpoint, against a replay of every step's reads
(``StepMap.sequences``, one sample at a time) on packs the pack writer made from a real plan."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.datapacks.test_packer import plan_for
from tests.lineage.packs import trained_pack, write_plan
from tests.train.conftest import model  # noqa: F401 (a fixture)
from workflow_scripts.cli import main as snakepack
from workflow_scripts.core.indexed_dataset import IndexedDataset
from workflow_scripts.core.train_layout import TrainLayout
from workflow_scripts.lineage.sources import PackSources, document_of
from workflow_scripts.lineage.steps import StepMap
from workflow_scripts.report.consumption import consumption
from workflow_scripts.train.reference.config import load_config

pytestmark = pytest.mark.fast


@pytest.mark.parametrize(("shuffle", "sequences"), [(False, 1), (True, 1), (False, 2)])  # shuffled: 1 a doc
def test_each_checkpoint_counts_what_its_steps_read(
    tmp_path: Path,
    model: Path,  # noqa: F811
    shuffle: bool,
    sequences: int,
) -> None:
    plan = plan_for(tmp_path, shuffle=shuffle, sequences=sequences)
    configs, offset = [], 0
    for i in range(len(plan.packs)):
        _, config, iters = trained_pack(plan, i, model, tmp_path, offset)
        configs.append(load_config([str(config)]))
        offset += iters
    checkpoints = [1, configs[0].end - 1, configs[0].end, configs[0].end + 2, offset]
    got = consumption(configs, plan, checkpoints).set_index(["step", "group"])

    expected: dict[tuple[int, str], int] = {}
    for step in checkpoints:  # the brute force: every document any step up to this one read, counted once
        seen: set[tuple[int, int]] = set()
        tokens: dict[str, int] = {}
        for k, cfg in enumerate(configs):
            if step <= cfg.offset:
                continue
            dataset = IndexedDataset(cfg.train_paths[0])
            sources = PackSources.of_plan(plan, Path(cfg.train_paths[0]).name)
            for read in StepMap(cfg).sequences(cfg.offset + 1, min(step, cfg.end)):
                doc = document_of(dataset.doc_idx, read.sequence)
                if (k, doc) in seen:
                    continue
                seen.add((k, doc))
                row = sources.rows[int(np.searchsorted(sources.ends, doc, side="right"))]
                size = int(dataset.lengths[dataset.doc_idx[doc] : dataset.doc_idx[doc + 1]].sum())
                group = f"{row['lang']}/{row['domain']}"
                tokens[group] = tokens.get(group, 0) + size
        for group in ("de/web", "en/web"):
            expected[step, group] = tokens.get(group, 0)

    assert {k: int(v) for k, v in got["tokens_read"].items()} == expected
    assert got.loc[(offset, "de/web"), "share"] > 1  # the small German source is read in several epochs
    assert (got.groupby("group")["tokens_read"].diff().dropna() >= 0).all()


def test_the_training_report_draws_it_from_the_packs_configs_and_checkpoints(
    tmp_path: Path,
    model: Path,  # noqa: F811
) -> None:
    plan = plan_for(tmp_path, shuffle=False)
    plan_json = write_plan(plan, tmp_path / "plan.json")
    layout, save, offset = TrainLayout(str(tmp_path / "train")), tmp_path / "checkpoints", 0
    for i, pack in enumerate(plan.packs[:2]):
        config = Path(layout.config(pack.name, ".yml"))
        offset += trained_pack(plan, i, model, tmp_path, offset, config, save)[2]
    args = ["report-training", "--plan", str(plan_json), "--train-dir", layout.root]
    assert snakepack([*args, "--out-dir", str(tmp_path / "none")]) == 0
    assert not (tmp_path / "none" / "consumption.csv").read_text().strip(' "\n')  # no checkpoint yet
    for step in (3, offset):
        (save / f"global_step{step}").mkdir(parents=True)
    assert snakepack([*args, "--out-dir", str(tmp_path / "out")]) == 0
    table = pd.read_csv(tmp_path / "out" / "consumption.csv")
    assert sorted(set(table["step"])) == [3, offset] and set(table["group"]) == {"de/web", "en/web"}
    configs = [load_config([layout.config(p.name, ".yml")]) for p in plan.packs[:2]]
    expected = consumption(configs, plan, [3, offset])
    assert table["tokens_read"].tolist() == expected["tokens_read"].tolist()
    assert (tmp_path / "out" / "consumption.png").is_file()
