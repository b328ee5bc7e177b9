"""Every impossible setting refused with a message that says what to change, and the end of document each
trainer takes with each kind of tokenizer checked against the data's."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.train.configs.conftest import BASE, SEED_000, plan, signature, write
from tests.utils import byte_level_bpe, gpt2_pair
from workflow_scripts.core.schedule import ScheduleError
from workflow_scripts.tokens.engines.hf_tokenizer import HFTokenizer
from workflow_scripts.tokens.kinds import TokenizerFiles
from workflow_scripts.train.configs.checks import ConfigError
from workflow_scripts.train.configs.write import write_pack_config
from workflow_scripts.train.settings import TrainSettings


@pytest.mark.parametrize(
    ("base", "train", "message"),
    [
        (
            {**BASE, "seq_length": 4096},
            SEED_000,
            "seq_length 4096, but the plan uses training.seq_length 8192",
        ),
        ({**BASE, "train_batch_size": 512}, SEED_000, "train batch size 512, but the plan uses"),
        ({**BASE, "train_micro_batch_size_per_gpu": 5}, SEED_000, r"use 0\|960|use 960"),
        ({**BASE, "gradient_accumulation_steps": 2}, SEED_000, "gradient_accumulation_steps 2, but 576"),
        ({**BASE, "num_attention_heads": 7}, SEED_000, "not the hidden size 512"),
        (BASE, {**SEED_000, "nodes": 47}, "not divisible by micro batch 3 x data parallel 188"),
        (BASE, {**SEED_000, "time_limit_minutes": 60}, "fewer than one checkpoint interval"),
    ],
)
def test_impossible_settings_say_what_to_change(
    tmp_path: Path, model: Path, base: dict, train: dict, message: str
) -> None:
    with pytest.raises((ConfigError, ScheduleError), match=message):
        write(tmp_path, model, base, train, "U1_1")


def test_neox_eod_must_match_the_data(tmp_path: Path, model: Path) -> None:
    with pytest.raises(ConfigError, match=r"ends documents with id 2 \('</s>'\), but GPT-NeoX"):
        write(tmp_path, model, BASE, SEED_000, "U1_1", eod=2)


@pytest.mark.parametrize("llama3", [False, True], ids=["endoftext", "eos_token"])
def test_a_tokenizer_json_names_the_trainers_hf_tokenizer_and_its_eod(tmp_path: Path, llama3: bool) -> None:
    model = byte_level_bpe(tmp_path / "tok", ["some text to learn from, twice"] * 4, llama3=llama3)
    eod = HFTokenizer(model).eod()[0]
    if llama3:  # GPT-NeoX's HFTokenizer takes <|endoftext|>, which this tokenizer lacks
        with pytest.raises(ConfigError, match=r"GPT-NeoX's HFTokenizer takes EOD = token_to_id"):
            write(tmp_path, model, BASE, SEED_000, "U1_1", eod=eod)
    else:
        config, _ = write(tmp_path, model, BASE, SEED_000, "U1_1", eod=eod)
        assert (config["tokenizer_type"], config["vocab_file"]) == ("HFTokenizer", str(model))
        with pytest.raises(ConfigError, match=r"ends documents with id 5 .*HFTokenizer takes EOD"):
            write(tmp_path, model, BASE, SEED_000, "U1_1", eod=5)
    base = tmp_path / "base.args"
    base.write_text(
        "--num-layers 4 --hidden-size 512 --num-attention-heads 8 --seq-length 8192\n"
        "--global-batch-size 576 --micro-batch-size 3 --tensor-model-parallel-size 2\n"
    )
    settings = TrainSettings.from_config({**SEED_000, "trainer": "megatron", "base_config": str(base)})
    files = TokenizerFiles.resolve(str(model))
    args = [plan(tmp_path / "merged"), signature(eod), "U1_1", str(base), settings, files]
    write_pack_config(*args, str(tmp_path / "train"), "/scratch/ckpt", 1234)
    lines = (tmp_path / "train" / "U1_1" / "U1_1.args").read_text().splitlines()
    assert "--tokenizer-type HuggingFaceTokenizer" in lines and f"--tokenizer-model {model.parent}" in lines
    with pytest.raises(ConfigError, match="Megatron-LM's HuggingFaceTokenizer takes EOD = eos_token"):
        write_pack_config(*args[:1], signature(eod + 1), *args[2:], str(tmp_path / "t2"), "/c", 1)


def test_a_gpt2_pair_names_the_trainers_gpt2_bpe_tokenizer_and_both_files(tmp_path: Path) -> None:
    vocab, merges = gpt2_pair(byte_level_bpe(tmp_path / "tok", ["some text to learn from"] * 4), tmp_path)
    files = TokenizerFiles.resolve(str(vocab))
    eod = files.load().eod()[0]
    config, _ = write(tmp_path, vocab, BASE, SEED_000, "U1_1", eod=eod)
    assert (config["tokenizer_type"], config["vocab_file"], config["merge_file"]) == (
        "GPT2BPETokenizer",
        str(vocab),
        str(merges),
    )
    with pytest.raises(ConfigError, match=r"GPT-NeoX's GPT2BPETokenizer takes EOD = token_to_id"):
        write(tmp_path, vocab, BASE, SEED_000, "U1_1", eod=eod + 1)
    base = tmp_path / "base.args"
    base.write_text(
        "--num-layers 4 --hidden-size 512 --num-attention-heads 8 --seq-length 8192\n"
        "--global-batch-size 576 --micro-batch-size 3 --tensor-model-parallel-size 2\n"
    )
    settings = TrainSettings.from_config({**SEED_000, "trainer": "megatron", "base_config": str(base)})
    args = [plan(tmp_path / "merged"), signature(eod), "U1_1", str(base), settings, files]
    write_pack_config(*args, str(tmp_path / "train"), "/scratch/ckpt", 1234)
    lines = (tmp_path / "train" / "U1_1" / "U1_1.args").read_text().splitlines()
    for line in ["--tokenizer-type GPT2BPETokenizer", f"--vocab-file {vocab}", f"--merge-file {merges}"]:
        assert line in lines, line
    assert not any(line.startswith("--tokenizer-model") for line in lines)
