"""``snakepack hf-export``: a GPT-NeoX checkpoint of a LLaMA-shaped model back as a Hugging Face folder
(ranks merged, sharded safetensors with an index, config, generation config, tokenizer), checked by logits;
``transformers`` loads it offline and the tensors are the ones that went in."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

from tests.utils import hf_folder
from workflow_scripts.cli import main as snakepack
from workflow_scripts.core.fsio import read_json
from workflow_scripts.train.hf import config as hf_config
from workflow_scripts.train.hf import layout as hf_layout
from workflow_scripts.train.hf.start import read_config


def imported(tmp_path: Path, model: Path, tp: int, pipe: bool, **config) -> tuple[Path, Path, Path]:
    """(the Hugging Face folder, its import as global_step0, the pack config naming its model keys)."""
    hf = hf_folder(tmp_path / "hf", model, **config)
    ckpt = tmp_path / "ckpt" / "global_step0"
    args = ["--hf", str(hf), "--tokenizer-model", str(model), "--out", str(ckpt), "--tp", str(tp)]
    assert snakepack(["hf-import", *args, "--check", str(tmp_path / "import.json")] + ["--pipe"] * pipe) == 0
    keys = hf_config.neox_model_keys(read_config(str(hf)))
    pack = tmp_path / "pack.yml"
    pack.write_text(yaml.safe_dump(keys | {"seq_length": 32, "model_parallel_size": tp}), encoding="utf-8")
    return hf, ckpt, pack


def run_export(ckpt: Path, pack: Path, model: Path, out: Path, *extra: str) -> int:
    args = ["--checkpoint", str(ckpt), "--config", str(pack), "--tokenizer-model", str(model)]
    return snakepack(["hf-export", *args, "--out", str(out), "--check", f"{out}.json", *extra])


@pytest.mark.parametrize(("tp", "pipe", "tied"), [(1, False, False), (2, True, False), (2, False, True)])
def test_export_gives_back_the_models_tensors_and_loads_in_transformers(tmp_path, model, tp, pipe, tied):
    import transformers
    from safetensors.torch import load_file

    hf, ckpt, pack = imported(tmp_path, model, tp, pipe, tie_word_embeddings=tied)
    out = tmp_path / "export"
    assert run_export(ckpt, pack, model, out, "--shard-mb", "0.05", "--vocab", "model") == 0
    index = read_json(out / "model.safetensors.index.json")
    files = sorted(set(index["weight_map"].values()))
    assert len(files) > 1 and files[-1] == f"model-{len(files):05d}-of-{len(files):05d}.safetensors"
    back = {k: v for f in files for k, v in load_file(out / f).items()}
    source = load_file(hf / "model.safetensors")
    assert sorted(back) == sorted(source)
    assert all(torch.equal(back[k], source[k]) for k in source)  # HF -> TP 2 -> HF: the same tensors
    check = read_json(f"{out}.json")
    assert check["ok"] and check["logits"]["max_abs"] < 1e-4 and not check["tokenizer_differs"], check
    loaded = transformers.AutoModelForCausalLM.from_pretrained(out, local_files_only=True)
    assert loaded.config.tie_word_embeddings is tied and loaded.config.num_key_value_heads == 2
    tokenizer = transformers.AutoTokenizer.from_pretrained(out, local_files_only=True)
    assert tokenizer.eos_token_id == read_config(str(hf))["eos_token_id"]
    assert read_json(out / "generation_config.json")["eos_token_id"] == tokenizer.eos_token_id
    assert not list(tmp_path.glob("export.tmp"))


def test_the_vocabulary_keeps_gpt_neoxs_padding_unless_cut(tmp_path, model):
    import transformers

    _, ckpt, pack = imported(tmp_path, model, 2, False)
    assert run_export(ckpt, pack, model, tmp_path / "export") == 0  # GPT-NeoX's converter: padded
    loaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "export", local_files_only=True)
    assert loaded.config.vocab_size == 512 == loaded.lm_head.weight.shape[0]  # 300 padded to 128 x TP 2
    assert read_json(tmp_path / "export.json")["vocab_size"] == 512


def test_a_model_that_is_not_llama_shaped_is_refused_naming_the_key(tmp_path, model, capsys):
    _, ckpt, pack = imported(tmp_path, model, 1, False)
    pack.write_text(pack.read_text() + "norm: layernorm\n", encoding="utf-8")
    assert run_export(ckpt, pack, model, tmp_path / "export") == 2
    assert "norm: 'layernorm': a Hugging Face LLaMA needs 'rmsnorm'" in capsys.readouterr().err
    assert not (tmp_path / "export").exists()


def test_a_mapping_bug_fails_the_check_and_leaves_no_folder(tmp_path, model, capsys, monkeypatch):
    _, ckpt, pack = imported(tmp_path, model, 1, False)
    to_hf = hf_layout.to_hf

    def swapped(get, shape):  # gate and up exchanged: the classic SwiGLU conversion bug
        swap = {"gate_proj": "up_proj", "up_proj": "gate_proj"}
        for name, tensor in to_hf(get, shape):
            part = name.split(".")[-2]
            yield name.replace(part, swap.get(part, part)), tensor

    monkeypatch.setattr(hf_layout, "to_hf", swapped)
    assert run_export(ckpt, pack, model, tmp_path / "export") == 2
    assert "logits differ by" in capsys.readouterr().err
    check = read_json(tmp_path / "export.json")
    assert not check["ok"] and check["logits"]["max_abs"] > 1e-3
    assert not (tmp_path / "export").exists()


@pytest.mark.parametrize("source", [False, True], ids=["written", "from-source"])
@pytest.mark.parametrize("kind", ["hf", "gpt2"])
def test_a_byte_level_data_tokenizer_goes_out_as_the_same_tokenizer(tmp_path, bpe_models, kind, source):
    import transformers

    from workflow_scripts.tokens.kinds import TokenizerFiles

    data = bpe_models[kind]
    hf, ckpt, pack = imported(tmp_path, data, 1, False)
    out = tmp_path / "export"
    assert run_export(ckpt, pack, data, out, *(["--hf-source", str(hf)] if source else [])) == 0
    check = read_json(f"{out}.json")
    assert check["ok"] and not check["tokenizer_differs"] and check["tokenizer_texts"] == 4, check
    copied = source and kind == "hf"  # a folder of vocab.json + merges.txt alone: the data's is written
    assert check["tokenizer_from"] == str(hf if copied else data)
    tokenizer = transformers.AutoTokenizer.from_pretrained(out, local_files_only=True)
    tok = TokenizerFiles.resolve(str(data)).load()
    assert tokenizer.eos_token == "<|endoftext|>"
    assert tokenizer.eos_token_id == tok.token_id("<|endoftext|>") == read_config(str(out))["eos_token_id"]
    text = "Größe  alpha,\t\u041c\u043e\u0441\u043a\u0432\u0430 東京 <|endoftext|> 123"
    assert tokenizer.encode(text, add_special_tokens=False) == tok.plain(text)


@pytest.mark.parametrize("tied", [False, True])
def test_a_megatron_torch_dist_folder_exports_to_the_models_tensors(tmp_path, model, tied):
    """hf-import --trainer megatron at TP 2 (the vocabulary padded to 512), then hf-export of the iter_0000000
    folder: the Hugging Face tensors come back exactly."""
    import transformers
    from safetensors.torch import load_file

    hf = hf_folder(tmp_path / "hf", model, tie_word_embeddings=tied)
    ckpt = tmp_path / "ckpt" / "iter_0000000"
    args = ["--trainer", "megatron", "--hf", str(hf), "--tokenizer-model", str(model), "--tp", "2"]
    assert snakepack(["hf-import", *args, "--out", str(ckpt), "--check", str(tmp_path / "import.json")]) == 0
    keys = hf_config.neox_model_keys(read_config(str(hf)))
    pack = tmp_path / "pack.yml"
    pack.write_text(yaml.safe_dump(keys | {"seq_length": 32, "model_parallel_size": 2}), encoding="utf-8")
    out = tmp_path / "export"
    assert run_export(ckpt, pack, model, out, "--vocab", "model") == 0
    check = read_json(f"{out}.json")
    assert check["ok"] and check["trainer"] == "megatron" and check["logits"]["max_abs"] < 1e-4, check
    index = read_json(out / "model.safetensors.index.json")
    back = {k: v for f in set(index["weight_map"].values()) for k, v in load_file(out / f).items()}
    source = load_file(hf / "model.safetensors")
    assert sorted(back) == sorted(source) and all(torch.equal(back[k], source[k]) for k in source)
    assert transformers.AutoModelForCausalLM.from_pretrained(out).config.tie_word_embeddings is tied


def test_a_megatron_folder_exports_with_its_packs_megatron_arguments(tmp_path, model):
    """The pack's .args (Megatron-LM's LLaMA flags, as the reference trainer reads them) give the model."""
    from safetensors.torch import load_file

    hf = hf_folder(tmp_path / "hf", model)
    ckpt = tmp_path / "ckpt" / "iter_0000000"
    args = ["--trainer", "megatron", "--hf", str(hf), "--tokenizer-model", str(model), "--tp", "2"]
    assert snakepack(["hf-import", *args, "--out", str(ckpt), "--check", str(tmp_path / "import.json")]) == 0
    pack = tmp_path / "pack.args"
    pack.write_text(
        "--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32\n"
        "--max-position-embeddings 64 --normalization RMSNorm --norm-epsilon 1e-6 --swiglu\n"
        "--ffn-hidden-size 96 --position-embedding-type rope --rotary-base 10000\n"
        "--group-query-attention --num-query-groups 2 --disable-bias-linear\n"
        "--untie-embeddings-and-output-weights --tensor-model-parallel-size 2\n"
        "--pipeline-model-parallel-size 2 --micro-batch-size 1 --global-batch-size 1 --train-iters 10\n"
        "--lr 1e-4 --ckpt-format torch_dist\n",
        encoding="utf-8",
    )
    out = tmp_path / "export"
    assert run_export(ckpt, pack, model, out, "--vocab", "model") == 0
    check = read_json(f"{out}.json")
    assert check["ok"] and check["logits"]["max_abs"] < 1e-4, check
    config = read_json(out / "config.json")
    assert (config["intermediate_size"], config["num_key_value_heads"], config["rms_norm_eps"]) == (
        96,
        2,
        1e-6,
    )
    back = load_file(out / read_json(out / "model.safetensors.index.json")["weight_map"]["lm_head.weight"])
    assert torch.equal(back["lm_head.weight"], load_file(hf / "model.safetensors")["lm_head.weight"])
