"""Building blocks shared by the decoder (trainer/models/decoder.py) and DeepSeek-V3's latent attention
(trainer/models/deepseek.py): RMSNorm and the attention functions."""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from trainer.fused.ops import rms_norm


class RMSNorm(nn.Module):
    """y = w * x / sqrt(mean(x^2) + eps) (Zhang & Sennrich 2019), computed in fp32 like transformers.
    `kernels` picks the implementation (trainer/fused/ops.py)."""

    def __init__(self, dim: int, eps: float = 1e-6, kernels: str = "torch"):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps
        self.kernels = kernels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.weight, self.eps, self.kernels)

    def reset_parameters(self) -> None:
        nn.init.ones_(self.weight)


def eager_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: Optional[torch.Tensor], scale: Optional[float] = None
) -> torch.Tensor:
    """softmax(q k^T * scale) v in plain math (scale 1/sqrt(d) by default), the reference the SDPA path must equal."""
    n_rep = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(n_rep, dim=1)
    v = v.repeat_interleave(n_rep, dim=1)
    scores = torch.matmul(q, k.transpose(-2, -1)) * (q.shape[-1] ** -0.5 if scale is None else scale)
    if mask is None:
        t = q.shape[-2]
        mask = torch.ones(t, t, dtype=torch.bool, device=q.device).tril()
    scores = scores.masked_fill(~mask, float("-inf"))
    probs = F.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
    return torch.matmul(probs, v)


def sdpa_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: Optional[torch.Tensor],
                   scale: Optional[float] = None) -> torch.Tensor:
    gqa = q.shape[1] != k.shape[1]
    if mask is None:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa, scale=scale)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=gqa, scale=scale)


ATTENTION_FUNCTIONS = {"sdpa": sdpa_attention, "eager": eager_attention}
