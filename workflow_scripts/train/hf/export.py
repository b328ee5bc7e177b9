"""``snakepack hf-export``: a GPT-NeoX or Megatron-LM checkpoint of a LLaMA-shaped model as a Hugging Face
folder.

Usage::

    snakepack hf-export --checkpoint CKPT/global_stepN --config PACK.yml --tokenizer-model MODEL \\
        [--tokenizer-merges MERGES] [--tokenizer-type KIND] --out DIR --check DIR.json [--hf-source DIR] \\
        [--shard-mb 5000] [--vocab padded|model]
    snakepack hf-export --checkpoint CKPT/iter_NNNNNNN --config PACK.args ...

A Megatron-LM ``torch_dist`` folder (``metadata.json``: train/megatron_checkpoint) is read whole (it is not
split by tensor parallelism; train/hf/megatron_layout gives the reference model's names), its model keys
from the pack's Megatron-LM arguments file (``.args``, read as the reference trainer reads it:
train/reference/megatron_config). A GPT-NeoX checkpoint's
tensor-parallel ranks (sequential or pipeline files) are merged tensor by tensor (train/hf/layout) into
``model-0000k-of-0000K.safetensors`` shards of at most ``--shard-mb`` with ``model.safetensors.index.json``,
and writes ``config.json`` (``LlamaForCausalLM``, from the pack config's model keys),
``generation_config.json`` and the tokenizer: the source model's tokenizer files (``--hf-source``:
``train.init_from.hf``), or the data's tokenizer as ``transformers`` saves it (a SentencePiece model
converted; a ``tokenizer.json``, or GPT-2's pair as the trainers read it, as ``PreTrainedTokenizerFast``). A
GPT-NeoX checkpoint is memory-mapped, so the export holds about one shard in memory besides; a ``torch_dist``
folder is read into memory whole.

The vocabulary keeps GPT-NeoX's padded size (``--vocab padded``, as GPT-NeoX's own ``convert_neox_to_hf.py``
does): the padded rows are trained too (the softmax pushes them down), so only then is ``transformers``'
loss the trainer's. ``--vocab model`` cuts them back to the source model's ``vocab_size`` (or the data
tokenizer's), which gives an imported model's tensors back exactly.

Then the same tokens go through the reference model on the checkpoint and through
``transformers.AutoModelForCausalLM`` on the folder (offline), and texts through the data's tokenizer and
``AutoTokenizer``; ``--check`` records the logit differences and whether the tokenizers agree. Over
tolerance, or tokenizers that disagree, fail the export (the folder is only moved into place when it passed).
"""

from __future__ import annotations

import argparse
import os
import shutil
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import torch
import yaml

from workflow_scripts.core.fsio import write_json
from workflow_scripts.tokens import kinds
from workflow_scripts.train.hf import layout, model_tokenizer
from workflow_scripts.train.hf.logit_check import (
    CHECK_TOKENS,
    TOLERANCE,
    check_tokens,
    compare,
    hf_logits,
    reference_logits,
    within,
)
from workflow_scripts.train.hf.start import NEOX_DEFAULTS, ModelImportError, read_config

if TYPE_CHECKING:
    from workflow_scripts.tokens.engines.base import Tokenizer
    from workflow_scripts.tokens.kinds import TokenizerFiles

TOKENIZER_FILES = (
    "tokenizer.model",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
)
SAMPLE_TEXTS = (
    "The quick brown fox jumps over the lazy dog.",
    "  Two leading spaces, tabs\tand\nnew lines.",
    "Größe, café, naïve; Москва; 東京都; 1234567890 ½ ① \uff46\uff55\uff4c\uff4c",  # full-width: NFKC
)
LLAMA = {"norm": "rmsnorm", "pos_emb": "rotary", "activation": "swiglu", "rotary_pct": 1.0}


def llama_config(cfg: Any, vocab_size: int, bos: int | None, eos: int) -> dict[str, Any]:
    """``config.json`` of the model the reference ``ModelConfig`` ``cfg`` describes (a LLaMA shape, or
    ``ModelImportError`` naming the key that is not)."""
    for key, value in LLAMA.items():
        if getattr(cfg, key) != value:
            raise ModelImportError(f"{key}: {getattr(cfg, key)!r}: a Hugging Face LLaMA needs {value!r}")
    if cfg.ffn_size != 2 * cfg.ffn_in_size:
        raise ModelImportError(
            f"intermediate_size {cfg.intermediate_size} with mlp_multiple_of {cfg.mlp_multiple_of}: "
            f"GPT-NeoX's gated MLP halves ({cfg.ffn_size} vs {cfg.ffn_in_size}) make no Hugging Face size"
        )
    for key in ("attn_bias", "mlp_bias"):
        if getattr(cfg, key):
            raise ModelImportError(f"{key}: biases on: a Hugging Face LLaMA has none (use_bias_in_* false)")
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": vocab_size,
        "hidden_size": cfg.hidden_size,
        "intermediate_size": cfg.ffn_in_size,
        "num_hidden_layers": cfg.num_layers,
        "num_attention_heads": cfg.num_attention_heads,
        "num_key_value_heads": cfg.kv_heads,
        "hidden_act": "silu",
        "max_position_embeddings": cfg.max_position_embeddings,
        "rms_norm_eps": cfg.norm_epsilon,
        "rope_theta": float(cfg.rotary_emb_base),
        "tie_word_embeddings": cfg.tied,
        "attention_bias": False,
        "mlp_bias": False,
        "bos_token_id": bos,
        "eos_token_id": eos,
        "torch_dtype": "float32",
    }


