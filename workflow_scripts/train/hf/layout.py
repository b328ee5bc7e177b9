"""Hugging Face LLaMA weights <-> GPT-NeoX's, tensor by tensor, split for tensor parallelism.

GPT-NeoX's names (its sequential model, ``pipe_parallel_size: 0``; the pipeline files drop the
``sequential.{index}.`` prefix): ``sequential.0.word_embeddings.weight``, layer ``i`` at index ``i + 2``
(``input_layernorm.scale``, ``attention.query_key_value.weight``, ``attention.dense.weight``,
``post_attention_layernorm.scale``, ``mlp.linear1.weight``, ``mlp.linear2.weight``), the final norm at
``N + 3`` (``norm.scale``) and the output layer at ``N + 4`` (``final_linear.weight``).

Each tensor-parallel rank holds a contiguous slice of every split tensor: rows of the column-parallel ones
(embedding, ``query_key_value``, ``linear1``, ``final_linear``), columns of the row-parallel ones
(``dense``, ``linear2``); norms are whole on every rank. On a rank, ``query_key_value`` is that rank's heads
as GPT-NeoX's attention reads them: per head ``[q; k; v]`` when every head has its own key and value, and
``[q heads; k heads; v heads]`` with grouped-query attention; ``linear1`` is ``[up; gate]`` (GPT-NeoX
computes ``silu(gate) x up``). The vocabulary is padded with zero rows to GPT-NeoX's padded size and cut
back on the way out. GPT-NeoX's and Hugging Face's rotary embeddings are both rotate-half, so q and k are
not permuted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from workflow_scripts.train.hf.config import neox_model_keys

Tensor = torch.Tensor


@dataclass(frozen=True)
class Shape:
    """What the mapping needs to know of the model."""

    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_kv_heads: int
    vocab_size: int  # the tokenizer's (Hugging Face's vocab_size)
    padded_vocab_size: int  # GPT-NeoX's
    tied: bool
    tp: int = 1

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    def check(self) -> None:
        for what, n in (
            ("num_attention_heads", self.num_attention_heads),
            ("num_kv_heads", self.num_kv_heads),
        ):
            if n % self.tp:
                raise ValueError(f"{what} {n} is not divisible by the tensor parallel size {self.tp}")
        if self.padded_vocab_size % self.tp or self.padded_vocab_size < self.vocab_size:
            raise ValueError(f"padded vocabulary {self.padded_vocab_size} does not fit tp {self.tp}")


def layer_prefix(i: int) -> str:
    return f"sequential.{i + 2}."


def _rank(t: Tensor, tp: int, r: int, dim: int) -> Tensor:
    return torch.chunk(t, tp, dim=dim)[r].contiguous()


def _pad_rows(t: Tensor, rows: int) -> Tensor:
    return t if t.shape[0] == rows else torch.cat([t, t.new_zeros(rows - t.shape[0], *t.shape[1:])])


def fuse_qkv(q: Tensor, k: Tensor, v: Tensor, shape: Shape, r: int) -> Tensor:
    """Rank ``r``'s ``query_key_value`` from Hugging Face's q, k and v projections."""
    tp, d = shape.tp, shape.head_dim
    q, k, v = (_rank(t, tp, r, 0) for t in (q, k, v))
    if shape.num_kv_heads != shape.num_attention_heads:
        return torch.cat([q, k, v])
    heads = shape.num_attention_heads // tp
    return torch.stack([t.view(heads, d, -1) for t in (q, k, v)], dim=1).reshape(heads * 3 * d, -1)


def split_qkv(ranks: list[Tensor], shape: Shape) -> tuple[Tensor, Tensor, Tensor]:
    """Hugging Face's q, k and v projections from every rank's ``query_key_value``."""
    d, tp = shape.head_dim, shape.tp
    heads, kv = shape.num_attention_heads // tp, shape.num_kv_heads // tp
    parts: list[tuple[Tensor, ...]] = []
    for w in ranks:
        if shape.num_kv_heads != shape.num_attention_heads:
            parts.append(tuple(w.split([heads * d, kv * d, kv * d])))
        else:
            q, k, v = w.view(heads, 3, d, -1).unbind(1)
            parts.append(tuple(t.reshape(heads * d, -1) for t in (q, k, v)))
    q, k, v = (torch.cat([p[j] for p in parts]) for j in range(3))
    return q, k, v


def to_neox(get: Callable[[str], Tensor], shape: Shape, r: int) -> Iterator[tuple[str, Tensor]]:
    """Rank ``r``'s GPT-NeoX tensors, one at a time, from ``get(hf_name)``."""
    shape.check()
    tp = shape.tp
    yield (
        "sequential.0.word_embeddings.weight",
        _rank(_pad_rows(get("model.embed_tokens.weight"), shape.padded_vocab_size), tp, r, 0),
    )
    for i in range(shape.num_layers):
        hf, neox = f"model.layers.{i}.", layer_prefix(i)
        yield neox + "input_layernorm.scale", get(hf + "input_layernorm.weight").clone()
        qkv = [get(hf + f"self_attn.{p}_proj.weight") for p in "qkv"]
        yield neox + "attention.query_key_value.weight", fuse_qkv(*qkv, shape, r)
        yield neox + "attention.dense.weight", _rank(get(hf + "self_attn.o_proj.weight"), tp, r, 1)
        yield neox + "post_attention_layernorm.scale", get(hf + "post_attention_layernorm.weight").clone()
        up, gate = (_rank(get(hf + f"mlp.{p}_proj.weight"), tp, r, 0) for p in ("up", "gate"))
        yield neox + "mlp.linear1.weight", torch.cat([up, gate])
        yield neox + "mlp.linear2.weight", _rank(get(hf + "mlp.down_proj.weight"), tp, r, 1)
    n = shape.num_layers
    yield f"sequential.{n + 3}.norm.scale", get("model.norm.weight").clone()
    if not shape.tied:
        head = _pad_rows(get("lm_head.weight"), shape.padded_vocab_size)
        yield f"sequential.{n + 4}.final_linear.weight", _rank(head, tp, r, 0)


