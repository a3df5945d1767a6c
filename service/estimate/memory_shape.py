"""The memory estimator's view of a model card: parameter groups and activation bytes per token.

Activations follow Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
Transformer Models", Table 2 (``sbh(34 + 5as/h)`` per layer, ``sbh(10 + 24/t + 5as/ht)`` with TP,
``sbh·34/t`` with TP+SP and selective recompute, ``2sbh`` per layer with full recompute), re-derived
tensor by tensor for current blocks: RMSNorm, no dropout, gated MLP, grouped-query or latent
attention, MoE (each routed copy of a token keeps its expert activations), Mamba-2 mixers, and
fused (flash) attention, which keeps no s x s score matrix, so the ``5as/h`` term is gone.
``service.estimate.memory`` turns these per-token bytes into GiB per GPU for a layout.
"""

from __future__ import annotations

from dataclasses import astuple, dataclass

from recipe_index.cards import ModelCard
from recipe_index.params import MAMBA_GROUPS, param_counts
from service.estimate import constants as C


@dataclass(frozen=True)
class ActivationBytes:
    """Bytes stored per token (summed over a set of layers) before any parallel split, in bf16.

    ``norm_in``: residual-stream tensors kept for the norms (SP splits them over TP);
    ``gemm_in``: the norm outputs that feed column-parallel GEMMs. Megatron keeps them split
    under SP and all-gathers again in backward (Korthikanti et al. 2022, section 4.2.2);
    PyTorch DTensor TP saves the gathered tensor, so there they are not split;
    ``tp`` / ``tp_gemm``: tensors inside the TP-split region (heads, FFN width), the second
    being GEMM inputs (activation outputs);
    ``expert`` / ``expert_gemm``: routed-expert tensors, already multiplied by top-k, the second
    being GEMM inputs (permuted tokens, activation outputs).
    GEMM inputs are what FP8/NVFP4 recipes save quantised (Transformer Engine keeps the cast
    copy for the backward GEMMs), so ``per_gpu`` scales them by the GEMM precision.
    """

    norm_in: float = 0.0
    gemm_in: float = 0.0
    tp: float = 0.0
    tp_gemm: float = 0.0
    expert: float = 0.0
    expert_gemm: float = 0.0

    def __add__(self, other: "ActivationBytes") -> "ActivationBytes":
        return ActivationBytes(*(a + b for a, b in zip(astuple(self), astuple(other))))

    @property
    def total(self) -> float:
        return sum(astuple(self))

    def in_dtypes(self, residual: float, compute: float) -> "ActivationBytes":
        """The same tensors with the residual stream (``norm_in``) at ``residual`` and every other
        tensor at ``compute`` times its bf16 bytes: fp32 parameters under autocast keep an fp32
        residual stream and bf16 GEMM outputs (2, 1); fp32 training keeps everything in fp32 (2, 2)."""
        first, *rest = astuple(self)
        return ActivationBytes(first * residual, *(x * compute for x in rest))

    def per_gpu(self, tp: int, sp: bool, gathered_gemm_inputs: bool = False, gemm_scale: float = 1.0) -> float:
        """Per token on one GPU: TP splits heads/width; SP also splits the sequence-side tensors."""
        seq = self.norm_in / tp if sp else self.norm_in
        gemm = self.gemm_in / tp if sp and not gathered_gemm_inputs else self.gemm_in
        split = self.tp + self.expert + (self.tp_gemm + self.expert_gemm) * gemm_scale
        return seq + gemm * gemm_scale + split / tp


