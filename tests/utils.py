"""Helpers shared by the tests: a temporary copy of the workflow, Snakemake runs, small data builders."""

from __future__ import annotations

import gzip
import io
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import zstandard

from workflow_scripts.core.fsio import open_binary
from workflow_scripts.core.indexed_dataset import IndexedDatasetBuilder
from workflow_scripts.tokens.engines.byte_memo import LLAMA3_SPLIT

REPO = Path(__file__).resolve().parents[1]
WORKFLOW_FILES = ["Snakefile", "rules", "config", "workflow_scripts", "profiles", "envs", "report"]
# Words of several scripts for generated text (the tokenizer tests); zh and ja are written without spaces.
WORDS = {
    "en": [
        "the",
        "quick",
        "brown",
        "fox",
        "jumps",
        "over",
        "lazy",
        "dog",
        "data",
        "model",
        "token",
        "train",
        "river",
        "stone",
        "light",
        "don't",
        "e-mail",
        "2024",
    ],
    "de": ["Größe", "Straße", "über", "Äpfel", "früh", "Übung", "Maß", "heißt", "schön", "Bücher"],
    "ru": [
        "быстрая",
        "лиса",
        "прыгает",
        "через",
        "ленивую",
        "собаку",
        "данные",
        "модель",
        "река",
        "камень",
        "свет",
    ],
    "el": ["γρήγορη", "καφέ", "αλεπού", "πηδάει", "πάνω", "από", "σκύλο"],
    "zh": list("我们今天学习语言模型数据处理中文文本分词训练河流石头光明"),
    "ja": list("これは日本語の文章ですデータとモデルを学習しますカタカナ漢字"),
    "th": ["ภาษา", "ไทย", "ไม่", "มี", "ช่อง", "ว่าง", "ระหว่าง", "คำ"],
    "code": ["def", "f(x):", "return", "x**2", "{", "}", "==", "->", "#", "//", "i++;", "\\fB", "\\fR"],
}