def shards(tensors: Iterable[tuple[str, torch.Tensor]], limit: int) -> Iterator[dict[str, torch.Tensor]]:
    """The tensors in order, grouped into shards of at most ``limit`` bytes (a larger tensor alone)."""
    shard: dict[str, torch.Tensor] = {}
    size = 0
    for name, tensor in tensors:
        nbytes = tensor.numel() * tensor.element_size()
        if shard and size + nbytes > limit:
            yield shard
            shard, size = {}, 0
        shard[name], size = tensor.contiguous(), size + nbytes
    if shard:
        yield shard


def write_weights(tensors: Iterable[tuple[str, torch.Tensor]], out: str, limit: int) -> dict[str, Any]:
    """The safetensors shards and their index in ``out``; the index."""
    from safetensors.torch import save_file

    files, total = [], 0
    for k, shard in enumerate(shards(tensors, limit)):
        file = f"model-{k + 1:05d}.safetensors.part"
        save_file(shard, os.path.join(out, file), metadata={"format": "pt"})
        files.append((file, list(shard)))
        total += sum(t.numel() * t.element_size() for t in shard.values())
    weight_map = {}
    for k, (file, names) in enumerate(files):
        final = f"model-{k + 1:05d}-of-{len(files):05d}.safetensors"
        os.replace(os.path.join(out, file), os.path.join(out, final))
        weight_map |= dict.fromkeys(names, final)
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    write_json(os.path.join(out, "model.safetensors.index.json"), index)
    return index


def write_tokenizer(out: str, tok: Tokenizer, hf_source: str | None, eod: int) -> str:
    """The tokenizer files: the source model's, or the data's tokenizer as ``transformers`` saves it (see
    the module docstring); where they came from."""
    if hf_source and any(os.path.isfile(os.path.join(hf_source, f)) for f in TOKENIZER_FILES[1:3]):
        for name in TOKENIZER_FILES:
            if os.path.isfile(os.path.join(hf_source, name)):
                shutil.copy(os.path.join(hf_source, name), os.path.join(out, name))
        return hf_source
    import transformers

    named = {"eos_token": tok.piece(eod)} | ({"bos_token": tok.piece(tok.bos)} if tok.bos is not None else {})
    if tok.kind != "sentencepiece":
        transformers.PreTrainedTokenizerFast(tokenizer_object=tok.backend, **named).save_pretrained(out)
        return tok.path
    staging = os.path.join(out, ".tokenizer")
    os.makedirs(staging, exist_ok=True)
    shutil.copy(tok.path, os.path.join(staging, "tokenizer.model"))
    auto = transformers.AutoTokenizer
    tokenizer = auto.from_pretrained(staging, eos_token=named["eos_token"], local_files_only=True)
    tokenizer.save_pretrained(out)
    shutil.copy(tok.path, os.path.join(out, "tokenizer.model"))
    shutil.rmtree(staging)
    return tok.path


def tokenizer_differences(hf_dir: str, tok: Tokenizer, texts: Sequence[str]) -> list[str]:
    """The texts ``AutoTokenizer`` on ``hf_dir`` encodes otherwise than the data's tokenizer."""
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(hf_dir, local_files_only=True)
    return [t for t in texts if tokenizer.encode(t, add_special_tokens=False) != tok.plain(t)]


def pack_keys(pack_config: str) -> tuple[dict[str, Any], int | None]:
    """The model's GPT-NeoX keys of a pack config, a GPT-NeoX YAML or a Megatron-LM ``.args`` file, and
    Megatron-LM's ``--ffn-hidden-size`` (None for GPT-NeoX)."""
    if pack_config.endswith(".args"):
        from workflow_scripts.train.reference.megatron_config import read_megatron

        raw, megatron = read_megatron(pack_config, evaluation=True)
        return raw, megatron.get("ffn_hidden_size")
    with open(pack_config, encoding="utf-8") as f:
        return {k.replace("-", "_"): v for k, v in (yaml.safe_load(f) or {}).items()}, None


def reference_weights(checkpoint: str, cfg: Any) -> dict[str, torch.Tensor] | None:
    """A Megatron-LM ``torch_dist`` folder's weights under the reference model's names (one rank); None
    for a GPT-NeoX checkpoint."""
    if not os.path.isfile(os.path.join(checkpoint, "metadata.json")):
        return None
    from workflow_scripts.train.hf.logit_check import megatron_state

    return megatron_state(checkpoint, cfg)


