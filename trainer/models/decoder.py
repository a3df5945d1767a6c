"""The Llama-family decoder: RMSNorm, GQA attention with RoPE, SwiGLU MLP, Hugging Face names (RMSNorm and
the attention functions live in layers.py, shared with DeepSeek-V3's latent attention in deepseek.py).

Free of parallelism: attention infers its local head counts from the projected activations, so
tensor parallel (which shards q/k/v column-wise) needs no change here (as in torchtitan).
Parameter names equal transformers' `LlamaForCausalLM` / `Qwen2ForCausalLM` / `Qwen3ForCausalLM`,
so Hugging Face state dicts load by name.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from trainer.fused.ops import rotary, silu_mul
from trainer.models.config import DecoderConfig
from trainer.models.deepseek import LatentAttention
from trainer.models.layers import ATTENTION_FUNCTIONS, RMSNorm, eager_attention, sdpa_attention  # noqa: F401
from trainer.models.moe import MoE, share_switch_pools
from trainer.models.rope import RotaryEmbedding


def _window_mask(seq_len: int, window: int, device: torch.device) -> torch.Tensor:
    """Boolean [T, T] mask, True where query i may attend key j: causal and i - j < window."""
    i = torch.arange(seq_len, device=device)[:, None]
    j = torch.arange(seq_len, device=device)[None, :]
    return (j <= i) & (i - j < window)


class Attention(nn.Module):
    def __init__(self, config: DecoderConfig, layer_idx: int):
        super().__init__()
        h, d = config.hidden_size, config.head_dim
        self.head_dim = d
        self.sliding_window = config.layer_sliding_window(layer_idx)
        self.attn_implementation = config.attn_implementation
        self.kernels = config.kernels
        # Context parallel sets it (trainer/distributed/context_parallel.py): attention of this rank's queries
        # over the keys and values of the whole sequence.
        self.kv_exchange = None
        self.q_proj = nn.Linear(h, config.num_attention_heads * d, bias=config.qkv_bias)
        self.k_proj = nn.Linear(h, config.num_key_value_heads * d, bias=config.qkv_bias)
        self.v_proj = nn.Linear(h, config.num_key_value_heads * d, bias=config.qkv_bias)
        self.o_proj = nn.Linear(config.num_attention_heads * d, h, bias=config.o_proj_bias)
        if config.qk_norm:
            self.q_norm = RMSNorm(d, config.rms_norm_eps, config.kernels)
            self.k_norm = RMSNorm(d, config.rms_norm_eps, config.kernels)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        bsz, seq_len, _ = x.shape
        # -1 heads: under tensor parallel the projections hold only this rank's heads.
        q = self.q_proj(x).view(bsz, seq_len, -1, self.head_dim)
        k = self.k_proj(x).view(bsz, seq_len, -1, self.head_dim)
        v = self.v_proj(x).view(bsz, seq_len, -1, self.head_dim)
        if hasattr(self, "q_norm"):
            q, k = self.q_norm(q), self.k_norm(k)
        # RoPE before the transpose: q and k stay [B, T, heads, d] in memory, so SDPA's output does
        # too and the reshape for o_proj below is a view instead of a copy (trainer/fused/ops.py).
        q, k = rotary(q, k, cos, sin, self.kernels, heads_dim=2)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        attention = ATTENTION_FUNCTIONS[self.attn_implementation]
        if self.kv_exchange is not None:  # context parallel: this rank's queries over the whole sequence
            out = self.kv_exchange(q, k, v, self.sliding_window, attention)
        else:
            mask = None
            if self.sliding_window is not None and seq_len > self.sliding_window:
                mask = _window_mask(seq_len, self.sliding_window, x.device)
            out = attention(q, k, v, mask)
        out = out.transpose(1, 2).reshape(bsz, seq_len, -1)
        return self.o_proj(out)


class SwiGLU(nn.Module):
    """down(silu(gate(x)) * up(x)) (Shazeer 2020, "GLU Variants Improve Transformer"); `intermediate_size`
    other than the config's: the shared experts of Qwen2-MoE and DeepSeek-V3."""

    def __init__(self, config: DecoderConfig, intermediate_size: Optional[int] = None):
        super().__init__()
        inner = config.intermediate_size if intermediate_size is None else intermediate_size
        self.gate_proj = nn.Linear(config.hidden_size, inner, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, inner, bias=False)
        self.down_proj = nn.Linear(inner, config.hidden_size, bias=False)
        self.kernels = config.kernels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(silu_mul(self.gate_proj(x), self.up_proj(x), self.kernels))


