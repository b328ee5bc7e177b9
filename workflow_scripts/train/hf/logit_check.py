"""The check every model conversion records: the same tokens through the source and through the result.

``reference_logits`` runs the reference model (train/reference/model) on a GPT-NeoX checkpoint folder or a
Megatron-LM ``torch_dist`` folder,
``hf_logits`` runs ``transformers`` on a Hugging Face folder, and ``compare`` gives the largest absolute
difference and that relative to the largest logit. One model is in memory at a time; the checkpoint's
files are memory-mapped.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from workflow_scripts.train.hf import layout

if TYPE_CHECKING:
    from workflow_scripts.train.reference.run_config import ModelConfig

TOLERANCE = {"max_abs": 1e-3, "max_rel": 1e-3}  # fp32 logits of the same weights
CHECK_TOKENS = 64


def check_tokens(vocab: int, n: int, seed: int = 0) -> torch.Tensor:
    """Two rows of ``n`` token ids below ``vocab``, the same for a seed."""
    return torch.randint(0, vocab, (2, n), generator=torch.Generator().manual_seed(seed))


def neox_state(ckpt: str, shape: layout.Shape) -> dict[str, torch.Tensor]:
    """The checkpoint's weights as one rank (tensor-parallel ranks merged), under the sequential names."""
    from workflow_scripts.train.reference.checkpoints import neox_weights

    if shape.tp == 1:
        return neox_weights(ckpt, 0)
    ranks = [neox_weights(ckpt, r) for r in range(shape.tp)]
    merged = dict(layout.to_hf(lambda r, name: ranks[r][name], shape))
    one = layout.Shape(**{**shape.__dict__, "tp": 1})
    return dict(layout.to_neox(merged.__getitem__, one, 0))


def megatron_state(folder: str, cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """A ``torch_dist`` folder's weights under the reference model's names."""
    from workflow_scripts.train.hf.megatron_layout import from_megatron
    from workflow_scripts.train.megatron_checkpoint import load_weights

    return from_megatron(load_weights(folder), cfg)


def reference_logits(
    ckpt: str, cfg: ModelConfig, shape: layout.Shape, tokens: torch.Tensor, trainer: str = "neox"
) -> torch.Tensor:
    """The reference model ``cfg``'s logits (cut to the tokenizer's vocabulary, in eval mode) on the weights
    in ``ckpt``: a GPT-NeoX checkpoint or (``trainer`` megatron) a Megatron-LM ``torch_dist`` folder."""
    from workflow_scripts.train.reference.model import GPT

    gpt = GPT(cfg)
    state = megatron_state(ckpt, cfg) if trainer == "megatron" else neox_state(ckpt, shape)
    gpt.load_state_dict(state, strict=True)
    with torch.no_grad():
        return gpt.eval()(tokens)[..., : shape.vocab_size]


def hf_logits(hf_dir: str, tokens: torch.Tensor) -> torch.Tensor:
    """``transformers``' logits of the Hugging Face folder ``hf_dir`` (fp32, offline)."""
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(
        hf_dir, dtype=torch.float32, local_files_only=True
    )
    with torch.no_grad():
        return model.eval()(tokens).logits


def compare(got: torch.Tensor, expected: torch.Tensor) -> dict[str, float]:
    """The largest absolute difference, and that relative to the largest expected logit."""
    diff = float((got - expected).abs().max())
    return {"max_abs": diff, "max_rel": diff / max(float(expected.abs().max()), 1e-12)}


def within(result: dict[str, float]) -> bool:
    return all(result[k] <= TOLERANCE[k] for k in TOLERANCE)