def snakemake_env() -> dict[str, str]:
    """The environment for a Snakemake subprocess: this interpreter first, no profile or Slurm job vars."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env.pop("SNAKEMAKE_PROFILE", None)
    for key in [k for k in env if k.startswith("SLURM_")]:
        del env[key]
    return env


def tail(text: str, n: int = 60) -> str:
    return "\n".join(text.splitlines()[-n:])


SAMPLE_CONFIG = ("--configfile=config/sample.yaml",)  # "=": the names after it stay targets


class Workflow:
    """A copy of the workflow in a temporary directory. Its runs use the embedded sample's config, as the
    README's main command does, unless the arguments give their own ``--configfile`` (the last one given is
    the one Snakemake takes, so a test's own config files replace the sample's)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True)
        ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".snakemake")
        for name in WORKFLOW_FILES:
            src = REPO / name
            if src.is_dir():
                shutil.copytree(src, root / name, ignore=ignore)
            else:
                shutil.copy2(src, root / name)

    def clone(self, dest: Path) -> Workflow:
        """A copy of this workflow with its results and Snakemake's records, modification times kept."""
        shutil.copytree(self.root, dest, symlinks=True)
        copy = Workflow.__new__(Workflow)
        copy.root = dest
        return copy

    def run(
        self, *args: str, timeout_s: int = 600, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess:
        """Run ``snakemake ARGS`` here; SIGKILL after timeout_s (the Slurm status hang ignores TERM)."""
        cmd = [
            "timeout",
            "-s",
            "KILL",
            str(timeout_s),
            sys.executable,
            "-m",
            "snakemake",
            *SAMPLE_CONFIG,
            *args,
        ]
        proc = subprocess.run(
            cmd,
            cwd=self.root,
            env=env or snakemake_env(),
            capture_output=True,
            text=True,
            timeout=timeout_s + 30,
        )
        proc.output = proc.stdout + proc.stderr
        return proc

    def ok(self, *args: str, timeout_s: int = 600) -> str:
        """Run and assert success; return the output."""
        proc = self.run(*args, timeout_s=timeout_s)
        assert proc.returncode == 0, (
            f"snakemake {' '.join(args)} failed (rc {proc.returncode}):\n{tail(proc.output)}"
        )
        return proc.output


def write_lines(path: Path, lines: list[bytes]) -> Path:
    """Write ``lines`` (newline-terminated), compressed as the name says (.gz, .zst)."""
    data = b"".join(line + b"\n" for line in lines)
    if path.name.endswith(".gz"):
        data = gzip.compress(data, mtime=0)
    elif path.name.endswith(".zst"):
        data = zstandard.ZstdCompressor().compress(data)
    path.write_bytes(data)
    return path


def write_jsonl(path: Path, records: list[Any]) -> Path:
    """One JSON line per record; ``bytes`` records are written as they are (for malformed lines)."""
    return write_lines(path, [r if isinstance(r, bytes) else orjson.dumps(r) for r in records])


def build_dataset(prefix: Path, docs: list[list[list[int]]], dtype: Any = np.uint16) -> str:
    """A Megatron dataset at ``prefix`` whose documents are given as lists of sequences."""
    prefix.parent.mkdir(parents=True, exist_ok=True)
    with IndexedDatasetBuilder(prefix, dtype) as builder:
        for doc in docs:
            for seq in doc:
                builder.add_item(seq)
            builder.end_document()
    return str(prefix)


def export_git(git_dir: str, paths: list[str], dest: Path) -> Path:
    """``paths`` of a git directory's HEAD, extracted into ``dest`` (once)."""
    if not dest.exists():
        archive = subprocess.run(
            ["git", f"--git-dir={git_dir}", "archive", "HEAD", *paths], check=True, capture_output=True
        ).stdout
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(dest, filter="data")
    return dest


def train_tokenizer(raw: Path, prefix: Path) -> Path:
    """A 1,000-piece model trained with the project's CLI on the raw English files (``prefix`` without
    ``.model``)."""
    files = sorted(map(str, raw.glob("en_*.jsonl")))
    train = [
        sys.executable,
        "-m",
        "workflow_scripts",
        "train-tokenizer",
        *files,
        "--model-prefix",
        str(prefix),
    ]
    subprocess.run([*train, "--vocab-size", "1000"], check=True, cwd=REPO, capture_output=True)
    return prefix


def web_source(raw: Path) -> dict:
    """A user's source: the generated English web files of ``raw``."""
    return {
        "name": "web",
        "paths": [f"{raw}/en_web_*.jsonl"],
        "lang": "en",
        "domain": "web",
        "subdomain": "cc",
    }


def shard_records(out: Path) -> list[dict[str, Any]]:
    """Every record of the ingest shards in ``out``, in shard order."""
    records = []
    for path in sorted(out.glob("*_split_*")):
        with open_binary(path) as fh:
            records += [orjson.loads(line) for line in fh]
    return records


def sft_config(raw: Path) -> dict[str, Any]:
    """A config of 300 chats with seed 003's markers (and one plain text, a reject) written into ``raw``:
    SFT mode, one mixture, one phase."""
    import random

    from faker import Faker

    fake, rng = Faker("en_US"), random.Random(4)
    fake.seed_instance(4)
    raw.mkdir(parents=True)
    lines = [
        {
            "id": f"chat-{i}",
            "text": f"<<<|user|>>>{fake.sentence(nb_words=rng.randint(5, 15))}<<<|user|>>>"
            f"<<<|assistant|>>>{fake.paragraph(nb_sentences=rng.randint(2, 5))}<<<|assistant|>>>",
        }
        for i in range(300)
    ]
    lines.append({"id": "plain", "text": fake.paragraph(nb_sentences=4)})  # no marker: a reject in SFT mode
    write_jsonl(raw / "en_sft_chat_part-00001.jsonl", lines)
    return {
        "sample": {"enabled": False},
        "sources": [
            {"name": "sft", "paths": [f"{raw}/*.jsonl"], "lang": "en", "domain": "sft", "subdomain": "chat"}
        ],
        "tokenizer": {"vocab_size": 2000},
        "tokenize": {"mode": "sft"},
        "mixtures": {"chat": {}},
        "datapacks": {"phases": [{"name": "sft", "tokens": 10000, "mixture": "chat"}]},
    }


def tiny_llama(seed: int = 0, **config: Any) -> Any:
    """A tiny random ``transformers`` LlamaForCausalLM (fp32, eval mode; made here, nothing downloaded):
    grouped-query attention and untied embeddings unless ``config`` says otherwise."""
    import torch
    import transformers

    shape = dict(
        vocab_size=100,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        rms_norm_eps=1e-6,
        rope_theta=10000.0,
        tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**(shape | config)))
    with torch.no_grad():  # norms away from 1, so a norm mapped to the wrong place shows
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.uniform_(0.5, 1.5)
    return model.float().eval()


