"""YaRN's scalars (Peng et al. 2023, "YaRN: Efficient Context Window Extension"), torch-free so that the
config (MLA's softmax scale) and the RoPE module (trainer/models/rope.py) compute them alike, as
transformers' modeling_rope_utils does."""

from __future__ import annotations

import math
from typing import Any

YARN_REQUIRED_KEYS = ("factor", "original_max_position_embeddings")


def yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    """0.1 * mscale * ln(scale) + 1, and 1 for scale <= 1 (transformers' yarn_get_mscale)."""
    if scale <= 1:
        return 1.0
    return 0.1 * mscale * math.log(scale) + 1.0


def yarn_attention_factor(scaling: dict[str, Any]) -> float:
    """What cos and sin are multiplied by: `attention_factor` when given, else mscale(factor, mscale) /
    mscale(factor, mscale_all_dim) when both are set, else mscale(factor)."""
    if scaling.get("attention_factor") is not None:
        return float(scaling["attention_factor"])
    factor, mscale, mscale_all_dim = scaling["factor"], scaling.get("mscale"), scaling.get("mscale_all_dim")
    if mscale and mscale_all_dim:
        return yarn_mscale(factor, mscale) / yarn_mscale(factor, mscale_all_dim)
    return yarn_mscale(factor)


def yarn_correction_range(scaling: dict[str, Any], dim: int, theta: float) -> tuple[float, float]:
    """The rotary dimensions between which YaRN ramps from extrapolation (beta_fast rotations over the
    original context) to interpolation (beta_slow), floored and ceiled unless `truncate` is false."""
    original = scaling["original_max_position_embeddings"]

    def dimension(rotations: float) -> float:
        return dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(theta))

    low, high = dimension(scaling.get("beta_fast") or 32), dimension(scaling.get("beta_slow") or 1)
    if scaling.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    return max(low, 0), min(high, dim - 1)
