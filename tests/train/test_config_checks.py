"""Trainer-config problems stop ``snakemake -n`` and ``snakemake plan`` before any job, naming the config's
keys and the base config's, with values that would work: the batch against the GPUs (``train.gpus_per_node``'s
default 8 among them), the base config's ``gradient_accumulation_steps``, ``max_position_embeddings``
against ``training.seq_length``; for GPT-NeoX and Megatron-LM (train/configs/preflight.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.utils import REPO, Workflow, tail
from workflow_scripts.train.configs import preflight

MEGATRON = {"trainer": "megatron", "base_config": "config/train/megatron-sample.args"}
NEOX_BASE = "config/train/neox-sample.yml"  # micro batch 4, gradient_accumulation_steps 2, 512 positions


@pytest.fixture(autouse=True)
def in_the_checkout(monkeypatch: pytest.MonkeyPatch) -> None:
    """The config's paths (``train.base_config``) are the checkout's, as Snakemake reads them."""
    monkeypatch.chdir(REPO)


def sample(**sections: dict) -> dict:
    """The sample's config with ``sections`` laid over it, as Snakemake lays a second --configfile."""
    config = yaml.safe_load((REPO / "config" / "sample.yaml").read_text())
    for name, section in sections.items():
        config[name] = {**config.get(name, {}), **section}
    return config


CASES = {  # what a user changes on the sample -> what the error must say
    "neox-gpus-default": (
        {"train": {"gpus_per_node": 8}},
        [
            "training.global_batch_size 8 must equal train_micro_batch_size_per_gpu 4 x "
            "gradient_accumulation_steps 2 x data parallel 8 = 64",
            "train.nodes 1 x train.gpus_per_node 8 / (model_parallel_size 1 x pipe_parallel_size 1)",
            NEOX_BASE,
            "Would work: training.global_batch_size 64, or train.gpus_per_node 1",
        ],
    ),
    "neox-accumulation": (
        {"training": {"global_batch_size": 16}},
        [
            "training.global_batch_size 16 must equal train_micro_batch_size_per_gpu 4 x "
            "gradient_accumulation_steps 2 x data parallel 1 = 8",
            "gradient_accumulation_steps 4",
            "train_micro_batch_size_per_gpu 8",
            "train.gpus_per_node 2",
        ],
    ),
    "neox-positions": (
        {"training": {"seq_length": 1024}},
        [
            f"{NEOX_BASE}: max_position_embeddings 512 < training.seq_length 1024",
            "Would work: max_position_embeddings 1024, or training.seq_length 512",
        ],
    ),
    "megatron-gpus-default": (
        {"train": {**MEGATRON, "gpus_per_node": 8}},
        [
            "training.global_batch_size 8 must be a multiple of --micro-batch-size 4 x data parallel 8 = 32",
            "train.nodes 1 x train.gpus_per_node 8 / (--tensor-model-parallel-size 1 x "
            "--pipeline-model-parallel-size 1 x --context-parallel-size 1)",
            "training.global_batch_size 32, or train.gpus_per_node 2, or --micro-batch-size 1",
        ],
    ),
    "megatron-positions": (
        {"train": MEGATRON, "training": {"seq_length": 1024}},
        ["--max-position-embeddings 512 < training.seq_length 1024", "--max-position-embeddings 1024"],
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_a_dry_run_names_the_keys_and_a_value_that_works(workflow: Workflow, case: str) -> None:
    override, messages = CASES[case]
    (workflow.root / "user.yaml").write_text(yaml.safe_dump(override))
    proc = workflow.run("-n", "--cores", "1", "--configfile", "config/sample.yaml", "user.yaml")
    assert proc.returncode != 0, tail(proc.output)
    assert "Traceback" not in proc.output, tail(proc.output)
    for message in messages:
        assert message in proc.output, tail(proc.output)
    assert problem(override) in proc.output  # the same check as the unit tests below


def test_snakemake_plan_stops_before_any_job(workflow: Workflow) -> None:
    (workflow.root / "user.yaml").write_text(yaml.safe_dump({"train": {"gpus_per_node": 8}}))
    proc = workflow.run("plan", "--cores", "1", "--configfile", "config/sample.yaml", "user.yaml")
    assert proc.returncode != 0 and "train.gpus_per_node 8" in proc.output, tail(proc.output)
    assert not (workflow.root / "results").exists()  # not even the sample was generated


def test_settings_that_agree_pass_the_dry_run(workflow: Workflow) -> None:
    """Two GPUs, twice the batch: 16 = micro batch 4 x gradient_accumulation_steps 2 x data parallel 2."""
    override = {"train": {"gpus_per_node": 2}, "training": {"global_batch_size": 16}}
    (workflow.root / "user.yaml").write_text(yaml.safe_dump(override))
    workflow.ok("-n", "--cores", "1", "--configfile", "config/sample.yaml", "user.yaml")
    assert problem(override) is None


def problem(override: dict) -> str | None:
    return preflight.problem(sample(**override))


def test_the_sample_and_a_run_without_a_base_config_pass() -> None:
    assert preflight.check(sample()) == {
        "tp": 1,
        "pp": 1,
        "cp": 1,
        "dp": 1,
        "micro": 4,
        "accumulation": 2,
    }
    assert preflight.check(sample(train={"base_config": None, "gpus_per_node": 8})) is None


def test_a_phase_override_of_the_batch_is_checked_too() -> None:
    """A phase's keys win over the base config's in its packs: they must split the batch as well."""
    phase = {"phase_overrides": {"cooldown": {"train_micro_batch_size_per_gpu": 8}}}
    assert problem({"train": phase}) == (
        "training.global_batch_size 8 must equal train_micro_batch_size_per_gpu 8 x "
        f"gradient_accumulation_steps 2 x data parallel 1 = 16 ({NEOX_BASE} with "
        "train.phase_overrides.cooldown; data parallel = train.nodes 1 x train.gpus_per_node 1 / "
        "(model_parallel_size 1 x pipe_parallel_size 1)), as GPT-NeoX requires. Would work: "
        "training.global_batch_size 16, or train_micro_batch_size_per_gpu 4, or gradient_accumulation_steps 1"
    )
    assert problem({"train": {"first_pack": {"seq_length": 256}}}) == (
        f"{NEOX_BASE} with train.first_pack: seq_length 256, but the plan uses training.seq_length 512: "
        "leave seq_length out (the workflow sets it from training.seq_length), or set it to 512"
    )


def test_a_missing_base_config_is_named() -> None:
    assert problem({"train": {"base_config": "config/train/nothing.yml"}}) == (
        "train.base_config: config/train/nothing.yml is not a file"
    )


def test_the_model_of_init_from_hf_gives_the_positions(tmp_path: Path) -> None:
    """With ``train.init_from.hf`` the model's ``max_position_embeddings`` is the one the trainer gets."""
    llama = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 176}
    llama |= {"num_attention_heads": 4, "num_key_value_heads": 2, "rms_norm_eps": 1e-5, "rope_theta": 1e4}
    llama |= {"max_position_embeddings": 256, "tie_word_embeddings": False}
    (tmp_path / "config.json").write_text(json.dumps(llama))
    start = {"base_config": "config/train/neox-from-hf.yml", "init_from": {"hf": str(tmp_path)}}
    assert problem({"train": start, "training": {"seq_length": 256}}) is None
    assert problem({"train": start}) == (
        "training.seq_length 512 is longer than the model's max_position_embeddings 256 "
        f"({tmp_path}/config.json)"
    )
