"""DeepSeek-V3's multi-head latent attention (MLA; DeepSeek-AI 2024, "DeepSeek-V2", section 2.1) with
transformers' parameter names (`DeepseekV3Attention`), so Hub checkpoints load by name.

Queries: q_proj, or q_a_proj -> q_a_layernorm -> q_b_proj when `q_lora_rank` is set. Keys and values:
kv_a_proj_with_mqa gives a latent of `kv_lora_rank` (normed by kv_a_layernorm, expanded per head by
kv_b_proj into a non-rotary key and a value) and one rotary key of `qk_rope_head_dim` shared by all heads.
RoPE rotates only the rotary parts; with `rope_interleave` (DeepSeek's checkpoints) its pairs are
(x0, x1), (x2, x3), ..., which de-interleaving turns into the half-split rotation the decoder's RoPE does
(transformers' apply_rotary_pos_emb_interleave computes the same). The softmax scale is
1/sqrt(qk_nope_head_dim + qk_rope_head_dim), with a scaled RoPE's `mscale_all_dim` folded in
(MLAConfig.softmax_scale). The rest of the model (blocks, MoE, norms) is the decoder's (decoder.py).

Not split for tensor or context parallel: the pre-flight refuses both for deepseek_v3
(trainer/contract/attention_checks.py).
"""

from __future__ import annotations

import torch
from torch import nn

from trainer.fused.ops import rotary
from trainer.models.config import DecoderConfig
from trainer.models.layers import ATTENTION_FUNCTIONS, RMSNorm
from trainer.models.mla_config import LATENT_NORM_EPS


def deinterleave(x: torch.Tensor) -> torch.Tensor:
    """(x0, x1, x2, x3, ...) -> (x0, x2, ..., x1, x3, ...): interleaved rotary pairs to the half-split layout."""
    return torch.cat((x[..., 0::2], x[..., 1::2]), dim=-1)


class LatentAttention(nn.Module):
    def __init__(self, config: DecoderConfig):
        super().__init__()
        mla = config.mla
        h, heads, bias = config.hidden_size, config.num_attention_heads, config.attention_bias
        self.nope_dim, self.rope_dim, self.v_dim = mla.qk_nope_head_dim, mla.qk_rope_head_dim, mla.v_head_dim
        self.kv_lora_rank = mla.kv_lora_rank
        self.rope_interleave = mla.rope_interleave
        self.scale = mla.softmax_scale(config.rope_scaling)
        self.attn_implementation = config.attn_implementation
        # Liger's kernels want contiguous rows, and the latent and rotary parts are views of wider
        # projections: those take the plain-torch autograd functions instead.
        self.kernels = "torch" if config.kernels == "liger" else config.kernels
        q_out = heads * mla.qk_head_dim
        if mla.q_lora_rank is None:
            self.q_proj = nn.Linear(h, q_out, bias=False)
        else:
            self.q_a_proj = nn.Linear(h, mla.q_lora_rank, bias=bias)
            self.q_a_layernorm = RMSNorm(mla.q_lora_rank, LATENT_NORM_EPS, self.kernels)
            self.q_b_proj = nn.Linear(mla.q_lora_rank, q_out, bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(h, mla.kv_lora_rank + mla.qk_rope_head_dim, bias=bias)
        self.kv_a_layernorm = RMSNorm(mla.kv_lora_rank, LATENT_NORM_EPS, self.kernels)
        self.kv_b_proj = nn.Linear(mla.kv_lora_rank, heads * (mla.qk_nope_head_dim + mla.v_head_dim), bias=False)
        self.o_proj = nn.Linear(heads * mla.v_head_dim, h, bias=bias)

    def _queries(self, x: torch.Tensor) -> torch.Tensor:
        if hasattr(self, "q_proj"):
            return self.q_proj(x)
        return self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x)))

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        bsz, seq_len, _ = x.shape
        # [B, T, heads, d] throughout, as the decoder's attention: -1 heads, the projections' own layout.
        q = self._queries(x).view(bsz, seq_len, -1, self.nope_dim + self.rope_dim)
        q_pass, q_rot = torch.split(q, [self.nope_dim, self.rope_dim], dim=-1)
        latent, k_rot = torch.split(self.kv_a_proj_with_mqa(x), [self.kv_lora_rank, self.rope_dim], dim=-1)
        kv = self.kv_b_proj(self.kv_a_layernorm(latent)).view(bsz, seq_len, -1, self.nope_dim + self.v_dim)
        k_pass, v = torch.split(kv, [self.nope_dim, self.v_dim], dim=-1)
        k_rot = k_rot.view(bsz, seq_len, 1, self.rope_dim)
        if self.rope_interleave:
            q_rot, k_rot = deinterleave(q_rot), deinterleave(k_rot)
        q_rot, k_rot = rotary(q_rot, k_rot, cos, sin, self.kernels, heads_dim=2)
        q = torch.cat((q_pass, q_rot), dim=-1).transpose(1, 2)
        k = torch.cat((k_pass, k_rot.expand(-1, -1, k_pass.shape[2], -1)), dim=-1).transpose(1, 2)
        attention = ATTENTION_FUNCTIONS[self.attn_implementation]
        out = attention(q, k, v.transpose(1, 2), None, scale=self.scale)
        return self.o_proj(out.transpose(1, 2).reshape(bsz, seq_len, -1))
