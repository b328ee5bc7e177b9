"""``snakepack hf-import``: a local Hugging Face LLaMA folder as a GPT-NeoX or Megatron-LM checkpoint to
start from.

Usage::

    snakepack hf-import --hf DIR --tokenizer-model MODEL --out CKPT/global_step0 --check import.json \\
        [--tokenizer-merges MERGES] [--tokenizer-type KIND] [--tp 1] [--pipe] [--divisible-by 128]
    snakepack hf-import --trainer megatron --hf DIR --tokenizer-model MODEL --out CKPT/iter_0000000 \\
        --check import.json [--tp 1] [--divisible-by 128]

Reads ``config.json`` and the safetensors (one file or an index), tensor by tensor (train/hf/layout), and
writes GPT-NeoX's layout for tensor parallel size ``--tp``: ``mp_rank_XX_model_states.pt`` holding each
rank's weights (``pipe_parallel_size: 0``), or with ``--pipe`` one ``layer_II-model_XX-model_states.pt``
per layer and rank (``pipe_parallel_size`` >= 1). With ``--trainer megatron`` it writes Megatron-LM's
``torch_dist`` folder instead (train/megatron_checkpoint, Megatron names: train/hf/megatron_layout), model
only, which Megatron-LM loads at any tensor and pipeline parallel size; ``--tp`` then only pads the
vocabulary. The run starts from it as from any fine-tuning start (train/finetune: the link and the
tracker). The vocabulary is padded as the trainer pads the data tokenizer's (``make_vocab_size_divisible_by``
x TP).

Before writing it checks that the model's tokenizer is the data's (train/hf/model_tokenizer); after writing,
the same tokens go through the Hugging Face model and through the reference model on the written weights,
and ``--check`` records the largest absolute and relative logit difference; over tolerance it fails.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable, Sequence
from typing import Any

import torch

from workflow_scripts.core.fsio import write_json
from workflow_scripts.tokens import kinds
from workflow_scripts.train import megatron_checkpoint
from workflow_scripts.train.hf import config as hf_config
from workflow_scripts.train.hf import layout, megatron_layout, model_tokenizer
from workflow_scripts.train.hf.logit_check import (
    CHECK_TOKENS,
    TOLERANCE,
    check_tokens,
    compare,
    hf_logits,
    reference_logits,
    within,
)
from workflow_scripts.train.hf.start import ModelImportError, read_config
from workflow_scripts.train.reference.config import model_config
from workflow_scripts.train.reference.run_config import ModelConfig


def tensor_reader(hf_dir: str) -> Callable[[str], torch.Tensor]:
    """``get(name)``: one tensor read from the folder's safetensors (a single file or a sharded index)."""
    from safetensors import safe_open

    index = os.path.join(hf_dir, "model.safetensors.index.json")
    if os.path.isfile(index):
        with open(index, encoding="utf-8") as f:
            where = {name: os.path.join(hf_dir, file) for name, file in json.load(f)["weight_map"].items()}
    elif os.path.isfile(os.path.join(hf_dir, "model.safetensors")):
        single = os.path.join(hf_dir, "model.safetensors")
        with safe_open(single, framework="pt") as f:
            where = dict.fromkeys(f.keys(), single)
    else:
        raise ModelImportError(f"train.init_from.hf: {hf_dir} has no model.safetensors (nor a shard index)")
    handles: dict[str, Any] = {}

    def get(name: str) -> torch.Tensor:
        if name not in where:
            raise ModelImportError(f"{hf_dir}: no tensor {name} in its safetensors")
        path = where[name]
        if path not in handles:
            handles[path] = safe_open(path, framework="pt")
        return handles[path].get_tensor(name)

    return get


def layer_file(index: int, rank: int) -> str:
    return f"layer_{index:02d}-model_{rank:02d}-model_states.pt"


def rank_file(rank: int) -> str:
    return f"mp_rank_{rank:02d}_model_states.pt"


def _save(obj: Any, path: str) -> None:
    tmp = f"{path}.tmp"
    torch.save(obj, tmp)
    os.replace(tmp, path)