def export(
    checkpoint: str,
    pack_config: str,
    data: TokenizerFiles,
    out: str,
    check: str,
    hf_source: str | None = None,
    shard_mb: float = 5000,
    vocab_mode: str = "padded",
) -> dict[str, Any]:
    """Write the Hugging Face folder ``out`` and its check ``check``; the check's record."""
    from workflow_scripts.train.reference.config import model_config

    keys, ffn_hidden_size = pack_keys(pack_config)
    tok = data.load()
    size, eod = tok.vocab_size, model_tokenizer.neox_eod(tok)
    tp = int(keys.get("model_parallel_size") or 1)
    divisible = int(keys.get("make_vocab_size_divisible_by") or NEOX_DEFAULTS["make_vocab_size_divisible_by"])
    padded = model_tokenizer.padded(size, divisible * tp)
    vocab = int(read_config(hf_source)["vocab_size"]) if hf_source else size
    vocab = padded if vocab_mode == "padded" else vocab
    max_pos = int(keys.get("max_position_embeddings") or keys["seq_length"])
    cfg = model_config(keys, pack_config, padded, int(keys["seq_length"]), max_pos, ffn_hidden_size)
    try:
        config = llama_config(cfg, vocab, tok.bos, eod)
    except ModelImportError as error:
        raise ModelImportError(f"{pack_config}: {error}") from None
    shape = layout.Shape(
        cfg.num_layers, cfg.hidden_size, cfg.num_attention_heads, cfg.kv_heads, vocab, padded, cfg.tied, tp
    )
    staging = f"{out}.tmp"
    shutil.rmtree(staging, ignore_errors=True)
    os.makedirs(staging)
    from workflow_scripts.train.reference.checkpoints import neox_weights

    megatron = reference_weights(checkpoint, cfg)
    trainer = "neox" if megatron is None else "megatron"
    ranks: dict[int, dict[str, torch.Tensor]] = {} if megatron is None else {0: megatron}

    def get(rank: int, name: str) -> torch.Tensor:
        if rank not in ranks:
            ranks[rank] = neox_weights(checkpoint, rank)  # memory-mapped
        return ranks[rank][name]

    one = shape if megatron is None else layout.Shape(**{**shape.__dict__, "tp": 1})
    index = write_weights(layout.to_hf(get, one), staging, int(shard_mb * 1e6))
    ranks.clear()
    write_json(os.path.join(staging, "config.json"), config)
    generation = {"bos_token_id": config["bos_token_id"], "eos_token_id": eod}
    write_json(os.path.join(staging, "generation_config.json"), generation)
    tokenizer_from = write_tokenizer(staging, tok, hf_source, eod)
    tokens = check_tokens(size, min(CHECK_TOKENS, max_pos))
    expected = reference_logits(checkpoint, cfg, shape, tokens, trainer)
    result = compare(hf_logits(staging, tokens), expected)
    texts = [*SAMPLE_TEXTS, tok.decode(tokens[0].tolist())]
    differ = tokenizer_differences(staging, tok, texts)
    ok = within(result) and not differ
    record = {"checkpoint": checkpoint, "config": pack_config, "out": out, "trainer": trainer, "tp": tp}
    record |= {"vocab_size": vocab}
    record |= {"tensors": len(index["weight_map"]), "bytes": index["metadata"]["total_size"]}
    record |= {"shards": len(set(index["weight_map"].values())), "tokenizer_from": tokenizer_from}
    record |= {"tokens": list(tokens.shape), "logits": result, "tolerance": TOLERANCE}
    record |= {"tokenizer_texts": len(texts), "tokenizer_differs": differ, "ok": ok}
    write_json(check, record)
    if not ok:
        shutil.rmtree(staging)
        why = [f"logits differ by {result} (over {TOLERANCE})"] if not within(result) else []
        why += [f"AutoTokenizer encodes {len(differ)} text(s) otherwise than {data.model}"] if differ else []
        raise ModelImportError(f"{checkpoint} -> {out}: {'; '.join(why)}; see {check}")
    shutil.rmtree(out, ignore_errors=True)
    os.replace(staging, out)
    return record


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="snakepack hf-export", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--checkpoint", required=True, help="the checkpoint folder (global_stepN, iter_NNNNNNN)"
    )
    parser.add_argument("--config", required=True, help="the pack's config (.yml, or Megatron-LM's .args)")
    kinds.add_arguments(parser)
    parser.add_argument("--out", required=True, help="the Hugging Face folder to write")
    parser.add_argument("--check", required=True, help="the check's JSON")
    parser.add_argument("--hf-source", help="the model the run started from (train.init_from.hf)")
    parser.add_argument("--shard-mb", type=float, default=5000, help="the largest safetensors shard (MB)")
    parser.add_argument(
        "--vocab", choices=["padded", "model"], default="padded", help="GPT-NeoX's padded vocabulary, or cut"
    )
    args = parser.parse_args(argv)
    record = export(
        args.checkpoint,
        args.config,
        kinds.from_args(args),
        args.out,
        args.check,
        args.hf_source,
        args.shard_mb,
        args.vocab,
    )
    print(
        f"hf-export: {args.checkpoint} -> {args.out}: {record['tensors']} tensors in {record['shards']} "
        f"shard(s), logits max abs {record['logits']['max_abs']:.2e}"
    )
    return 0
