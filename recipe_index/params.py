"""Parameter counts from a ModelCard, for memory and FLOP estimates.

Exact (checked against ``transformers``' ``model.num_parameters()`` in tests) for the
Llama, Mistral, Qwen2/Qwen3 and Qwen3-MoE and DeepSeek-V3 layouts:

* embedding ``V·h``; LM head ``V·h`` unless tied; final norm ``h``
* attention ``h·H·d + 2·h·K·d + H·d·h`` (+ q/k/v biases, + o bias outside Qwen2, + ``2·d`` q/k norms)
* MLA (DeepSeek-V2/V3, Kimi K2, Moonlight): ``h·r_q + r_q + r_q·H·(d_nope+d_rope)`` (or
  ``h·H·(d_nope+d_rope)`` without a q rank) ``+ h·(r_kv+d_rope) + r_kv + r_kv·H·(d_nope+d_v) + H·d_v·h``
* gated MLP ``3·h·f``, plain MLP ``2·h·f``; MoE layer: router ``h·E``, ``E`` experts of width
  ``f_e``, shared experts of total width ``f_s`` (Qwen adds a ``h``-sized shared-expert gate);
  the first ``first_k_dense`` layers are dense
* two norms of ``h`` per layer (four in Gemma 2/3)

Approximate (``ParamCounts.exact`` is False):

* Hybrid Mamba-Transformer (Nemotron-H): one layer per pattern letter (``M`` Mamba-2,
  ``*`` attention, ``-`` MLP, ``E`` MoE), each with one norm. A Mamba-2 mixer with ``n`` heads
  of width ``p`` (``d_i = n·p``), state ``N``, ``G = 8`` groups and conv width 4 has
  ``h·(2·d_i + 2·G·N + n) + 5·(d_i + 2·G·N) + 3·n + d_i + d_i·h`` parameters. The group count
  is not in ModelCard; 8 is Nemotron-H's value.
* Gated-DeltaNet linear attention (Qwen3-Next, Qwen3.5) is counted as full attention; the
  experts dominate those models, so totals stay within a few percent.
* gpt-oss attention sinks and expert biases are counted; its alternating sliding window
  does not change the count.

Active parameters count embeddings, the LM head, every non-expert weight and ``top_k``
routed experts per MoE layer (the convention behind DeepSeek-V3's "37B activated").
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from recipe_index.cards import ModelCard

MAMBA_GROUPS = 8  # Nemotron-H n_groups; ModelCard has no field for it
MAMBA_CONV_WIDTH = 4  # Nemotron-H conv_kernel


@dataclass(frozen=True)
class ParamCounts:
    total: int
    active: int
    embedding: int  # input token embeddings (+ learned positions for GPT-2/3)
    output: int  # LM head; 0 when tied to the embeddings
    attention: int  # one attention block (projections, biases, q/k norms)
    dense_mlp: int  # one dense MLP of width intermediate_size
    per_expert: int  # one routed expert
    shared_experts: int  # all shared experts of one MoE layer (with their gate)
    router: int  # one MoE router
    mamba: int  # one Mamba-2 mixer
    per_layer_dense: int  # norms + attention + dense MLP
    per_layer_moe: int  # norms + attention + router + shared + all routed experts
    num_dense_layers: int
    num_moe_layers: int
    num_attention_layers: int
    num_mamba_layers: int
    exact: bool

    @property
    def experts_total(self) -> int:
        return self.per_expert * self.num_moe_layers


def _attention(c: ModelCard) -> int:
    h, H = c.hidden_size, c.num_attention_heads
    if c.uses_mla:
        nope, rope, v = c.qk_nope_head_dim or 0, c.qk_rope_head_dim or 0, c.v_head_dim or c.head_dim
        if c.q_lora_rank:
            q = h * c.q_lora_rank + c.q_lora_rank + c.q_lora_rank * H * (nope + rope)
        else:
            q = h * H * (nope + rope)
        kv = h * (c.kv_lora_rank + rope) + c.kv_lora_rank + c.kv_lora_rank * H * (nope + v)
        return q + kv + H * v * h
    d, K = c.head_dim, c.num_key_value_heads
    n = h * H * d + 2 * h * K * d + H * d * h
    if c.attention_bias:
        n += H * d + 2 * K * d
        if not (c.model_type or "").startswith("qwen2"):
            n += h  # o_proj bias: Llama/Qwen3/gpt-oss apply attention_bias to it, Qwen2 does not
    if c.qk_norm:
        n += 2 * d
    if c.model_type == "gpt_oss":
        n += H  # learned attention sinks, one per head
    return n


def _mlp(c: ModelCard, width: int) -> int:
    n = (3 if c.gated_mlp else 2) * c.hidden_size * width
    if c.model_type in ("gpt2", "gpt3"):
        n += width + c.hidden_size
    return n


def _expert(c: ModelCard) -> int:
    width = c.moe_intermediate_size or c.intermediate_size
    n = (3 if c.gated_mlp else 2) * c.hidden_size * width
    if c.model_type == "gpt_oss":
        n += 2 * width + c.hidden_size  # gate_up and down biases
    return n


def _shared(c: ModelCard) -> int:
    width = c.shared_expert_ffn_total
    if not width:
        return 0
    n = (3 if c.gated_mlp else 2) * c.hidden_size * width
    mt = c.model_type or ""
    if mt.startswith(("qwen2_moe", "qwen3_next", "qwen3_5")):
        n += c.hidden_size  # sigmoid gate on the shared expert
    return n


def _router(c: ModelCard) -> int:
    return c.hidden_size * c.num_experts + (c.num_experts if c.model_type == "gpt_oss" else 0)


def _mamba(c: ModelCard) -> int:
    if not (c.mamba_num_heads and c.mamba_head_dim):
        return 0
    n_heads, h = c.mamba_num_heads, c.hidden_size
    d_inner = n_heads * c.mamba_head_dim
    conv_dim = d_inner + 2 * MAMBA_GROUPS * (c.mamba_state_dim or 128)
    in_proj = h * (d_inner + conv_dim + n_heads)
    conv = conv_dim * (MAMBA_CONV_WIDTH + 1)
    return in_proj + conv + 3 * n_heads + d_inner + d_inner * h


def _norm(c: ModelCard) -> int:
    return 2 * c.hidden_size if c.model_type in ("gpt2", "gpt3") else c.hidden_size  # LayerNorm has a bias


def param_counts(card: ModelCard) -> ParamCounts:
    """Total and active parameters of a model card, with the per-block pieces (see module doc)."""
    c = card
    h, V = c.hidden_size, c.vocab_size
    embedding = V * h + ((c.max_position_embeddings or 0) * h if c.model_type in ("gpt2", "gpt3") else 0)
    output = 0 if c.tie_word_embeddings else V * h
    attention, dense_mlp = _attention(c), _mlp(c, c.intermediate_size)
    per_expert = _expert(c) if c.is_moe else 0
    shared, router = (_shared(c), _router(c)) if c.is_moe else (0, 0)
    mamba = _mamba(c)
    norm = _norm(c)
    norms_per_layer = 4 if (c.model_type or "").startswith(("gemma2", "gemma3")) else 2
    moe_block = router + shared + c.num_experts * per_expert
    moe_block_active = router + shared + c.num_experts_per_tok * per_expert

    mt = c.model_type or ""
    exact = not mt.startswith(("qwen3_next", "qwen3_5"))
    if c.hybrid_layer_pattern:
        exact = False
        pattern = c.hybrid_layer_pattern
        blocks = {
            "M": (mamba, mamba),
            "*": (attention, attention),
            "-": (dense_mlp, dense_mlp),
            "E": (moe_block, moe_block_active),
        }
        body = sum(blocks.get(ch, (0, 0))[0] + norm for ch in pattern)
        body_active = sum(blocks.get(ch, (0, 0))[1] + norm for ch in pattern)
        n_dense, n_moe = pattern.count("-"), pattern.count("E")
        n_attn, n_mamba = pattern.count("*"), pattern.count("M")
    else:
        n_moe = max(c.num_hidden_layers - c.first_k_dense, 0) if c.is_moe else 0
        n_dense = c.num_hidden_layers - n_moe
        n_attn, n_mamba = c.num_hidden_layers, 0
        layer_norms = norms_per_layer * norm
        body = n_dense * (layer_norms + attention + dense_mlp) + n_moe * (layer_norms + attention + moe_block)
        body_active = n_dense * (layer_norms + attention + dense_mlp) + n_moe * (
            layer_norms + attention + moe_block_active
        )

    total = embedding + output + norm + body
    active = embedding + output + norm + body_active
    return ParamCounts(
        total=total,
        active=active,
        embedding=embedding,
        output=output,
        attention=attention,
        dense_mlp=dense_mlp,
        per_expert=per_expert,
        shared_experts=shared,
        router=router,
        mamba=mamba,
        per_layer_dense=norms_per_layer * norm + attention + dense_mlp,
        per_layer_moe=(norms_per_layer * norm + attention + moe_block) if c.is_moe else 0,
        num_dense_layers=n_dense,
        num_moe_layers=n_moe,
        num_attention_layers=n_attn,
        num_mamba_layers=n_mamba,
        exact=exact,
    )


_PARAMS = re.compile(r"~?\s*([0-9]+(?:\.[0-9]+)?)\s*([KMBT])", re.IGNORECASE)
_SCALE = {"K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12}


def parse_param_count(text: Optional[str]) -> Optional[float]:
    """'671B' -> 6.71e11, '~12B' -> 1.2e10, '120B (...)' -> 1.2e11; None when absent."""
    if not text:
        return None
    m = _PARAMS.search(text)
    return float(m.group(1)) * _SCALE[m.group(2).upper()] if m else None
