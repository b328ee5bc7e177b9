"""Steps and documents both ways (lineage/steps.py), against the reference trainer's own samples: every
step's documents are those whose tokens its samples hold, and a document's steps are the steps that list it.
A Megatron-LM pack is read in Megatron-LM's order, in its own phase. GPT-NeoX's and Megatron-LM's own code
give the same: tests/train/test_lineage_compat.py."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from tests.train.conftest import model  # noqa: F401 (a fixture)
from tests.train.reference.conftest import BATCH, SEQ, eod, make_pack, pattern_docs, write_config  # noqa: F401
from tests.train.reference.test_megatron_config import write_args
from workflow_scripts.cli import main as snakepack
from workflow_scripts.core.cli import UserError
from workflow_scripts.core.indexed_dataset import IndexedDataset
from workflow_scripts.lineage.steps import StepMap, pack_config
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


@pytest.fixture(scope="module")
def megatron_pack(tmp_path_factory: pytest.TempPathFactory, model: Path, eod: int) -> Path:  # noqa: F811
    """One pack of 300 documents under a Megatron-LM arguments file of two phases (global steps 1..4 and
    5..N): the second phase reads every sample of one epoch, which GPT-NeoX's 1.005 surplus could not."""
    root = tmp_path_factory.mktemp("megatron-lineage")
    prefix = make_pack(root / "m" / "m", pattern_docs(300, 7, eod))
    one_epoch = data.IndexSpec(prefix, "train", 0, SEQ, 1234, "packed").one_epoch_samples
    end = 4 + one_epoch // BATCH
    return write_args(root / "m.args", model, prefix, root / "ckpt", run=f"--train-samples {end * BATCH}")


def test_a_megatron_lm_pack_is_read_in_megatron_lms_order(megatron_pack: Path) -> None:
    """The second phase's samples are the reference trainer's in Megatron-LM's order: exactly
    ``train_iters x batch`` samples asked, where GPT-NeoX would ask 0.5% more and read a second epoch."""
    cfg = load_config([str(megatron_pack)], pack_phase=1)
    assert (cfg.trainer, cfg.offset) == ("megatron", 4)
    (spec,) = data.run_train_specs(cfg)
    assert spec.num_samples == cfg.train_iters * cfg.batch > spec.one_epoch_samples - cfg.batch
    with pytest.raises(data.EpochError, match="GPT-NeoX would read a second"):
        data.run_train_specs(dataclasses.replace(cfg, trainer="neox"))
    spec.ensure()
    dataset, pack = data.GPTDataset(spec), IndexedDataset(cfg.train_paths[0])
    steps = StepMap(cfg)
    for k in range(cfg.train_iters * cfg.batch):
        tokens, real = dataset.sample(k)
        read = np.concatenate([np.asarray(pack[d])[a:b] for _, d, a, b in steps.sample_spans(k)])
        assert np.array_equal(read.astype(np.int64), tokens[:real]), k
    first = steps.first_steps(0)
    assert first.min() == 5 and first.max() <= cfg.end  # one epoch: every document is read in the phase


def test_megatron_lm_shuffles_a_short_final_epoch_apart(megatron_pack: Path) -> None:
    """Three epochs of which the last gives under 80% of an epoch: its documents come after the first two
    epochs' (each epoch's documents once), its samples are shuffled among themselves."""
    prefix = load_config([str(megatron_pack)], pack_phase=1).train_paths[0]
    per_epoch = data.IndexSpec(prefix, "train", 0, SEQ, 1234, "packed").one_epoch_samples
    spec = data.IndexSpec(prefix, "train", 2 * per_epoch + per_epoch // 2, SEQ, 1234, "packed", "megatron")
    assert spec.epochs() == 3
    built = spec.build()
    doc, shuffle, documents = built["doc"], built["shuffle"], len(spec.lengths)
    assert sorted(doc[-documents:]) == list(range(documents))  # the last epoch, whole, at the end
    before = data.final_epoch_start(spec.tokens, SEQ, spec.num_samples, 3)
    assert before is not None and sorted(shuffle[:before]) == list(range(before))
    neox = dataclasses.replace(spec, trainer="neox").build()
    assert not np.array_equal(neox["doc"], doc)  # GPT-NeoX shuffles all three epochs together
    whole = dataclasses.replace(spec, num_samples=3 * per_epoch - 2)  # a full last epoch: shuffled together
    assert data.final_epoch_start(spec.tokens, SEQ, whole.num_samples, 3) is None
    assert np.array_equal(whole.build()["doc"], neox["doc"])


def test_a_megatron_lm_file_is_read_in_its_packs_phase(megatron_pack: Path) -> None:
    cfg = load_config([str(megatron_pack)])  # no checkpoint: the first phase
    assert (cfg.offset, cfg.end) == (0, 4)
    with pytest.raises(UserError, match="--plan says which"):
        pack_config(str(megatron_pack), None)
    with pytest.raises(UserError, match="no phase 2"):
        load_config([str(megatron_pack)], pack_phase=2)
