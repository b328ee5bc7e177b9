"""The sample end to end with each tokenizer kind: a byte-level BPE ``tokenizer.json`` the workflow trains
(``tokenizer.kind: hf-bpe``, GPT-NeoX's ``HFTokenizer``), then the same BPE as a GPT-2 vocab/merges pair
(Megatron-LM's ``GPT2BPETokenizer``), each through tokenize, count, plan, configs and a trained pack; and a
Hugging Face model with that ``tokenizer.json`` in (``train.init_from.hf``) and out (``train.export``)."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.utils import REPO, Workflow, gpt2_pair, hf_folder
from workflow_scripts.core.fsio import read_json

pytestmark = pytest.mark.workflow  # the test tiers: tests/conftest.py

PACK = "results/train/warmup_0/done.json"  # the first pack trained by the reference trainer


def run(workflow: Workflow, *config: str) -> None:
    workflow.ok(PACK, "--profile", "profiles/local", "--cores", "2", "--config", *config, timeout_s=900)
    assert "Nothing to be done" in workflow.ok(PACK, "-n", "--config", *config)


def tokenized(workflow: Workflow) -> dict[str, bytes]:
    tok = workflow.root / "results" / "tokenized"
    files = sorted(tok.glob("*_text_document.bin")) + sorted(tok.glob("*_text_document.idx"))
    return {p.name: p.read_bytes() for p in files}


@pytest.fixture(scope="module")
def hf_run(tmp_path_factory: pytest.TempPathFactory) -> Workflow:
    workflow = Workflow(tmp_path_factory.mktemp("hf") / "wf")
    run(workflow, 'tokenizer={"kind": "hf-bpe"}')
    return workflow


def test_a_trained_tokenizer_json_runs_the_sample_and_a_pack(hf_run: Workflow) -> None:
    results = hf_run.root / "results"
    model = results / "tokenizer" / "tokenizer.json"
    assert not (results / "tokenizer" / "spm.model").exists()
    config = yaml.safe_load((results / "train" / "warmup_0" / "warmup_0.yml").read_text())
    assert (config["tokenizer_type"], config["vocab_file"]) == ("HFTokenizer", str(model))
    signature = read_json(results / "tokenized" / "signature.json")
    identities = {json.dumps(e["identity"]["tokenizer"], sort_keys=True) for e in signature["prefixes"]}
    (identity,) = map(json.loads, identities)
    assert identity["tokenizer_sha256"] == hashlib.sha256(model.read_bytes()).hexdigest()
    assert identity["eod_id"] == 0  # <|endoftext|>, the first special token
    prefix = next(iter(sorted((results / "tokenized").glob("en_*_text_document.bin")))).with_suffix("")
    inspect = [sys.executable, "-m", "workflow_scripts", "inspect", str(prefix), "-n", "1"]
    shown = subprocess.run(
        [*inspect, "--tokenizer-model", str(model)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert shown.splitlines()[2].strip() and "<|endoftext|>" in shown  # the text, its EOD shown as itself
    done = read_json(results / "train" / "warmup_0" / "done.json")
    assert done  # the reference trainer read the HFTokenizer config and finished the pack


def test_the_same_bpe_as_a_gpt2_pair_gives_the_same_tokens_under_megatron(
    hf_run: Workflow, tmp_path: Path
) -> None:
    vocab, merges = gpt2_pair(hf_run.root / "results" / "tokenizer" / "tokenizer.json", tmp_path / "gpt2")
    workflow = Workflow(tmp_path / "wf")
    train = {"trainer": "megatron", "base_config": "config/train/megatron-sample.args"}
    config = (f"tokenizer={json.dumps({'model': str(vocab)})}", f"train={json.dumps(train)}")
    run(workflow, *config)
    assert tokenized(workflow) == tokenized(hf_run)  # same vocabulary and merges: the same bytes
    args = (workflow.root / "results" / "train" / "warmup_0" / "warmup_0.args").read_text().splitlines()
    for line in ["--tokenizer-type GPT2BPETokenizer", f"--vocab-file {vocab}", f"--merge-file {merges}"]:
        assert line in args, line
    merges.write_text(merges.read_text() + "\n")  # the second file is the tokenizer's too: it reruns
    planned = workflow.ok(PACK, "-n", "--config", *config)
    assert re.search(r"^tokenize\s+\d+$", planned, re.M), planned[-3000:]


def test_a_model_with_the_tokenizer_json_goes_in_and_out(hf_run: Workflow, tmp_path: Path) -> None:
    import transformers

    workflow = hf_run.clone(tmp_path / "wf")
    shutil.rmtree(workflow.root / "results" / "train")  # a new run: the model's, not the pack trained above
    model = workflow.root / "results" / "tokenizer" / "tokenizer.json"
    hf_folder(workflow.root / "hf", model, max_position_embeddings=512)
    train = {"base_config": "config/train/neox-from-hf.yml", "init_from": {"hf": "hf"}}
    config = ('tokenizer={"kind": "hf-bpe"}', f"train={json.dumps(train)}")
    export = "results/train/export/warmup_0"
    workflow.ok(export, "--profile", "profiles/local", "--cores", "2", "--config", *config, timeout_s=900)
    assert read_json(workflow.root / "results/train/import/import.json")["ok"]
    check = read_json(f"{workflow.root / export}.json")
    assert check["ok"] and not check["tokenizer_differs"] and check["tokenizer_from"] == "hf", check
    tokenizer = transformers.AutoTokenizer.from_pretrained(workflow.root / export, local_files_only=True)
    assert tokenizer.eos_token == "<|endoftext|>" and tokenizer.eos_token_id == 0
    assert "Nothing to be done" in workflow.ok(export, "-n", "--config", *config)