def to_hf(get: Callable[[int, str], Tensor], shape: Shape) -> Iterator[tuple[str, Tensor]]:
    """Hugging Face's tensors, one at a time, from ``get(rank, neox_name)``; norms must agree on all ranks."""
    shape.check()
    ranks = range(shape.tp)

    def joined(name: str, dim: int) -> Tensor:
        return torch.cat([get(r, name) for r in ranks], dim=dim)

    def same(name: str) -> Tensor:
        first = get(0, name)
        for r in ranks[1:]:
            if not torch.equal(get(r, name), first):
                raise ValueError(f"{name} differs between tensor parallel ranks 0 and {r}")
        return first

    yield "model.embed_tokens.weight", joined("sequential.0.word_embeddings.weight", 0)[: shape.vocab_size]
    for i in range(shape.num_layers):
        hf, neox = f"model.layers.{i}.", layer_prefix(i)
        yield hf + "input_layernorm.weight", same(neox + "input_layernorm.scale")
        q, k, v = split_qkv([get(r, neox + "attention.query_key_value.weight") for r in ranks], shape)
        yield from ((hf + f"self_attn.{p}_proj.weight", t) for p, t in zip("qkv", (q, k, v), strict=True))
        yield hf + "self_attn.o_proj.weight", joined(neox + "attention.dense.weight", 1)
        yield hf + "post_attention_layernorm.weight", same(neox + "post_attention_layernorm.scale")
        halves = [get(r, neox + "mlp.linear1.weight").chunk(2) for r in ranks]
        yield hf + "mlp.gate_proj.weight", torch.cat([h[1] for h in halves])
        yield hf + "mlp.up_proj.weight", torch.cat([h[0] for h in halves])
        yield hf + "mlp.down_proj.weight", joined(neox + "mlp.linear2.weight", 1)
    n = shape.num_layers
    yield "model.norm.weight", same(f"sequential.{n + 3}.norm.scale")
    if not shape.tied:
        yield "lm_head.weight", joined(f"sequential.{n + 4}.final_linear.weight", 0)[: shape.vocab_size]


def shape_of(config: dict, padded_vocab_size: int, tp: int = 1) -> Shape:
    """The mapping's ``Shape`` of a Hugging Face LLaMA config."""
    keys = neox_model_keys(config)
    return Shape(
        num_layers=keys["num_layers"],
        hidden_size=keys["hidden_size"],
        num_attention_heads=keys["num_attention_heads"],
        num_kv_heads=keys["num_kv_heads"],
        vocab_size=int(config["vocab_size"]),
        padded_vocab_size=padded_vocab_size,
        tied=not keys["no_weight_tying"],
        tp=tp,
    )
