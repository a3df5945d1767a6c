"""`MLAConfig`: DeepSeek-V3's multi-head latent attention (MLA) in `config.json` terms.

Pure Python (no torch) like `MoEConfig`. Queries come from a low-rank latent (`q_lora_rank`: q_a_proj,
q_a_layernorm, q_b_proj; null: one q_proj), keys and values from a shared latent of `kv_lora_rank`
(kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj) plus one rotary key of `qk_rope_head_dim` shared by all
heads. Each head's query and key are a non-rotary part (`qk_nope_head_dim`) and a rotary part
(`qk_rope_head_dim`); values are `v_head_dim` wide. Defaults are transformers' DeepseekV3Config's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from trainer.models.moe_config import MoEConfigError, positive_int
from trainer.models.rope_scaling import yarn_mscale

MLA_DEFAULTS = {"q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
                "v_head_dim": 128, "rope_interleave": True}
MLA_KEYS = tuple(MLA_DEFAULTS) + ("qk_head_dim",)
# transformers builds the latent norms with DeepseekV3RMSNorm's default eps, not rms_norm_eps.
LATENT_NORM_EPS = 1e-6


class MLAConfigError(MoEConfigError):
    """A DeepSeek-V3 attention config the bundled trainer cannot build; the message names the key."""


@dataclass
class MLAConfig:
    q_lora_rank: Optional[int]
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    # DeepSeek's checkpoints keep each rotary pair interleaved (x0, x1), (x2, x3), ...; false: half-split.
    rope_interleave: bool = True

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    def attention_parameters(self, hidden_size: int, heads: int, bias: bool) -> int:
        """Parameters of one MLA layer (latent norms and, with `attention_bias`, the a-projections' and
        o_proj's biases included)."""
        h, rq, rkv = hidden_size, self.q_lora_rank, self.kv_lora_rank
        q_out = heads * self.qk_head_dim
        q = h * q_out if rq is None else h * rq + rq + rq * q_out + (rq if bias else 0)
        kv_a = h * (rkv + self.qk_rope_head_dim) + rkv + ((rkv + self.qk_rope_head_dim) if bias else 0)
        kv_b = rkv * heads * (self.qk_nope_head_dim + self.v_head_dim)
        o = heads * self.v_head_dim * h + (h if bias else 0)
        return q + kv_a + kv_b + o

    def softmax_scale(self, rope_scaling: Optional[dict[str, Any]]) -> float:
        """1/sqrt(qk_head_dim), times mscale^2 when a scaled RoPE sets `mscale_all_dim` (transformers'
        yarn_apply_mscale: DeepSeek scales the whole q k^T, not only the rotary part)."""
        scale = self.qk_head_dim**-0.5
        mscale_all_dim = (rope_scaling or {}).get("mscale_all_dim")
        if mscale_all_dim:
            scale *= yarn_mscale(rope_scaling["factor"], mscale_all_dim) ** 2
        return scale


def read_mla(cfg: dict[str, Any]) -> Optional[MLAConfig]:
    """The MLA part of a DeepSeek-V3 config.json mapping (None for other families)."""
    if cfg.get("model_type") != "deepseek_v3":
        return None
    cfg = {**MLA_DEFAULTS, **cfg}
    heads, kv_heads = cfg.get("num_attention_heads"), cfg.get("num_key_value_heads")
    if kv_heads is not None and kv_heads != heads:
        raise MLAConfigError(f"num_key_value_heads: {kv_heads} differs from num_attention_heads ({heads}); MLA "
                             "expands its latent into one key and value per head: set them equal")
    q_lora_rank = cfg["q_lora_rank"]
    mla = MLAConfig(q_lora_rank=None if q_lora_rank is None else positive_int(cfg, "q_lora_rank"),
                    kv_lora_rank=positive_int(cfg, "kv_lora_rank"),
                    qk_nope_head_dim=positive_int(cfg, "qk_nope_head_dim"),
                    qk_rope_head_dim=positive_int(cfg, "qk_rope_head_dim"),
                    v_head_dim=positive_int(cfg, "v_head_dim"), rope_interleave=bool(cfg["rope_interleave"]))
    if mla.qk_rope_head_dim % 2:
        raise MLAConfigError(f"qk_rope_head_dim: {mla.qk_rope_head_dim} must be even for rotary embeddings")
    return mla


def mla_hf_keys(mla: MLAConfig) -> dict[str, Any]:
    """The config.json keys transformers reads for MLA."""
    return {"q_lora_rank": mla.q_lora_rank, "kv_lora_rank": mla.kv_lora_rank, "qk_nope_head_dim": mla.qk_nope_head_dim,
            "qk_rope_head_dim": mla.qk_rope_head_dim, "v_head_dim": mla.v_head_dim,
            "rope_interleave": mla.rope_interleave}