@dataclass(frozen=True)
class ModelShape:
    """What the estimators need from a model card, computed once per card."""

    id: str
    layers: int
    hidden: int
    vocab: int
    embedding_params: int
    head_params: int  # LM head + final norm
    layer_dense_params: int  # all layers: attention/Mamba, norms, dense MLPs, shared experts, routers
    layer_expert_params: int  # all layers: routed experts
    active_expert_params: int  # routed-expert parameters one token passes through (top-k per MoE layer)
    largest_block_params: int  # the biggest layer, for FSDP's unsharded working set
    # Its parts for Megatron-FSDP, which gathers only an EP rank's own experts: the largest layer without
    # routed experts, the largest MoE layer, and that layer's routed experts (0, 0 for a dense model).
    largest_dense_block_params: int
    moe_block_params: int
    block_expert_params: int
    lora_params: int  # LoRA adapters of rank LORA_DEFAULT_RANK on every linear layer
    lora_params_split: int  # the same on separate q/k/v/o/gate/up/down linears (Hugging Face PEFT)
    experts: int
    top_k: int
    moe_layers: int
    expert_width: int
    attention_layers: int
    tp_blocks: int  # blocks with a TP all-gather/reduce-scatter pair each way
    attention_flops_coef: float  # fwd+bwd attention FLOPs per token = coef x sequence length
    kv_bytes_per_token: float  # K and V of one token, summed over attention layers (CP ring traffic)
    min_dense_width: int  # narrowest dense GEMM dimension before TP (for GEMM efficiency)
    act_none: ActivationBytes  # whole model, no recompute
    act_selective: ActivationBytes  # whole model, selective recompute
    act_largest_layer: ActivationBytes  # the largest single layer, no recompute (full-recompute working set)
    # Autocast over fp32 parameters casts a norm output once per projection that reads it (separate
    # q/k/v and gate/up linears, as the bundled trainer's Hugging Face layout has): the extra bf16
    # copies beyond the one gemm_in counts, per token over all layers.
    autocast_extra_input_casts: float
    # The per-head Q and K RMSNorms' inputs and fp32 1/rms, per token over all layers (bf16; 0 without QK
    # norms). Counted for the bundled engine, where memory_probe measures them; see MemoryModel.
    qk_norm_activations: float
    total_params: int
    active_params: int

    @property
    def is_moe(self) -> bool:
        return self.experts > 0

    def unsharded_block_params(self, tp: int, ep: int = 1, etp: int = 1) -> float:
        """Parameters of the largest layer one GPU gathers under FSDP: its TP shard, and of an MoE
        layer's routed experts only the EP x ETP shard its rank owns."""
        moe = (self.moe_block_params - self.block_expert_params) / tp + self.block_expert_params / (ep * etp)
        return max(self.largest_dense_block_params / tp, moe)

    @property
    def gemm_params_per_token(self) -> float:
        """Parameters a token multiplies through: dense body, its top-k experts and the LM head."""
        return self.layer_dense_params + self.active_expert_params + self.head_params


def _attention_activations(card: ModelCard) -> tuple[ActivationBytes, ActivationBytes, float, float]:
    """(no recompute, selective, fwd+bwd FLOPs coefficient, K+V bytes per token) of one attention block.

    Kept for backward (bf16, 2 bytes): the norm input and output (the QKV GEMM input), Q, K, V,
    the attention output (the projection's input) and the fp32 softmax statistics of fused
    attention (4 bytes per head). Selective recompute re-runs the norm (drops its output) and,
    for latent attention, the up-projections.
    """
    b, h, H = C.ACTIVATION_BYTES, card.hidden_size, card.num_attention_heads
    if card.uses_mla:
        rope, nope = card.qk_rope_head_dim or 0, card.qk_nope_head_dim or card.head_dim
        v = card.v_head_dim or card.head_dim
        d_qk = nope + rope
        latent = (card.q_lora_rank or 0) + (card.kv_lora_rank or 0) + rope
        tp_part = b * (H * d_qk * 2 + H * v * 2) + 4 * H
        norm_in = b * (h + latent)
        kv_bytes = b * H * (d_qk + v)
        flops_coef = 6.0 * H * (d_qk + v)
    else:
        d, K = card.head_dim, card.num_key_value_heads
        tp_part = b * (2 * H * d + 2 * K * d) + 4 * H
        norm_in = b * h
        kv_bytes = b * 2 * K * d
        flops_coef = 6.0 * H * (2 * d)
    none = ActivationBytes(norm_in=norm_in, gemm_in=b * h, tp=tp_part)
    if card.uses_mla:
        # Megatron's "mla_up_proj" selective recompute re-runs the Q/K/V up-projections from the
        # latents, keeping only the attention output and softmax statistics.
        selective = ActivationBytes(norm_in=norm_in, tp=b * H * v + 4 * H)
    else:
        selective = ActivationBytes(norm_in=norm_in, tp=tp_part)
    return none, selective, flops_coef, kv_bytes


def _qk_norm_activations(card: ModelCard) -> float:
    """Bytes per token one attention layer's Q/K RMSNorms keep for backward: their bf16 inputs and fp32 1/rms."""
    if not card.qk_norm or card.uses_mla:
        return 0.0
    heads = card.num_attention_heads + card.num_key_value_heads
    return C.ACTIVATION_BYTES * heads * card.head_dim + 4 * heads


def _mlp_activations(card: ModelCard, width: int) -> tuple[ActivationBytes, ActivationBytes]:
    """Norm input and output, FC1 output (2 halves when gated), activation output (FC2 input)."""
    b, h = C.ACTIVATION_BYTES, card.hidden_size
    fc1 = (2 if card.gated_mlp else 1) * width
    none = ActivationBytes(norm_in=b * h, gemm_in=b * h, tp=b * fc1, tp_gemm=b * width)
    selective = ActivationBytes(norm_in=b * h, tp=b * fc1)  # norm output and activation output recomputed
    return none, selective


