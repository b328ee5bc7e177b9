"""A decoder-only transformer in plain torch, shaped and named as GPT-NeoX's model (``ModelConfig``).

Two families from the same keys: the GPT-2 shape (learned positions, LayerNorm, a 4h GELU MLP, biases) and
the LLaMA shape (``pos_emb: rotary`` with ``rotary_emb_base``, ``norm: rmsnorm``, ``activation: swiglu``
with ``intermediate_size``, grouped-query attention with ``num_kv_heads``, no biases, untied output).
Parameters are named as GPT-NeoX's sequential model (``pipe_parallel_size: 0``) names them:
``sequential.0`` the embedding, ``sequential.{i + 2}`` layer ``i``, ``sequential.{N + 3}`` the final norm,
``sequential.{N + 4}`` the output layer when untied; so a DeepSpeed checkpoint of it is GPT-NeoX's. The
fused ``query_key_value`` is GPT-NeoX's too: per head ``[q; k; v]`` without grouped-query attention, and
``[all q; all k; all v]`` with it. Attention is causal, or follows an explicit [b, 1, s, s] mask
(per-document attention). Initialisation follows GPT-NeoX's defaults: normal with ``init_method_std``, the
two output projections of each block scaled by ``1 / sqrt(2 x num_layers)``; biases zero, norms one.
Norms and biases get no weight decay (GPT-NeoX's parameter groups).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from workflow_scripts.train.reference.run_config import ModelConfig


class RMSNorm(nn.Module):
    """GPT-NeoX's RMSNorm: ``x / sqrt(mean(x^2) + eps) x scale`` (computed in fp32)."""

    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.scale = nn.Parameter(torch.ones(size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        normed = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.scale * normed.to(x.dtype)


def norm(cfg: ModelConfig) -> nn.Module:
    if cfg.norm == "rmsnorm":
        return RMSNorm(cfg.hidden_size, cfg.norm_epsilon)
    return nn.LayerNorm(cfg.hidden_size, eps=cfg.norm_epsilon, bias=cfg.norm_bias)


class Rotary(nn.Module):
    """Rotary embeddings on the first ``rotary_pct`` of each head's dimensions (rotate-half, as GPT-NeoX and
    Hugging Face LLaMA apply them); the frequencies are not saved."""

    def __init__(self, head_dim: int, pct: float, base: float) -> None:
        super().__init__()
        self.dims = int(head_dim * pct)
        inv_freq = 1.0 / (base ** (torch.arange(0, self.dims, 2, dtype=torch.int64).float() / self.dims))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` [b, heads, s, head_dim] rotated by position."""
        positions = torch.arange(x.shape[2], device=x.device, dtype=torch.float32)
        freqs = torch.outer(positions, self.inv_freq.float())
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
        rot, rest = x[..., : self.dims], x[..., self.dims :]
        half = rot.shape[-1] // 2
        rotated = torch.cat((-rot[..., half:], rot[..., :half]), dim=-1)
        return torch.cat((rot * cos + rotated * sin, rest), dim=-1)


class Attention(nn.Module):
    """Self-attention with GPT-NeoX's fused ``query_key_value`` and optional grouped-query attention."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.heads, self.kv_heads = cfg.num_attention_heads, cfg.kv_heads
        self.head_dim = cfg.hidden_size // cfg.num_attention_heads
        out = (self.heads + 2 * self.kv_heads) * self.head_dim
        self.query_key_value = nn.Linear(cfg.hidden_size, out, bias=cfg.attn_bias)
        self.dense = nn.Linear(cfg.hidden_size, cfg.hidden_size, bias=cfg.attn_bias)
        self.rotary = Rotary(self.head_dim, cfg.rotary_pct, cfg.rotary_emb_base) if cfg.rotary else None
        self.dropout = cfg.attention_dropout

    def split(self, qkv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """[b, s, out] -> q [b, heads, s, d], k and v [b, heads, s, d] (k/v heads repeated per group)."""
        b, s, _ = qkv.shape
        d = self.head_dim
        if self.kv_heads == self.heads:  # per head [q; k; v]
            q, k, v = qkv.view(b, s, self.heads, 3, d).permute(3, 0, 2, 1, 4)
            return q, k, v
        q, k, v = qkv.split([self.heads * d, self.kv_heads * d, self.kv_heads * d], dim=-1)
        group = self.heads // self.kv_heads
        q = q.view(b, s, self.heads, d).transpose(1, 2)
        k, v = (t.view(b, s, self.kv_heads, d).transpose(1, 2) for t in (k, v))
        return q, k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        b, s, h = x.shape
        q, k, v = self.split(self.query_key_value(x))
        if self.rotary is not None:
            q, k = self.rotary(q), self.rotary(k)
        out = F.scaled_dot_product_attention(
            q,
            k,
            v,
            attn_mask=mask,
            dropout_p=self.dropout if self.training else 0.0,
            is_causal=mask is None,
        )
        return self.dense(out.transpose(1, 2).reshape(b, s, h))


class MLP(nn.Module):
    """GPT-NeoX's ParallelMLP: GELU, or SwiGLU with ``linear1`` = [up; gate] and ``silu(gate) x up``."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.gated = cfg.activation == "swiglu"
        self.linear1 = nn.Linear(cfg.hidden_size, cfg.ffn_size, bias=cfg.mlp_bias)
        self.linear2 = nn.Linear(cfg.ffn_in_size, cfg.hidden_size, bias=cfg.mlp_bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = self.linear1(x)
        if self.gated:
            up, gate = hidden.chunk(2, dim=-1)
            return self.linear2(F.silu(gate) * up)
        return self.linear2(F.gelu(hidden))


class Layer(nn.Module):
    """One pre-norm transformer layer."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.input_layernorm = norm(cfg)
        self.attention = Attention(cfg)
        self.post_attention_layernorm = norm(cfg)
        self.mlp = MLP(cfg)
        self.dropout = nn.Dropout(cfg.hidden_dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        x = x + self.dropout(self.attention(self.input_layernorm(x), mask))
        return x + self.dropout(self.mlp(self.post_attention_layernorm(x)))


class Embedding(nn.Module):
    """Token embeddings, plus learned position embeddings in the GPT-2 shape."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.position_embeddings = (
            nn.Embedding(cfg.max_position_embeddings, cfg.hidden_size) if cfg.pos_emb == "learned" else None
        )

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.word_embeddings(tokens)
        if self.position_embeddings is not None:
            x = x + self.position_embeddings(torch.arange(tokens.shape[1], device=tokens.device))[None]
        return x


class FinalNorm(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.norm = norm(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x)


class FinalLinear(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.final_linear = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)


class GPT(nn.Module):
    """Token ids [b, s] -> logits [b, s, vocab]."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        n = cfg.num_layers
        parts: list[nn.Module] = [Embedding(cfg), nn.Identity(), *(Layer(cfg) for _ in range(n))]
        parts += [nn.Identity(), FinalNorm(cfg)]  # the Identity()s: GPT-NeoX's parameterless blocks
        if not cfg.tied:
            parts.append(FinalLinear(cfg))
        self.sequential = nn.ModuleList(parts)
        self.dropout = nn.Dropout(cfg.hidden_dropout)
        self._init_weights()

    @property
    def layers(self) -> list[Layer]:
        return list(self.sequential[2 : 2 + self.cfg.num_layers])

    def _init_weights(self) -> None:
        std = self.cfg.init_method_std
        scaled = std / math.sqrt(2.0 * self.cfg.num_layers)
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif p.dim() == 1:  # norm weights
                nn.init.ones_(p)
            elif name.endswith(("attention.dense.weight", "mlp.linear2.weight")):
                nn.init.normal_(p, 0.0, scaled)
            else:
                nn.init.normal_(p, 0.0, std)

    def forward(self, tokens: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        n = self.cfg.num_layers
        x = self.dropout(self.sequential[0](tokens))
        for layer in self.layers:
            x = layer(x, attention_mask)
        x = self.sequential[n + 3](x)
        embed = self.sequential[0].word_embeddings.weight
        return F.linear(x, embed if self.cfg.tied else self.sequential[n + 4].final_linear.weight)

    def parameter_groups(self, weight_decay: float) -> list[dict]:
        """GPT-NeoX's groups: weight decay on matrices, none on biases and norms (``wd_mult``, Megatron-LM's
        name, scales a scheduled weight decay by group: 1 and 0)."""
        decay = [p for p in self.parameters() if p.dim() > 1]
        no_decay = [p for p in self.parameters() if p.dim() <= 1]
        return [
            {"params": decay, "weight_decay": weight_decay, "wd_mult": 1.0},
            {"params": no_decay, "weight_decay": 0.0, "wd_mult": 0.0},
        ]


def token_losses(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """[b, s] cross entropy of each target (in fp32)."""
    return F.cross_entropy(logits.float().transpose(1, 2), labels, reduction="none")


def masked_mean(losses: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """GPT-NeoX's loss: ``sum(losses x mask) / sum(mask)`` (0 when nothing counts)."""
    return (losses * mask).sum() / mask.sum().clamp(min=1.0)
