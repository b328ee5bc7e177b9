"""Models in and out through the workflow: a tiny Hugging Face LLaMA made here is imported,
continued-pretrained over the sample's packs by the segment chain on the local Slurm, and exported, with
GPT-NeoX's files and with Megatron-LM's (torch_dist); ``transformers`` loads the export, its validation
loss is the reference trainer's at that checkpoint and lower than the start's. A model whose tokenizer or
shape is not the data's and the base config's stops the plan, naming both.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
import yaml

from tests.utils import Workflow, hf_folder, tail, write_jsonl
from tests.workflow.test_slurm import slurm_cluster  # noqa: F401 (a fixture)
from tests.workflow.test_train_slurm import CONFIG, SLURM
from workflow_scripts.cli import main as snakepack
from workflow_scripts.core.fsio import read_json

pytestmark = pytest.mark.workflow  # the test tiers: tests/conftest.py

TRAIN = yaml.safe_load(CONFIG)["train"] | {"base_config": "config/train/neox-from-hf.yml"}
ARGS = ("--configfile", "config/sample.yaml", "train.yaml", "hf.yaml")


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Workflow:
    """The sample's packs built locally, and a tiny LLaMA whose tokenizer is the data's in ``hf/``."""
    workflow = Workflow(tmp_path_factory.mktemp("models") / "wf")
    (workflow.root / "train.yaml").write_text(CONFIG)
    (workflow.root / "hf.yaml").write_text(yaml.safe_dump({}))
    workflow.ok("--profile", "profiles/local", "--cores", "2", *ARGS, timeout_s=1200)
    spm = workflow.root / "results/tokenizer/spm.model"
    hf_folder(workflow.root / "hf", spm, max_position_embeddings=512)
    return workflow


def use_model(workflow: Workflow, hf: str, **train) -> None:
    train = TRAIN | {"init_from": {"hf": hf}} | train
    (workflow.root / "hf.yaml").write_text(yaml.safe_dump({"train": train}))


def other_tokenizer(root: Path) -> Path:
    words = ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven"]
    root.mkdir()
    texts = [" ".join(words[i % 9 :] + words[: i % 4]) for i in range(300)]
    src = write_jsonl(root / "c.jsonl", [{"text": t} for t in texts])
    args = [str(src), "--model-prefix", str(root / "spm"), "--vocab-size", "300", "--max-sentences", "1000"]
    assert snakepack(["train-tokenizer", *args]) == 0
    return root / "spm.model"


def test_a_model_whose_tokenizer_is_not_the_datas_stops_the_plan(data, tmp_path):
    wf = data.clone(tmp_path / "wf")
    hf_folder(wf.root / "other", other_tokenizer(tmp_path / "tok"))
    use_model(wf, "other")
    proc = wf.run("-n", "train", *ARGS)
    assert proc.returncode != 0
    both = "the model's tokenizer other/tokenizer.model and the data's results/tokenizer/spm.model"
    assert both in proc.output
    assert "vocab_size 300 < the data's 8000 pieces" in proc.output
    assert not (wf.root / "results/train/import").exists()


def test_a_base_config_key_the_model_sets_otherwise_is_an_error_naming_both(data, tmp_path):
    wf = data.clone(tmp_path / "wf")
    use_model(wf, "hf", base_config="config/train/neox-sample.yml")  # its own shape: 2 layers, learned, ...
    proc = wf.run("-n", "train_configs", *ARGS)  # refused when the Snakefile is parsed (configs/preflight.py)
    assert proc.returncode != 0
    assert "neox-sample.yml: pos_emb 'learned', but the model hf/config.json gives 'rotary'" in proc.output


def validation_batches(pack_config: Path):
    """The reference trainer's validation micro batches for ``pack_config`` (its evaluation's samples; a
    Megatron-LM pack's as train-eval reads it, the whole run without phases)."""
    from workflow_scripts.train.reference import data as ref_data
    from workflow_scripts.train.reference.config import load_config
    from workflow_scripts.train.reference.masks import make_batch

    cfg = load_config([str(pack_config)], evaluation=pack_config.suffix == ".args")
    valid = ref_data.run_valid(cfg, [ref_data.GPTDataset(s) for s in ref_data.run_valid_specs(cfg)])
    for it in range(min(cfg.eval_iters, len(valid) // cfg.batch)):
        for j in range(cfg.accumulation):
            start = it * cfg.batch + j * cfg.micro
            yield make_batch(*valid.batch(range(start, start + cfg.micro)), cfg.eod_id)


def hf_valid_loss(hf_dir: Path, pack_config: Path) -> float:
    """``transformers``' loss on the reference trainer's validation batches, averaged as it averages."""
    import transformers

    from workflow_scripts.train.reference.model import masked_mean, token_losses

    auto = transformers.AutoModelForCausalLM
    model = auto.from_pretrained(hf_dir, dtype=torch.float32, local_files_only=True)
    losses = []
    with torch.no_grad():
        for batch in validation_batches(pack_config):
            logits = model.eval()(batch.tokens).logits
            losses.append(float(masked_mean(token_losses(logits, batch.labels), batch.loss_mask)))
    return sum(losses) / len(losses)


@pytest.mark.slurm
def test_a_hugging_face_llama_is_continued_pretrained_and_exported(slurm_cluster, data, tmp_path):  # noqa: F811
    import transformers

    wf = data.clone(tmp_path / "wf")
    use_model(wf, "hf")
    output = wf.ok(*SLURM, "train", *ARGS, timeout_s=1500)
    train = wf.root / "results/train"
    imported = read_json(train / "import/import.json")
    assert imported["ok"] and imported["pipe"] and imported["padded_vocab_size"] == 8064, imported
    first = yaml.safe_load((train / "warmup_0/warmup_0.yml").read_text())
    assert first["finetune"] is True and first["norm"] == "rmsnorm" and first["num_kv_heads"] == 2
    assert "train.init_from.hf" in read_json(train / "warmup_0/keys.json")["set"]["num_layers"]["why"]
    for pack, end in (("warmup_0", 4), ("main_1", 20)):
        check = read_json(train / f"export/{pack}.json")
        assert check["ok"] and check["logits"]["max_abs"] < 1e-3, check
        assert check["checkpoint"].endswith(f"global_step{end}") and not check["tokenizer_differs"]
        assert check["vocab_size"] == 8064  # GPT-NeoX's padded vocabulary, as its own converter keeps it
    out = train / "export/main_1"
    assert transformers.AutoTokenizer.from_pretrained(out, local_files_only=True).eos_token == "<|endoftext|>"
    last = yaml.safe_load((train / "main_1/main_1.yml").read_text())
    rows = [r for r in _rows(train / "evals.csv") if r["valid_loss"]]
    evals = {int(r["iteration"]): float(r["valid_loss"]) for r in rows}
    exported = hf_valid_loss(out, train / "main_1/main_1.yml")
    assert abs(exported - evals[20]) < 1e-4, (exported, evals)  # transformers' loss = the reference's
    start = hf_valid_loss(wf.root / "hf", train / "main_1/main_1.yml")
    assert exported < start - 0.5, (exported, start)  # it learned from the packs
    assert last["finetune"] is False
    dry = wf.ok("-n", "train", *ARGS)
    assert "Nothing to be done" in dry, tail(output + dry)
    use_model(wf, "hf", export={"vocab": "model", "shard_mb": 1})  # docs/reruns.md: an export setting
    assert planned_jobs(wf.ok("-n", "train", *ARGS)) == {"train_export": 2, "train": 1}


MEGATRON = {"trainer": "megatron", "base_config": "config/train/megatron-from-hf.args"}


def test_megatron_lm_from_a_hugging_face_llama_is_planned_import_start_segments_exports(data, tmp_path):
    """train.init_from.hf with trainer: megatron: the plan has the import (iter_0000000, --trainer megatron
    at the base file's TP and divisor), the fine-tune start linking it, the segments and both packs' exports
    from their iter_NNNNNNN ends with the packs' arguments."""
    wf = data.clone(tmp_path / "wf")
    use_model(wf, "hf", **MEGATRON)
    wf.ok("--profile", "profiles/local", "--cores", "2", "train_configs", *ARGS)
    dry = wf.ok("-n", "--printshellcmds", "train", *ARGS)
    planned = planned_jobs(dry)
    assert planned["train_import"] == planned["train_finetune_start"] == 1 and planned["train_export"] == 2
    assert planned["train_segment"] == 5, planned
    hf_import = "--out results/train/import/iter_0000000 --check results/train/import/import.json"
    assert f"{hf_import} --trainer megatron --tp 1 --divisible-by 128" in dry
    assert "--start results/train/import/iter_0000000 --trainer megatron --last-step 20" in dry
    for pack, end in (("warmup_0", 4), ("main_1", 20)):
        export = (
            f"--checkpoint results/train/checkpoints/iter_{end:07d} --config results/train/{pack}/{pack}.args"
        )
        assert export in dry, export


@pytest.mark.slurm
def test_a_hugging_face_llama_is_continued_on_megatron_lm_and_exported(slurm_cluster, data, tmp_path):  # noqa: F811
    """The same with train.trainer: megatron: the import is Megatron-LM's torch_dist iter_0000000, the first
    pack fine-tunes from it (--finetune: the count restarts at 0), the packs' iter_NNNNNNN ends are exported
    from their torch_dist files with the packs' arguments. The reference trainer stands in for Megatron-LM."""
    import transformers

    wf = data.clone(tmp_path / "wf")
    use_model(wf, "hf", **MEGATRON)
    output = wf.ok(*SLURM, "train", *ARGS, timeout_s=1500)
    train = wf.root / "results/train"
    imported = read_json(train / "import/import.json")
    assert imported["ok"] and imported["padded_vocab_size"] == 8064, imported  # 8000 to a multiple of 128
    assert (train / "import/iter_0000000/metadata.json").is_file()  # torch_dist's
    assert (train / "checkpoints/iter_0000000").resolve() == (train / "import/iter_0000000").resolve()
    first = (train / "warmup_0/warmup_0.args").read_text().splitlines()
    for line in ("--finetune", "--ckpt-format torch_dist", "--normalization RMSNorm", "--num-query-groups 2"):
        assert line in first, line
    assert "--finetune" not in (train / "main_1/main_1.args").read_text().splitlines()
    assert "train.init_from.hf" in read_json(train / "warmup_0/keys.json")["set"]["ffn_hidden_size"]["why"]
    for pack, end in (("warmup_0", 4), ("main_1", 20)):
        check = read_json(train / f"export/{pack}.json")
        assert check["ok"] and check["logits"]["max_abs"] < 1e-3, check
        assert check["checkpoint"].endswith(f"iter_{end:07d}") and not check["tokenizer_differs"], check
    out = train / "export/main_1"
    assert transformers.AutoTokenizer.from_pretrained(out, local_files_only=True).eos_token == "<|endoftext|>"
    rows = [r for r in _rows(train / "evals.csv") if r["valid_loss"]]
    evals = {int(r["iteration"]): float(r["valid_loss"]) for r in rows}
    exported = hf_valid_loss(out, train / "main_1/main_1.args")
    start = hf_valid_loss(wf.root / "hf", train / "main_1/main_1.args")
    assert exported < start - 0.3, (exported, start)  # it learned from the packs (8.997 -> 8.547 measured)
    assert abs(exported - evals[20]) < 1e-4, (exported, evals)  # transformers' loss = the reference's
    dry = wf.ok("-n", "train", *ARGS)
    assert "Nothing to be done" in dry, tail(output + dry)


def planned_jobs(dry_run: str) -> dict[str, int]:
    """The job counts of a dry run's "Job stats" table, less the total."""
    table = dry_run.split("Job stats:", 1)[1].split("total", 1)[0]
    return {name: int(count) for name, count in re.findall(r"^(\w+)\s+(\d+)$", table, re.M)}


def _rows(path: Path) -> list[dict[str, str]]:
    import csv

    with open(path, newline="") as f:
        return list(csv.DictReader(f))