def write_checkpoint(get: Callable[[str], torch.Tensor], shape: layout.Shape, out: str, pipe: bool) -> int:
    """Write every rank's tensors into ``out`` (GPT-NeoX's sequential or pipeline files); the tensor count."""
    os.makedirs(out, exist_ok=True)
    count = 0
    for r in range(shape.tp):
        state: dict[str, torch.Tensor] = {}
        layer, current = None, {}
        for name, tensor in layout.to_neox(get, shape, r):
            count += 1
            if not pipe:
                state[name] = tensor
                continue
            index, key = name.split(".", 2)[1:]
            if layer is not None and int(index) != layer:
                _save(current, os.path.join(out, layer_file(layer, r)))
                current = {}
            layer, current[key] = int(index), tensor
        if pipe and layer is not None:
            _save(current, os.path.join(out, layer_file(layer, r)))
        meta = {"dp_world_size": 1, "mp_world_size": shape.tp, "iteration": 0, "global_steps": 0}
        _save(meta | {"module": None if pipe else state, "optimizer": {}}, os.path.join(out, rank_file(r)))
    return count


def write_megatron(
    get: Callable[[str], torch.Tensor], shape: layout.Shape, cfg: ModelConfig, out: str, divisible_by: int
) -> int:
    """Write the model as a ``torch_dist`` folder ``out`` (model only); the tensor count."""
    one = layout.Shape(**{**shape.__dict__, "tp": 1})
    weights = megatron_layout.to_megatron(dict(layout.to_neox(get, one, 0)), cfg)
    common = megatron_checkpoint.import_common(cfg, make_vocab_size_divisible_by=divisible_by)
    megatron_checkpoint.save(out, weights, common)
    return len(weights)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="snakepack hf-import", description=__doc__.split("\n")[0])
    parser.add_argument("--hf", required=True, help="the Hugging Face model folder")
    parser.add_argument("--trainer", choices=["neox", "megatron"], default="neox", help="whose checkpoint")
    kinds.add_arguments(parser)
    parser.add_argument("--out", required=True, help="the checkpoint folder (…/global_step0, …/iter_0000000)")
    parser.add_argument("--check", required=True, help="the logit check's JSON")
    parser.add_argument("--tp", type=int, default=1, help="tensor parallel size (model_parallel_size)")
    parser.add_argument("--pipe", action="store_true", help="pipeline files (pipe_parallel_size >= 1)")
    parser.add_argument("--divisible-by", type=int, default=128, help="make_vocab_size_divisible_by")
    args = parser.parse_args(argv)
    if args.trainer == "megatron" and args.pipe:
        parser.error("--pipe: GPT-NeoX's pipeline files; a Megatron-LM checkpoint loads at any pipeline size")
    config = read_config(args.hf)
    data = model_tokenizer.match(args.hf, config, kinds.from_args(args))
    padded = model_tokenizer.padded(data.vocab_size, args.divisible_by * args.tp)
    try:
        shape, keys = layout.shape_of(config, padded, args.tp), hf_config.neox_model_keys(config)
    except hf_config.UnsupportedModel as error:
        raise ModelImportError(f"{args.hf}/config.json: {error}") from None
    if not data.vocab_size <= shape.vocab_size <= padded:
        raise ModelImportError(
            f"{args.hf}: vocab_size {shape.vocab_size} does not fit the data tokenizer's {data.vocab_size} "
            f"padded to {padded} (make_vocab_size_divisible_by {args.divisible_by} x tp {args.tp})"
        )
    try:
        shape.check()
    except ValueError as error:
        raise ModelImportError(f"{args.hf}/config.json: {error}") from None
    max_pos = int(config["max_position_embeddings"])
    cfg = model_config(keys, args.hf, padded, max_pos, max_pos)
    if args.trainer == "megatron":
        count = write_megatron(tensor_reader(args.hf), shape, cfg, args.out, args.divisible_by)
    else:
        count = write_checkpoint(tensor_reader(args.hf), shape, args.out, args.pipe)
    tokens = check_tokens(data.vocab_size, min(CHECK_TOKENS, int(config["max_position_embeddings"])))
    expected = hf_logits(args.hf, tokens)  # one model in memory at a time
    result = compare(reference_logits(args.out, cfg, shape, tokens, args.trainer), expected)
    ok = within(result)
    record = {"hf": args.hf, "out": args.out, "trainer": args.trainer, "tensors": count, "tp": args.tp}
    record |= {"pipe": args.pipe}
    record |= {"padded_vocab_size": padded, "tokens": list(tokens.shape), "logits": result}
    write_json(args.check, record | {"tolerance": TOLERANCE, "ok": ok})
    print(f"hf-import: {args.hf} -> {args.out}: {count} tensors, logits max abs {result['max_abs']:.2e}")
    if not ok:
        raise ModelImportError(f"{args.hf}: logits differ by {result} (over {TOLERANCE}); see {args.check}")
    return 0
