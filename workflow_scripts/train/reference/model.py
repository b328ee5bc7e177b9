"""A decoder-only GPT in plain torch, shaped by the GPT-NeoX keys (``ModelConfig``).

Learned position embeddings, pre-LayerNorm blocks (attention, then a 4h GELU MLP), a final LayerNorm and
an output layer tied to the token embedding unless ``no_weight_tying``. Attention is causal, or follows an
explicit [b, 1, s, s] mask (per-document attention). Initialisation follows GPT-NeoX's defaults: normal with
``init_method_std``, the two output projections of each block scaled by ``1 / sqrt(2 x num_layers)``; biases
zero. Layer norms and biases get no weight decay (GPT-NeoX's parameter groups).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from workflow_scripts.train.reference.config import ModelConfig


class Attention(nn.Module):
    """Multi-head self-attention."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.heads = cfg.num_attention_heads
        self.qkv = nn.Linear(cfg.hidden_size, 3 * cfg.hidden_size)
        self.dense = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.dropout = cfg.attention_dropout

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        b, s, h = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, h // self.heads).permute(2, 0, 3, 1, 4)
        out = F.scaled_dot_product_attention(
            q,
            k,
            v,
            attn_mask=mask,
            dropout_p=self.dropout if self.training else 0.0,
            is_causal=mask is None,
        )
        return self.dense(out.transpose(1, 2).reshape(b, s, h))


class Block(nn.Module):
    """One pre-LayerNorm transformer layer."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        h, eps = cfg.hidden_size, cfg.layernorm_epsilon
        self.ln_attention = nn.LayerNorm(h, eps=eps)
        self.attention = Attention(cfg)
        self.ln_mlp = nn.LayerNorm(h, eps=eps)
        self.mlp_in = nn.Linear(h, 4 * h)
        self.mlp_out = nn.Linear(4 * h, h)
        self.dropout = nn.Dropout(cfg.hidden_dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        x = x + self.dropout(self.attention(self.ln_attention(x), mask))
        return x + self.dropout(self.mlp_out(F.gelu(self.mlp_in(self.ln_mlp(x)))))


class GPT(nn.Module):
    """Token ids [b, s] -> logits [b, s, vocab]."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.position = nn.Embedding(cfg.max_position_embeddings, cfg.hidden_size)
        self.dropout = nn.Dropout(cfg.hidden_dropout)
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.num_layers))
        self.ln_final = nn.LayerNorm(cfg.hidden_size, eps=cfg.layernorm_epsilon)
        self.output = None if cfg.tied else nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self._init_weights()

    def _init_weights(self) -> None:
        std = self.cfg.init_method_std
        scaled = std / math.sqrt(2.0 * self.cfg.num_layers)
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif p.dim() == 1:  # layer norm weights
                nn.init.ones_(p)
            elif name.endswith(("dense.weight", "mlp_out.weight")):
                nn.init.normal_(p, 0.0, scaled)
            else:
                nn.init.normal_(p, 0.0, std)

    def forward(self, tokens: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.dropout(self.embed(tokens) + self.position(positions)[None])
        for layer in self.layers:
            x = layer(x, attention_mask)
        x = self.ln_final(x)
        weight = self.embed.weight if self.output is None else self.output.weight
        return F.linear(x, weight)

    def parameter_groups(self, weight_decay: float) -> list[dict]:
        """GPT-NeoX's groups: weight decay on matrices, none on biases and layer norms."""
        decay = [p for p in self.parameters() if p.dim() > 1]
        no_decay = [p for p in self.parameters() if p.dim() <= 1]
        return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def token_losses(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """[b, s] cross entropy of each target (in fp32)."""
    return F.cross_entropy(logits.float().transpose(1, 2), labels, reduction="none")


def masked_mean(losses: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """GPT-NeoX's loss: ``sum(losses x mask) / sum(mask)`` (0 when nothing counts)."""
    return (losses * mask).sum() / mask.sum().clamp(min=1.0)
