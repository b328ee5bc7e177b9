"""The reference model of a Megatron-LM arguments file is the model Megatron-LM builds from it.

One Megatron-LM process (``BUILD``) takes each arguments file through ``parse_args`` + ``validate_args``,
``core_transformer_config_from_args`` and ``gpt_builders.gpt_builder`` (``pretrain_gpt.py``'s model, the
local transformer implementation, on the CPU, one gloo process), and reports the config's values and the
model's sharded state dict: every tensor's checkpoint key and global shape, a layer's as
``decoder.layers.{i}.<rest>``. The reference trainer's ``load_config`` on the same file must give the same
shape: the same values, the same parameter count, and ``megatron_layout.to_megatron`` of its weights the same
names and shapes. Flags the reference does not build, and checkpoint formats other than ``torch_dist``, are
refused with the reason.

Stubbed, a device call: ``arguments.get_device_arch_version`` (``MEGATRON_ARGS``). Flags added for the
CPU build only (``CPU``): they change where and how Megatron-LM computes, not the model's tensors.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
import torch

from tests.trainers import MEGATRON_ARGS, Trainers
from workflow_scripts.train.reference.config import load_config
from workflow_scripts.train.reference.model import GPT
from workflow_scripts.train.reference.run_config import ConfigError

CPU = ["--transformer-impl", "local", "--use-cpu-initialization", "--no-persist-layer-norm",
       "--no-gradient-accumulation-fusion", "--no-rope-fusion"]  # fmt: skip

BUILD = (
    MEGATRON_ARGS
    + r"""
import json, socket
import torch
from megatron.core import mpu
from megatron.core.dist_checkpointing.mapping import ShardedTensor, ShardedTensorFactory
from megatron.training.arguments import core_transformer_config_from_args
from gpt_builders import gpt_builder

s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
torch.distributed.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
mpu.initialize_model_parallel(1, 1)
out = []
for argv in json.loads(sys.argv[1]):
    args = parsed(argv)
    config = core_transformer_config_from_args(args)
    model = gpt_builder(args, True, True)
    shapes = {}
    for sharded in model.sharded_state_dict().values():
        if isinstance(sharded, ShardedTensorFactory):  # SwiGLU's linear_fc1: two halves of one tensor
            sharded = sharded.build()[0]
        if not isinstance(sharded, ShardedTensor):
            continue  # _extra_state
        if sharded.prepend_axis_num:  # a layer: its global index, then the tensor
            key = sharded.key.replace("decoder.layers.", f"decoder.layers.{sharded.global_offset[0]}.", 1)
            shapes[key] = list(sharded.global_shape[1:])
        else:
            shapes[sharded.key] = list(sharded.global_shape)
    values = {k: getattr(config, k) for k in ("num_query_groups", "ffn_hidden_size", "gated_linear_unit",
              "normalization", "layernorm_epsilon", "add_bias_linear", "add_qkv_bias", "init_method_std",
              "kv_channels", "num_attention_heads", "attention_dropout", "hidden_dropout")}
    values |= {k: getattr(args, k) for k in ("position_embedding_type", "rotary_base", "rotary_percent",
               "untie_embeddings_and_output_weights", "padded_vocab_size", "ckpt_format")}
    out.append({"values": values, "shapes": shapes,
                "parameters": sum(p.numel() for p in model.parameters())})
print(json.dumps(out))
"""
)

LLAMA = (
    "--normalization RMSNorm --norm-epsilon 1e-6 --swiglu --ffn-hidden-size 88 "
    "--position-embedding-type rope --rotary-base 500000 --group-query-attention --num-query-groups 2 "
    "--disable-bias-linear "
    "--untie-embeddings-and-output-weights --init-method-std 0.01 --make-vocab-size-divisible-by 64 "
    "--ckpt-format torch_dist"
)
SHAPES = {  # name -> the model flags (hidden 96, 4 heads)
    "GPT-2 (Megatron-LM's defaults)": "",
    "LLaMA": LLAMA,
    "SwiGLU's default size, partial rotary, multi-query, LayerNorm": (
        "--swiglu --position-embedding-type rope --rotary-percent 0.5 --group-query-attention"
    ),
    "no position embedding, untied, GELU with its own size": (
        "--position-embedding-type none --untie-embeddings-and-output-weights --ffn-hidden-size 200"
    ),
    "the legacy rotary flag": "--use-rotary-position-embeddings --rotary-base 20000",
}


def model_args(path: Path, tokenizer: Path, flags: str) -> Path:
    """A one-phase run's arguments with the model ``flags``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "--num-layers 2 --hidden-size 96 --num-attention-heads 4 --seq-length 32\n"
        "--max-position-embeddings 64 --micro-batch-size 2 --global-batch-size 4\n"
        "--train-samples 16 --lr 0.001\n"
        f"--tokenizer-type GPTSentencePieceTokenizer --tokenizer-model {tokenizer}\n"
        f"--train-data-path x --distributed-backend gloo\n{flags}\n"
    )
    return path