def hf_folder(root: Path, data_model: Path, **config) -> Path:
    """A tiny LLaMA's Hugging Face folder whose tokenizer is ``data_model`` (a SentencePiece model, a
    tokenizer.json with its tokenizer_config.json, or a GPT-2 vocab.json with the merges beside it): its
    vocabulary, its file(s) and its end of document."""
    from workflow_scripts.tokens.kinds import TokenizerFiles

    files = TokenizerFiles.resolve(str(data_model))
    tok = files.load()
    eod = tok.token_id("<|endoftext|>")
    model = tiny_llama(**({"vocab_size": tok.vocab_size, "eos_token_id": eod} | config))
    model.save_pretrained(root)
    if files.kind == "sentencepiece":
        shutil.copy(data_model, root / "tokenizer.model")
    elif files.kind == "hf":
        shutil.copy(data_model, root / "tokenizer.json")
        if (data_model.parent / "tokenizer_config.json").is_file():
            shutil.copy(data_model.parent / "tokenizer_config.json", root / "tokenizer_config.json")
    else:
        shutil.copy(data_model, root / "vocab.json")
        shutil.copy(files.merges, root / "merges.txt")
    return root


def byte_level_bpe(folder: Path, texts: list[str], llama3: bool = False, vocab_size: int = 600) -> Path:
    """A byte-level BPE ``tokenizer.json`` trained here with ``tokenizers`` (GPT-2's pre-tokenizer and
    ``<|endoftext|>``; or Llama 3's split, a template BOS ``<|begin_of_text|>`` and ``eos_token``
    ``<|end_of_text|>``), with its ``tokenizer_config.json``. Merges are written as "a b" strings, which
    every ``tokenizers`` release reads (GPT-NeoX pins transformers 4.38, tokenizers 0.15)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    if llama3:
        split = pre_tokenizers.Split(Regex(LLAMA3_SPLIT), "isolated")
        tok.pre_tokenizer = pre_tokenizers.Sequence([split, pre_tokenizers.ByteLevel(False, use_regex=False)])
        specials = ["<|begin_of_text|>", "<|end_of_text|>"]
    else:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        specials = ["<|endoftext|>"]
    tok.decoder = decoders.ByteLevel()
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials, initial_alphabet=alphabet)
    tok.train_from_iterator(texts, trainer)
    if llama3:
        bos = (specials[0], tok.token_to_id(specials[0]))
        tok.post_processor = processors.TemplateProcessing(single=f"{bos[0]} $A", special_tokens=[bos])
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    folder.mkdir(parents=True, exist_ok=True)
    data = orjson.loads(tok.to_str())
    data["model"]["merges"] = [" ".join(m) for m in data["model"]["merges"]]
    data["model"].pop("ignore_merges", None)
    (folder / "tokenizer.json").write_bytes(orjson.dumps(data))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": specials[-1]}
    if llama3:
        config["bos_token"] = specials[0]
    (folder / "tokenizer_config.json").write_bytes(orjson.dumps(config))
    return folder / "tokenizer.json"


def gpt2_pair(tokenizer_json: Path, folder: Path) -> tuple[Path, Path]:
    """A GPT-2-style byte-level BPE ``tokenizer.json`` as GPT-2's ``vocab.json`` + ``merges.txt`` pair
    (``gpt2-vocab.json``, ``gpt2-merges.txt``, as Megatron-LM's runbooks name them)."""
    model = orjson.loads(tokenizer_json.read_bytes())["model"]
    folder.mkdir(parents=True, exist_ok=True)
    vocab, merges = folder / "gpt2-vocab.json", folder / "gpt2-merges.txt"
    vocab.write_bytes(orjson.dumps(model["vocab"]))
    lines = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    merges.write_text("#version: 0.2\n" + "".join(f"{m}\n" for m in lines), encoding="utf-8")
    return vocab, merges
