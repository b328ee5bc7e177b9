"""Steps and documents both ways (lineage/steps.py), against the reference trainer's own samples: every
step's documents are those whose tokens its samples hold, and a document's steps are the steps that list it.
GPT-NeoX's own code gives the same: tests/train/test_lineage_compat.py."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from tests.train.conftest import model  # noqa: F401 (a fixture)
from tests.train.reference.conftest import SEQ, eod, make_pack, pattern_docs, write_config  # noqa: F401
from workflow_scripts.cli import main as snakepack
from workflow_scripts.core.cli import UserError
from workflow_scripts.core.indexed_dataset import IndexedDataset
from workflow_scripts.lineage.steps import StepMap
from workflow_scripts.train.reference import data
from workflow_scripts.train.reference.config import load_config

pytestmark = pytest.mark.fast


@pytest.fixture(scope="module")
def two_paths(tmp_path_factory: pytest.TempPathFactory, model: Path, eod: int) -> Path:  # noqa: F811
    """A pack of two paths (weights 2:1), 60 iterations of 4 samples, at global steps 101..160."""
    root = tmp_path_factory.mktemp("lineage")
    paths = [make_pack(root / name / name, pattern_docs(300, seed, eod)) for seed, name in enumerate("ab")]
    return write_config(
        root / "pack.yml",
        model,
        train_data_paths=paths,
        train_data_weights=[2.0, 1.0],
        train_iters=60,
        iteration_offset=100,
        save=str(root / "checkpoints"),
        load=str(root / "checkpoints"),
    )


def test_each_steps_documents_and_each_documents_steps_agree(two_paths: Path) -> None:
    cfg = load_config([str(two_paths)])
    steps = StepMap(cfg)
    per_step = cfg.batch * (cfg.seq_length + 1)  # packed samples of seq_length + 1 tokens
    seen: dict[tuple[int, int], set[int]] = {}
    for step in range(cfg.offset + 1, cfg.end + 1):
        reads = steps.sequences(step, step)
        assert sum(r.tokens for r in reads) == per_step, step
        for r in reads:
            seen.setdefault((r.path, r.sequence), set()).add(step)
    for (path, doc), read_at in seen.items():
        assert steps.steps(path, doc) == sorted(read_at), (path, doc)
    unread = [(p, d) for p in (0, 1) for d in range(300) if (p, d) not in seen]
    assert unread and all(steps.steps(p, d) == [] for p, d in unread)  # 60 steps read part of the packs


def test_the_spans_are_the_reference_trainers_samples(two_paths: Path) -> None:
    """Each blended sample's spans, read from the packs, are the tokens the reference trainer trains on."""
    cfg = load_config([str(two_paths)])
    args = (cfg.train_iters, cfg.batch, cfg.seq_length, cfg.seed, cfg.pack_impl)
    specs = data.train_specs(cfg.name, cfg.train_paths, cfg.train_weights, *args)
    for spec in specs:
        spec.ensure()
    blend = data.Blend([data.GPTDataset(s) for s in specs], cfg.train_weights, cfg.train_iters * cfg.batch)
    packs = [IndexedDataset(p) for p in cfg.train_paths]
    steps = StepMap(cfg)
    for k in range(len(blend)):
        tokens, real = blend.sample(k)
        read = np.concatenate([np.asarray(packs[p][d])[a:b] for p, d, a, b in steps.sample_spans(k)])
        assert np.array_equal(read.astype(np.int64), tokens[:real]), k


def test_a_range_of_steps_and_the_command(two_paths: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = load_config([str(two_paths)])
    steps = StepMap(cfg)
    reads = steps.sequences(101, 104)
    assert sum(r.tokens for r in reads) == 4 * cfg.batch * (SEQ + 1)
    assert snakepack(["lineage", "--config", str(two_paths), "--steps", "101:104"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [(d["sequence"], d["tokens"]) for d in out["documents"]] == [(r.sequence, r.tokens) for r in reads]
    r = reads[0]
    (Path(cfg.save) / "global_step120").mkdir(parents=True)
    (Path(cfg.save) / "global_step100").mkdir()  # the pack before: it has not seen the document
    assert snakepack(["lineage", "--config", str(two_paths), "--doc", f"{r.path}:{r.sequence}"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["steps"] == steps.steps(r.path, r.sequence) and out["steps"][0] <= 104
    assert out["checkpoints"] == ["global_step120"]  # its first step is at most 104
    with pytest.raises(UserError, match="not one of this pack's"):
        steps.sequences(100, 101)


def test_a_megatron_config_is_refused_not_read_in_gpt_neoxs_order(two_paths: Path) -> None:
    cfg = dataclasses.replace(load_config([str(two_paths)]), trainer="megatron")
    with pytest.raises(UserError, match="Megatron-LM's sample order"):
        StepMap(cfg)
