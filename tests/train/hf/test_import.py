"""``snakepack hf-import``: a Hugging Face LLaMA folder becomes GPT-NeoX's checkpoint (sequential or
pipeline files, any tensor-parallel size), checked by logits; a tokenizer that is not the data's stops it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from tests.utils import byte_level_bpe, hf_folder, write_jsonl
from workflow_scripts.cli import main as snakepack
from workflow_scripts.core.fsio import read_json
from workflow_scripts.train.hf import layout as hf_layout


def run_import(hf: Path, data_model: Path, out: Path, *extra: str) -> int:
    args = ["--hf", str(hf), "--tokenizer-model", str(data_model), "--out", str(out / "global_step0")]
    return snakepack(["hf-import", *args, "--check", str(out / "import.json"), *extra])


@pytest.mark.parametrize("layout", [("--tp", "1"), ("--tp", "2", "--pipe")], ids=["tp1", "tp2-pipe"])
def test_import_writes_gpt_neox_files_whose_logits_are_the_models(tmp_path, model, layout):
    hf = hf_folder(tmp_path / "hf", model)
    assert run_import(hf, model, tmp_path / "ckpt", *layout) == 0
    ckpt = tmp_path / "ckpt" / "global_step0"
    tp = int(layout[1])
    assert sorted(p.name for p in ckpt.glob("mp_rank_*")) == [
        f"mp_rank_{r:02d}_model_states.pt" for r in range(tp)
    ]
    if "--pipe" in layout:  # embedding, 2 layers, final norm, output layer: per rank
        assert len(list(ckpt.glob("layer_*-model_01-model_states.pt"))) == 5
    check = read_json(tmp_path / "ckpt" / "import.json")
    assert check["ok"] and check["logits"]["max_abs"] < 1e-4, check
    assert check["padded_vocab_size"] == {1: 384, 2: 512}[tp]  # 300 padded to a multiple of 128 x TP
    assert check["tensors"] == tp * (1 + 2 * 6 + 2)


def test_a_tokenizer_that_is_not_the_datas_stops_the_import(tmp_path, model, capsys):
    words = ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven"]
    other = tmp_path / "other"
    other.mkdir()
    src = write_jsonl(
        other / "c.jsonl", [{"text": " ".join(words[i % 9 :] + words[: i % 4])} for i in range(300)]
    )
    args = [str(src), "--model-prefix", str(other / "spm"), "--vocab-size", "300", "--max-sentences", "1000"]
    assert snakepack(["train-tokenizer", *args]) == 0
    hf = hf_folder(tmp_path / "hf", other / "spm.model")
    assert run_import(hf, model, tmp_path / "ckpt") == 2
    assert re.search(r"tokenizer\.model and the data's .* differ at \d+ of 300 ids", capsys.readouterr().err)
    assert not (tmp_path / "ckpt" / "global_step0").exists()  # nothing written


def test_the_models_end_of_document_must_be_the_datas(tmp_path, model, capsys):
    hf = hf_folder(tmp_path / "hf", model, eos_token_id=5)
    assert run_import(hf, model, tmp_path / "ckpt") == 2
    assert re.search(r"end of document is id \d+ .* eos_token_id 5", capsys.readouterr().err)


def test_a_vocabulary_past_gpt_neoxs_padding_is_refused(tmp_path, model, capsys):
    hf = hf_folder(tmp_path / "hf", model, vocab_size=400)  # the data's 300 pad to 384
    assert run_import(hf, model, tmp_path / "ckpt") == 2
    assert "vocab_size 400 does not fit the data tokenizer's 300 padded to 384" in capsys.readouterr().err


def test_gpt_neox_converters_qkv_layout_fails_the_logit_check(tmp_path, model, monkeypatch, capsys):
    """Without GQA, GPT-NeoX's convert_hf_llama_to_neox.py fuses q/k/v block-wise (test_converter_compat):
    written so, the weights are another model, and the check says so."""
    hf = hf_folder(tmp_path / "hf", model, num_key_value_heads=4)

    def block_wise(q, k, v, shape, r):
        return torch.cat([torch.chunk(t, shape.tp)[r] for t in (q, k, v)])

    monkeypatch.setattr(hf_layout, "fuse_qkv", block_wise)
    assert run_import(hf, model, tmp_path / "ckpt") == 2
    assert "logits differ by" in capsys.readouterr().err
    check = read_json(tmp_path / "ckpt" / "import.json")
    assert check["ok"] is False and check["logits"]["max_abs"] > 1e-2


@pytest.mark.parametrize("kind", ["hf", "gpt2"])
def test_a_byte_level_data_tokenizer_imports_with_its_models_tokenizer(tmp_path, bpe_models, kind):
    data = bpe_models[kind]
    hf = hf_folder(tmp_path / "hf", data)
    assert run_import(hf, data, tmp_path / "ckpt") == 0
    assert read_json(tmp_path / "ckpt" / "import.json")["ok"]


def test_a_byte_level_tokenizer_of_other_merges_stops_the_import(tmp_path, bpe_models, capsys):
    hf = hf_folder(tmp_path / "hf", bpe_models["hf"])
    other = byte_level_bpe(tmp_path / "other", ["one two three four five six seven"] * 40, vocab_size=400)
    assert run_import(hf, other, tmp_path / "ckpt") == 2
    assert re.search(r"tokenizer\.json and the data's .* differ at \d+ of \d+ ids", capsys.readouterr().err)


def test_a_data_tokenizer_without_gpt_neoxs_end_of_document_is_refused(tmp_path, bpe_models, capsys):
    data = bpe_models["llama3"]
    hf = hf_folder(tmp_path / "hf", bpe_models["hf"])
    assert run_import(hf, data, tmp_path / "ckpt") == 2
    assert "GPT-NeoX takes EOD = token_to_id('<|endoftext|>'), a token this tokenizer lacks" in (
        capsys.readouterr().err
    )


def run_megatron_import(hf: Path, data_model: Path, out: Path, *extra: str) -> int:
    args = ["--trainer", "megatron", "--hf", str(hf), "--tokenizer-model", str(data_model)]
    return snakepack(
        ["hf-import", *args, "--out", str(out / "iter_0000000"), "--check", str(out / "import.json"), *extra]
    )


@pytest.mark.parametrize("tied", [False, True])
def test_a_megatron_import_is_a_torch_dist_folder_whose_logits_are_the_models(tmp_path, model, tied):
    from workflow_scripts.train import megatron_checkpoint

    hf = hf_folder(tmp_path / "hf", model, tie_word_embeddings=tied)
    assert run_megatron_import(hf, model, tmp_path / "ckpt", "--tp", "2") == 0
    folder = tmp_path / "ckpt" / "iter_0000000"
    assert sorted(p.name for p in folder.iterdir()) == [
        ".metadata",
        "__0_0.distcp",
        "common.pt",
        "metadata.json",
    ]
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == [
        "import.json",
        "iter_0000000",
    ]  # no tracker
    check = read_json(tmp_path / "ckpt" / "import.json")
    assert check["ok"] and check["logits"]["max_abs"] < 1e-4 and check["trainer"] == "megatron", check
    assert check["padded_vocab_size"] == 512  # 300 padded to a multiple of 128 x TP 2
    assert check["tensors"] == 1 + 2 * 6 + 1 + (0 if tied else 1)
    weights = megatron_checkpoint.load_weights(str(folder))
    assert weights["embedding.word_embeddings.weight"].shape == (512, 64)
    assert ("output_layer.weight" in weights) is not tied
    common = megatron_checkpoint.load_common(str(folder))
    assert common["iteration"] == 0 and common["args"].no_save_optim and common["args"].num_query_groups == 2
    assert common["args"].make_vocab_size_divisible_by == 128


def test_a_megatron_import_with_an_unordered_qkv_fails_the_logit_check(tmp_path, model, monkeypatch, capsys):
    """The reference's [all q; all k; all v] written as Megatron's per-group order's place: another model."""
    from workflow_scripts.train.hf import megatron_layout

    hf = hf_folder(tmp_path / "hf", model)  # grouped-query attention: 4 heads, 2 groups
    monkeypatch.setattr(megatron_layout, "_qkv_to_megatron", lambda t, cfg: t.clone())
    assert run_megatron_import(hf, model, tmp_path / "ckpt") == 2
    assert "logits differ by" in capsys.readouterr().err
    assert read_json(tmp_path / "ckpt" / "import.json")["ok"] is False


def test_pipeline_files_are_gpt_neoxs_only(tmp_path, model, capsys):
    hf = hf_folder(tmp_path / "hf", model)
    with pytest.raises(SystemExit):
        run_megatron_import(hf, model, tmp_path / "ckpt", "--pipe")
    assert "--pipe: GPT-NeoX's pipeline files" in capsys.readouterr().err