def _moe_activations(card: ModelCard) -> tuple[ActivationBytes, ActivationBytes]:
    """Norm in/out, fp32 router probabilities, the routing bookkeeping (per routed copy: the expert id,
    the sort order and the token index in int64, the fp32 top-k weight and its compute-dtype copy in
    sorted order), shared experts, and per routed copy: the permuted input, FC1 output, activation
    output and the expert output kept for the weighted combine."""
    b, h, k = C.ACTIVATION_BYTES, card.hidden_size, card.num_experts_per_tok
    width = card.moe_intermediate_size or card.intermediate_size
    fc1 = (2 if card.gated_mlp else 1) * width
    shared = card.shared_expert_ffn_total
    shared_fc1 = b * fc1 * shared / width if shared else 0.0
    router = 4 * card.num_experts + k * (3 * 8 + 4 + b) + 4  # + the top-k weights' fp32 sum
    none = ActivationBytes(norm_in=b * h + router, gemm_in=b * h, tp=shared_fc1, tp_gemm=b * shared,
                           expert=k * b * (h + fc1), expert_gemm=k * b * (h + width))
    selective = ActivationBytes(norm_in=b * h + router, tp=shared_fc1,
                                expert=k * b * (h + fc1), expert_gemm=k * b * h)
    return none, selective


def _mamba_activations(card: ModelCard) -> tuple[ActivationBytes, ActivationBytes]:
    """Mamba-2 mixer: norm in/out, in_proj output (z, x, B, C, dt), conv output, scan output and
    the gated-norm output (out_proj input). The chunked scan states are small and left out."""
    b, h = C.ACTIVATION_BYTES, card.hidden_size
    heads = card.mamba_num_heads or 0
    d_inner = heads * (card.mamba_head_dim or 0)
    groups_state = 2 * MAMBA_GROUPS * (card.mamba_state_dim or 128)
    tp_part = b * ((2 * d_inner + groups_state + heads) + (d_inner + groups_state) + d_inner)
    out_proj_in = b * d_inner
    return (ActivationBytes(norm_in=b * h, gemm_in=b * h, tp=tp_part, tp_gemm=out_proj_in),
            ActivationBytes(norm_in=b * h, tp=tp_part, tp_gemm=out_proj_in))


def _lora_params(card: ModelCard, rank: int, fused_projections: bool = True) -> int:
    """Adapters A (in x r) and B (r x out) on QKV, output projection, FC1 and FC2 of every layer
    (Megatron Bridge LoRA targets linear_qkv, linear_proj, linear_fc1, linear_fc2), experts included.
    ``fused_projections=False``: Hugging Face PEFT on separate q/k/v and gate/up linears (the bundled
    trainer), each with its own A matrix."""
    h, H, d, K = card.hidden_size, card.num_attention_heads, card.head_dim, card.num_key_value_heads
    gate = 2 if card.gated_mlp else 1
    qkv_in, fc1_in = (h, h) if fused_projections else (3 * h, gate * h)
    attention = rank * ((qkv_in + H * d + 2 * K * d) + (H * d + h))

    def mlp(width: int) -> int:
        return rank * ((fc1_in + gate * width) + (width + h))

    if card.is_moe:
        per_moe = mlp(card.moe_intermediate_size or card.intermediate_size) * card.num_experts
        moe_layers = card.num_hidden_layers - card.first_k_dense
        dense = card.first_k_dense * mlp(card.intermediate_size)
        return card.num_hidden_layers * attention + dense + moe_layers * per_moe
    return card.num_hidden_layers * (attention + mlp(card.intermediate_size))


def adapter_params(shape: "ModelShape", engine: str, rank: int | None = None) -> float:
    """LoRA adapter parameters an engine trains: Megatron Bridge's adapters on its fused linears at its
    default rank, the bundled trainer's Hugging Face PEFT adapters on separate linears at its own default
    rank (or ``rank``). The memory and step-time models both count these."""
    default_rank = C.LORA_DEFAULT_RANK if engine == "megatron" else C.LORA_DEFAULT_RANK_BUNDLED
    base = shape.lora_params if engine == "megatron" else shape.lora_params_split
    return base * (rank or default_rank) / C.LORA_DEFAULT_RANK


def _shape_key(card: ModelCard) -> tuple:
    return tuple(card.model_dump(exclude={"sources", "aliases", "rope_scaling"}).items())


