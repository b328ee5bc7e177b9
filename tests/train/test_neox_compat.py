"""Generated GPT-NeoX configs load in GPT-NeoX's own argument class, when its checkouts are given.

Set ``SNAKEPACK_COMPAT_PYTHON`` (a Python with GPT-NeoX's requirements: torch, DeeperSpeed, ...) and
``SNAKEPACK_NEOX_GIT`` (upstream) and/or ``SNAKEPACK_NEOX_FORK_GIT`` (tilde-nlp/llm-gpt-neox, the LUMI fork
with ``iteration_offset``). Without them the tests are skipped, and the skip says what is missing.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.train.test_configs import BASE, SEED_000
from tests.utils import export_git
from workflow_scripts.train import configs, lint
from workflow_scripts.train.settings import TrainSettings

PYTHON = os.environ.get("SNAKEPACK_COMPAT_PYTHON", "")
TREES = {"upstream": "SNAKEPACK_NEOX_GIT", "fork": "SNAKEPACK_NEOX_FORK_GIT"}

LOAD = r"""
import contextlib, io, json, sys
from megatron.neox_arguments import NeoXArgs
with contextlib.redirect_stdout(io.StringIO()):
    a = NeoXArgs.from_ymls([sys.argv[1]], overwrite_values={"global_num_gpus": int(sys.argv[2])})
keys = ["train_iters", "train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
        "checkpoint_factor", "exit_interval", "seq_length", "train_data_paths", "valid_data_paths"]
extra = [k for k in ("iteration_offset",) if hasattr(a, k)]
print(json.dumps({k: getattr(a, k) for k in keys + extra}))
"""


def tree(kind: str, root: Path) -> Path:
    missing = [
        v for v in ("SNAKEPACK_COMPAT_PYTHON", TREES[kind]) if not os.path.exists(os.environ.get(v, "/-"))
    ]
    if missing:
        pytest.skip(f"GPT-NeoX ({kind}) NeoXArgs check NOT RUN: set {' and '.join(missing)}")
    return export_git(os.environ[TREES[kind]], ["megatron"], root / kind)


@pytest.mark.parametrize("kind", ["fork", "upstream"])
def test_generated_config_loads_in_neoxargs(
    kind: str,
    model: Path,
    tmp_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    src = tree(kind, tmp_path_factory.getbasetemp() / "neox")
    base = tmp_path / "base.yml"
    base.write_text(
        yaml.safe_dump(
            {
                **BASE,
                "num_layers": 2,
                "hidden_size": 64,
                "num_attention_heads": 4,
                "max_position_embeddings": 8192,
            }
        )
    )
    merged = tmp_path / "merged"
    plan = {
        "seq_length": 8192,
        "global_batch_size": 576,
        "packs": [
            {
                "name": "U1_1",
                "phase": "U1",
                "train_iters": 29640,
                "iteration_offset": 2000,
                "tokens": 1,
                "merged_prefix": str(merged / "U1_1" / "U1_1"),
            }
        ],
        "validation": [{"name": "valid_en", "merged_prefix": str(merged / "valid_en" / "valid_en")}],
    }
    settings = TrainSettings.from_config({**SEED_000, "base_config": str(base)})
    signature = {"prefixes": [{"identity": {"tokenizer": {"eod_id": 3}}}]}
    configs.write_pack_config(
        plan, signature, "U1_1", str(base), settings, str(model), str(tmp_path / "t"), str(tmp_path / "c"), 1
    )
    config = yaml.safe_load((tmp_path / "t" / "U1_1" / "U1_1.yml").read_text())
    if kind == "upstream":  # upstream GPT-NeoX has no iteration_offset: the LUMI fork's key
        config = {k: v for k, v in config.items() if k not in lint.trainer_keys("neox")["fork_only"]}
    path = tmp_path / "final.yml"
    path.write_text(yaml.safe_dump(config))
    gpus = str(settings.nodes * settings.gpus_per_node)
    out = subprocess.run(
        [PYTHON, "-c", LOAD, str(path), gpus],
        cwd=src,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(src)},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    loaded = json.loads(out.stdout.strip().splitlines()[-1])
    assert loaded["train_iters"] == 29640 and loaded["train_batch_size"] == 576
    assert loaded["gradient_accumulation_steps"] * loaded["train_micro_batch_size_per_gpu"] * 192 == 576
    assert (loaded["checkpoint_factor"], loaded["exit_interval"]) == (450, 8550)
    assert loaded["valid_data_paths"] == [str(merged / "valid_en" / "valid_en")]
    if kind == "fork":
        assert loaded["iteration_offset"] == 2000