def _moe(config: DecoderConfig) -> MoE:
    """An MoE layer, with Qwen2-MoE's gated shared expert (a dense SwiGLU of
    `shared_expert_intermediate_size`) or DeepSeek-V3's ungated shared experts when the config has them."""
    moe = config.moe
    gated = SwiGLU(config, moe.shared_expert_intermediate_size) if moe.shared_expert_intermediate_size else None
    shared = SwiGLU(config, moe.shared_intermediate_size) if moe.n_shared_experts else None
    return MoE(config.hidden_size, moe, config.kernels, shared_expert=gated, shared_experts=shared)


def _attention(config: DecoderConfig, layer_idx: int) -> nn.Module:
    """GQA attention, or DeepSeek-V3's multi-head latent attention."""
    return Attention(config, layer_idx) if config.mla is None else LatentAttention(config)


class DecoderBlock(nn.Module):
    """Pre-norm block: h = x + attn(norm(x)); out = h + mlp(norm(h))."""

    def __init__(self, config: DecoderConfig, layer_idx: int):
        super().__init__()
        self.self_attn = _attention(config, layer_idx)
        moe = config.moe
        # MoE models keep the dense MLP on the layers their config marks dense (mlp_only_layers, sparse
        # step, first_k_dense_replace).
        sparse = moe is not None and moe.is_moe_layer(layer_idx)
        self.mlp = _moe(config) if sparse else SwiGLU(config)
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps, config.kernels)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps, config.kernels)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        h = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return h + self.mlp(self.post_attention_layernorm(h))


class DecoderModel(nn.Module):
    """The `model.` prefix of Hugging Face names: embeddings, blocks, final norm."""

    def __init__(self, config: DecoderConfig):
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(DecoderBlock(config, i) for i in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps, config.kernels)
        self.rotary_emb = RotaryEmbedding(config)

    def forward(self, input_ids: torch.Tensor, position_ids: Optional[torch.Tensor] = None) -> torch.Tensor:
        if position_ids is None:
            position_ids = torch.arange(input_ids.shape[1], device=input_ids.device).unsqueeze(0)
        h = self.embed_tokens(input_ids)
        cos, sin = self.rotary_emb(position_ids, dtype=h.dtype)
        for block in self.layers:
            h = block(h, cos, sin)
        return self.norm(h)


class CausalLM(nn.Module):
    """Decoder + LM head. `forward` gives logits [B, T, V], or the final-normed hidden [B, T, H]."""

    def __init__(self, config: DecoderConfig):
        super().__init__()
        self.config = config
        self.model = DecoderModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        share_switch_pools(self)

    @property
    def layers(self) -> nn.ModuleList:
        """The decoder blocks, the unit of per-block FSDP, activation checkpointing and compile."""
        return self.model.layers

    def forward(
        self,
        input_ids: torch.Tensor,
        position_ids: Optional[torch.Tensor] = None,
        return_hidden: bool = False,
    ) -> torch.Tensor:
        hidden = self.model(input_ids, position_ids)
        if return_hidden:
            return hidden
        return self.lm_head(hidden)

    def tie_weights(self) -> None:
        """Re-point lm_head at the embedding (after anything that replaced either parameter)."""
        if self.config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
