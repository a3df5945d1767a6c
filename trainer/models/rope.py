"""Rotary position embeddings (RoFormer, Su et al. 2021) with the scalings Llama-family configs use.

Frequencies follow Hugging Face `modeling_rope_utils`: inv_freq_i = theta^(-2i/d); "linear" divides
them by `factor`; "llama3" (Llama 3.1) divides low frequencies (wavelength > L/low_freq_factor) by
`factor`, keeps high ones (wavelength < L/high_freq_factor) and interpolates smoothly between, with
L = original_max_position_embeddings; "yarn" blends interpolated (divided by `factor`) and original
frequencies along a ramp over the rotary dimensions and multiplies cos and sin by its attention factor
(trainer/models/rope_scaling.py).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from trainer.fused.ops import rotary_reference as apply_rotary  # noqa: F401  (the reference, re-exported)
from trainer.fused.ops import rotate_half  # noqa: F401
from trainer.models.config import DecoderConfig
from trainer.models.rope_scaling import yarn_attention_factor, yarn_correction_range


def inverse_frequencies(config: DecoderConfig, device: torch.device | None = None) -> torch.Tensor:
    dim = config.head_dim
    exponents = torch.arange(0, dim, 2, dtype=torch.int64, device=device).float() / dim
    inv_freq = 1.0 / (config.rope_theta**exponents)
    scaling = config.rope_scaling or {}
    if config.rope_type == "linear":
        return inv_freq / scaling["factor"]
    if config.rope_type == "llama3":
        return _llama3_scaled(inv_freq, scaling)
    if config.rope_type == "yarn":
        return _yarn_scaled(inv_freq, scaling, dim, config.rope_theta)
    return inv_freq


def _yarn_scaled(inv_freq: torch.Tensor, scaling: dict, dim: int, theta: float) -> torch.Tensor:
    low, high = yarn_correction_range(scaling, dim, theta)
    if low == high:
        high += 0.001  # as transformers: no zero-width ramp
    ramp = ((torch.arange(dim // 2, dtype=torch.float32, device=inv_freq.device) - low) / (high - low)).clamp(0, 1)
    extrapolated = 1 - ramp  # 1 on the fast (high-frequency) dimensions, which keep their frequency
    return inv_freq / scaling["factor"] * (1 - extrapolated) + inv_freq * extrapolated


def attention_factor(config: DecoderConfig) -> float:
    """What cos and sin are multiplied by: YaRN's attention factor, 1 for the other scalings."""
    return yarn_attention_factor(config.rope_scaling) if config.rope_type == "yarn" else 1.0


def _llama3_scaled(inv_freq: torch.Tensor, scaling: dict) -> torch.Tensor:
    factor = scaling["factor"]
    low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
    old_context = scaling["original_max_position_embeddings"]
    low_freq_wavelen, high_freq_wavelen = old_context / low, old_context / high
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth = (old_context / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    is_medium = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(is_medium, smoothed, scaled)


class RotaryEmbedding(nn.Module):
    """Computes (cos, sin) [B, T, head_dim] for position ids.

    Holds no buffer on purpose: a model built on the meta device needs nothing re-initialised after
    `to_empty`, and the frequencies (head_dim/2 numbers) cost nothing to recompute per step.
    """

    def __init__(self, config: DecoderConfig):
        super().__init__()
        self.config = config

    def forward(self, position_ids: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        inv_freq = inverse_frequencies(self.config, device=position_ids.device)
        freqs = position_ids[..., None].float() * inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)
        factor = attention_factor(self.config)
        if factor != 1.0:
            return (emb.cos() * factor).to(dtype), (emb.sin() * factor).to(dtype)
        return emb.cos().to(dtype), emb.sin().to(dtype)