_SHAPES: dict[tuple, "ModelShape"] = {}
_MAX_CACHED_SHAPES = 256


def model_shape(card: ModelCard) -> ModelShape:
    """The estimator's view of a card (cached by the card's values; cards are immutable)."""
    key = _shape_key(card)
    shape = _SHAPES.get(key)
    if shape is None:
        if len(_SHAPES) >= _MAX_CACHED_SHAPES:
            _SHAPES.clear()
        shape = _SHAPES[key] = _build_shape(card)
    return shape


def _build_shape(card: ModelCard) -> ModelShape:
    pc = param_counts(card)
    attn_none, attn_sel, attn_coef, kv_bytes = _attention_activations(card)
    mlp_none, mlp_sel = _mlp_activations(card, card.intermediate_size)
    if card.is_moe:
        moe_none, moe_sel = _moe_activations(card)
    else:
        moe_none = moe_sel = ActivationBytes()
    mamba_none, mamba_sel = _mamba_activations(card)

    if card.hybrid_layer_pattern:
        blocks = {"M": (mamba_none, mamba_sel), "*": (attn_none, attn_sel), "-": (mlp_none, mlp_sel),
                  "E": (moe_none, moe_sel)}
        kinds = [blocks[ch] for ch in card.hybrid_layer_pattern if ch in blocks]
        layers = len(kinds)
        tp_blocks = layers
    else:
        dense_layer = (attn_none + mlp_none, attn_sel + mlp_sel)
        moe_layer = (attn_none + moe_none, attn_sel + moe_sel)
        kinds = [dense_layer] * pc.num_dense_layers + [moe_layer] * pc.num_moe_layers
        layers = card.num_hidden_layers
        tp_blocks = 2 * layers
    dense_mlp_layers = (card.hybrid_layer_pattern.count("-") if card.hybrid_layer_pattern
                        else pc.num_dense_layers)
    act_none = sum((k[0] for k in kinds), ActivationBytes())
    act_sel = sum((k[1] for k in kinds), ActivationBytes())
    largest = max(kinds, key=lambda k: k[0].total)[0]

    experts_total = pc.per_expert * card.num_experts * pc.num_moe_layers if card.is_moe else 0
    body = pc.total - pc.embedding - pc.output - card.hidden_size
    moe_block = pc.router + pc.shared_experts + card.num_experts * pc.per_expert
    # A model whose every layer is MoE has no dense-MLP layer to gather (its intermediate_size is unused).
    dense_layer = pc.per_layer_dense if card.hybrid_layer_pattern or pc.num_dense_layers else 0
    largest_block = max(dense_layer, pc.per_layer_moe, pc.mamba + card.hidden_size, moe_block)
    widths = [card.hidden_size, card.intermediate_size]
    return ModelShape(
        id=card.id,
        layers=layers,
        hidden=card.hidden_size,
        vocab=card.vocab_size,
        embedding_params=pc.embedding,
        head_params=pc.output + card.hidden_size,
        layer_dense_params=body - experts_total,
        layer_expert_params=experts_total,
        active_expert_params=pc.per_expert * card.num_experts_per_tok * pc.num_moe_layers if card.is_moe else 0,
        largest_block_params=largest_block,
        largest_dense_block_params=max(dense_layer, pc.mamba + card.hidden_size),
        moe_block_params=max(pc.per_layer_moe, moe_block) if card.is_moe else 0,
        block_expert_params=card.num_experts * pc.per_expert if card.is_moe else 0,
        lora_params=_lora_params(card, C.LORA_DEFAULT_RANK),
        lora_params_split=_lora_params(card, C.LORA_DEFAULT_RANK, fused_projections=False),
        experts=card.num_experts,
        top_k=card.num_experts_per_tok,
        moe_layers=pc.num_moe_layers,
        expert_width=(card.moe_intermediate_size or card.intermediate_size) if card.is_moe else 0,
        attention_layers=pc.num_attention_layers,
        tp_blocks=tp_blocks,
        attention_flops_coef=attn_coef * pc.num_attention_layers,
        kv_bytes_per_token=kv_bytes * pc.num_attention_layers,
        min_dense_width=min(widths),
        act_none=act_none,
        act_selective=act_sel,
        act_largest_layer=largest,
        qk_norm_activations=_qk_norm_activations(card) * pc.num_attention_layers,
        autocast_extra_input_casts=C.ACTIVATION_BYTES * card.hidden_size * (
            2 * pc.num_attention_layers + (1 if card.gated_mlp else 0) * dense_mlp_layers),
        total_params=pc.total,
        active_params=pc.active,
    )