def megatron_models(trainers: Trainers, files: list[Path]) -> list[dict]:
    argvs = [[*shlex.split(f.read_text()), *CPU] for f in files]
    out = trainers.run("megatron", ["-c", BUILD, json.dumps(argvs)])
    assert out.returncode == 0, out.stderr[-4000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_reference_model_is_the_model_megatron_lm_builds(
    tmp_path: Path, model: Path, trainers: Trainers
) -> None:
    from workflow_scripts.train.hf.megatron_layout import to_megatron

    files = [model_args(tmp_path / f"{i}.args", model, flags) for i, flags in enumerate(SHAPES.values())]
    for name, file, built in zip(SHAPES, files, megatron_models(trainers, files), strict=True):
        cfg = load_config([str(file)]).model
        v = built["values"]
        ours = {
            "num_query_groups": cfg.kv_heads,
            "ffn_hidden_size": cfg.ffn_in_size,
            "gated_linear_unit": cfg.activation == "swiglu",
            "normalization": {"layernorm": "LayerNorm", "rmsnorm": "RMSNorm"}[cfg.norm],
            "layernorm_epsilon": cfg.norm_epsilon,
            "add_bias_linear": cfg.mlp_bias,
            "add_qkv_bias": cfg.attn_bias,
            "init_method_std": cfg.init_method_std,
            "kv_channels": cfg.hidden_size // cfg.num_attention_heads,
            "num_attention_heads": cfg.num_attention_heads,
            "attention_dropout": cfg.attention_dropout,
            "hidden_dropout": cfg.hidden_dropout,
            "position_embedding_type": {"learned": "learned_absolute", "rotary": "rope"}.get(
                cfg.pos_emb, "none"
            ),
            "rotary_base": cfg.rotary_emb_base,
            "rotary_percent": cfg.rotary_pct,
            "untie_embeddings_and_output_weights": not cfg.tied,
            "padded_vocab_size": cfg.vocab_size,
            "ckpt_format": "torch_dist",
        }
        if v["num_query_groups"] is None:  # no --group-query-attention: a group per head
            v["num_query_groups"] = v["num_attention_heads"]
        assert ours == v, name
        reference = GPT(cfg)
        assert sum(p.numel() for p in reference.parameters()) == built["parameters"], name
        names = {k: list(t.shape) for k, t in to_megatron(reference.state_dict(), cfg).items()}
        assert names == built["shapes"], name


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ("--ckpt-format torch", "--ckpt-format torch: the reference trainer writes torch_dist"),
        ("--qk-layernorm", "--qk-layernorm"),
        ("--squared-relu", "--squared-relu"),
        ("--position-embedding-type yarn", "--position-embedding-type yarn"),
        ("--rotary-interleaved", "--rotary-interleaved"),
        ("--disable-bias-linear --add-qkv-bias", "--add-qkv-bias"),
        ("--kv-channels 32", "--kv-channels 32"),
        ("--no-position-embedding", "deprecated"),
        ("--num-experts 4", "--num-experts"),
    ],
)
def test_a_model_the_reference_does_not_build_is_refused(
    tmp_path: Path, model: Path, flags: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config([str(model_args(tmp_path / "a.args", model, flags))])


def test_the_model_flags_are_used_and_not_listed_as_ignored(tmp_path: Path, model: Path) -> None:
    cfg = load_config([str(model_args(tmp_path / "a.args", model, LLAMA))])
    assert not [n for n in cfg.not_implemented if "ignored" in n], cfg.not_implemented
    assert torch.Size([2 * 88, 96]) == GPT(cfg.model).layers[0].mlp.linear1.weight.shape
