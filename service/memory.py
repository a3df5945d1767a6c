"""Memory per GPU of one parallel layout, every term shown separately.

Sources of the formulas:

* Weights, gradients, optimizer: Megatron-LM ``theoretical_memory_usage.py``
  (``compute_weight_and_optimizer_memory``: 18 bytes per parameter, or 6 + 12/DP with the
  distributed optimizer) and the Hugging Face Ultra-Scale Playbook ("Memory usage in
  Transformers", ZeRO-1/3: which of the 2 + 4 + 12 bytes are divided by the shard count).
  Dense weights are split over TP x PP; routed-expert weights over EP x ETP x PP; the
  embedding and the LM head over TP on the first / last pipeline stage.
* Activations: Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
  Transformer Models", Table 2 (``sbh(34 + 5as/h)`` per layer, ``sbh(10 + 24/t + 5as/ht)``
  with TP, ``sbh·34/t`` with TP+SP and selective recompute, ``2sbh`` per layer with full
  recompute). The coefficients are re-derived tensor by tensor for current blocks (see
  ``_block_activations``): RMSNorm, no dropout, gated MLP, grouped-query or latent attention,
  MoE (each routed copy of a token keeps its expert activations), Mamba-2 mixers, and fused
  (flash) attention, which keeps no s x s score matrix, so the ``5as/h`` term is gone.
  CP divides the sequence; SP divides the norm/linear inputs by TP.
* Pipeline: under 1F1B the first stage holds up to PP micro batches in flight, and the
  interleaved schedule multiplies that by ``1 + (PP-1)/(PP·VP)`` (Megatron-LM
  ``compute_activation_memory``); the last stage holds one micro batch plus the logits. The
  estimate is the larger of the two stages.
* Other: a fixed runtime allowance (CUDA context, library workspaces, NCCL buffers) plus a
  caching-allocator fragmentation fraction (``service.constants``).

LoRA keeps the frozen base in bf16 with no gradient or optimizer state; only the adapters
carry training state (their activations are those of full fine-tuning).
"""

from __future__ import annotations

import math
from dataclasses import astuple, dataclass

from recipe_index.cards import ModelCard
from recipe_index.params import MAMBA_GROUPS, param_counts
from service import constants as C
from service.facts import Layout

SHARDINGS = ("none", "optimizer", "full")  # ZeRO-0 (DDP), ZeRO-1 (distributed optimizer), ZeRO-3 (FSDP)
ENGINES = ("megatron", "bundled")


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
    total_params: int
    active_params: int

    @property
    def is_moe(self) -> bool:
        return self.experts > 0

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


def _mlp_activations(card: ModelCard, width: int) -> tuple[ActivationBytes, ActivationBytes]:
    """Norm input and output, FC1 output (2 halves when gated), activation output (FC2 input)."""
    b, h = C.ACTIVATION_BYTES, card.hidden_size
    fc1 = (2 if card.gated_mlp else 1) * width
    none = ActivationBytes(norm_in=b * h, gemm_in=b * h, tp=b * fc1, tp_gemm=b * width)
    selective = ActivationBytes(norm_in=b * h, tp=b * fc1)  # norm output and activation output recomputed
    return none, selective


def _moe_activations(card: ModelCard) -> tuple[ActivationBytes, ActivationBytes]:
    """Norm in/out, fp32 router logits, shared experts, and per routed copy: the permuted input,
    FC1 output, activation output and the expert output kept for the weighted combine."""
    b, h, k = C.ACTIVATION_BYTES, card.hidden_size, card.num_experts_per_tok
    width = card.moe_intermediate_size or card.intermediate_size
    fc1 = (2 if card.gated_mlp else 1) * width
    shared = card.shared_expert_ffn_total
    shared_fc1 = b * fc1 * shared / width if shared else 0.0
    none = ActivationBytes(norm_in=b * h + 4 * card.num_experts, gemm_in=b * h, tp=shared_fc1, tp_gemm=b * shared,
                           expert=k * b * (h + fc1), expert_gemm=k * b * (h + width))
    selective = ActivationBytes(norm_in=b * h + 4 * card.num_experts, tp=shared_fc1,
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
    act_none = sum((k[0] for k in kinds), ActivationBytes())
    act_sel = sum((k[1] for k in kinds), ActivationBytes())
    largest = max(kinds, key=lambda k: k[0].total)[0]

    experts_total = pc.per_expert * card.num_experts * pc.num_moe_layers if card.is_moe else 0
    body = pc.total - pc.embedding - pc.output - card.hidden_size
    moe_block = pc.router + pc.shared_experts + card.num_experts * pc.per_expert
    largest_block = max(pc.per_layer_dense, pc.per_layer_moe, pc.mamba + card.hidden_size, moe_block)
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
        total_params=pc.total,
        active_params=pc.active,
    )


@dataclass(frozen=True)
class MemoryEstimate:
    """GiB per GPU, on the pipeline stage that needs the most."""

    weights: float
    grads: float
    optimizer: float
    activations: float
    other: float

    @property
    def total(self) -> float:
        return self.weights + self.grads + self.optimizer + self.activations + self.other

    def as_dict(self, digits: int = 2) -> dict:
        return {
            "weights": round(self.weights, digits),
            "grads": round(self.grads, digits),
            "optimizer": round(self.optimizer, digits),
            "activations": round(self.activations, digits),
            "other": round(self.other, digits),
            "total": round(self.total, digits),
        }


@dataclass(frozen=True)
class StateBytes:
    """Bytes per parameter for weights / grads / optimizer, and whether each is sharded over DP."""

    weight: float
    grad: float
    optimizer: float
    weight_sharded: bool
    grad_sharded: bool
    optimizer_sharded: bool
    unsharded_working_set: bool  # FSDP gathers whole blocks for compute


STATE_BYTES = {
    ("megatron", "none"): StateBytes(C.MEGATRON_WEIGHT_BYTES, C.MEGATRON_MAIN_GRAD_BYTES, C.ADAM_STATE_BYTES,
                                     False, False, False, False),
    ("megatron", "optimizer"): StateBytes(C.MEGATRON_WEIGHT_BYTES, C.MEGATRON_MAIN_GRAD_BYTES, C.ADAM_STATE_BYTES,
                                          False, False, True, False),
    ("megatron", "full"): StateBytes(C.MEGATRON_WEIGHT_BYTES, C.MEGATRON_MAIN_GRAD_BYTES, C.ADAM_STATE_BYTES,
                                     True, True, True, True),
    ("bundled", "none"): StateBytes(C.FSDP2_PARAM_BYTES, C.FSDP2_GRAD_BYTES, C.FSDP2_ADAM_MOMENT_BYTES,
                                    False, False, False, False),
    ("bundled", "full"): StateBytes(C.FSDP2_PARAM_BYTES, C.FSDP2_GRAD_BYTES, C.FSDP2_ADAM_MOMENT_BYTES,
                                    True, True, True, True),
}


def fsdp2_working_set_bytes(shape: ModelShape, tp: int = 1) -> float:
    """Unsharded bf16 parameters FSDP2 holds at its peak, on any number of ranks (its mixed-precision
    all-gather always makes a bf16 copy): the root (embedding, final norm, LM head), unsharded from
    the first forward to the end of backward, and FSDP_UNSHARDED_BLOCKS decoder blocks (the one
    computing, the one prefetched). Measured in benchmarks/estimate_vs_measured.py."""
    root = shape.embedding_params + shape.head_params
    return (root + shape.largest_block_params * C.FSDP_UNSHARDED_BLOCKS) / tp * C.DTYPE_BYTES["bf16"]


def in_flight_microbatches(pp: int, vp: int | None, num_microbatches: int) -> float:
    """Micro batches whose activations the first stage holds at the 1F1B peak (Megatron-LM
    compute_activation_memory): PP, or fewer when there are fewer micro batches; the
    interleaved schedule adds the factor 1 + (PP-1)/(PP·VP)."""
    if pp == 1:
        return 1.0
    if vp and vp > 1:
        return pp * (1 + (pp - 1) / (pp * vp))
    return float(min(pp, max(num_microbatches, 1)))


def stage_layers(layers: int, pp: int) -> int:
    """Decoder layers on the fullest pipeline stage."""
    return math.ceil(layers / pp)


class MemoryModel:
    """Memory estimates for one model, world size, sequence length and engine.

    The training state per (TP, PP, CP, EP, ETP, sharding) and the activation bytes per token
    per (TP, SP, recompute) are cached, so the planner's thousands of layouts share the work.
    """

    def __init__(self, shape: ModelShape, *, world_size: int, seq_length: int, engine: str = "megatron",
                 peft: bool = False, cpu: bool = False, precision: str = "bf16", fused_loss: bool = True,
                 lora_rank: int | None = None):
        if engine not in ENGINES:
            raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}")
        self.shape, self.world_size, self.seq = shape, world_size, seq_length
        self.engine, self.peft = engine, peft
        # The bundled trainer's default loss (loss_fn.chunked: auto) is the fused linear + cross-entropy
        # whenever the LM head is not tensor-parallel; fused_loss=False models the plain loss (torchtitan).
        self.fused_loss = fused_loss
        default_rank = C.LORA_DEFAULT_RANK if engine == "megatron" else C.LORA_DEFAULT_RANK_BUNDLED
        lora_base = shape.lora_params if engine == "megatron" else shape.lora_params_split
        self.lora_params = lora_base * (lora_rank or default_rank) / C.LORA_DEFAULT_RANK
        # Transformer Engine saves FP8/NVFP4 GEMM inputs quantised; the bundled trainer keeps bf16.
        gemm_bytes = C.SAVED_GEMM_INPUT_BYTES.get(precision, C.ACTIVATION_BYTES) if engine == "megatron" else 2
        self.gemm_scale = gemm_bytes / C.ACTIVATION_BYTES
        self.runtime_bytes = (C.CPU_RUNTIME_OVERHEAD_GIB if cpu else C.RUNTIME_OVERHEAD_GIB) * C.GIB
        self.logits_bytes = C.LOGITS_BYTES_FUSED if engine == "megatron" else C.LOGITS_BYTES_UNFUSED
        self._states: dict[tuple, tuple[tuple[float, float, float], tuple[float, float, float], float]] = {}
        self._acts: dict[tuple, tuple[float, float]] = {}

    def state_bytes(self, tp: int, pp: int, cp: int, ep: int, etp: int,
               sharding: str) -> tuple[tuple[float, float, float], tuple[float, float, float], float]:
        """((weights, grads, optimizer) bytes on the first stage, the same on the last, stage fraction)."""
        key = (tp, pp, cp, ep, etp, sharding)
        hit = self._states.get(key)
        if hit is not None:
            return hit
        s = self.shape
        fraction = stage_layers(s.layers, pp) / s.layers
        body = s.layer_dense_params * fraction / tp
        expert = s.layer_expert_params * fraction / (ep * etp)
        dense_shards = self.world_size // (tp * pp)  # DP x CP: Megatron's optimizer group, FSDP2's mesh
        expert_dp = max(self.world_size // (pp * ep * etp), 1)
        state = STATE_BYTES[(self.engine, sharding)]
        w_d, w_e = (dense_shards, expert_dp) if state.weight_sharded else (1, 1)
        g_d, g_e = (dense_shards, expert_dp) if state.grad_sharded else (1, 1)
        o_d, o_e = (dense_shards, expert_dp) if state.optimizer_sharded else (1, 1)
        block = 0.0
        if state.unsharded_working_set and (dense_shards > 1 or expert_dp > 1):
            block = s.largest_block_params / tp * C.FSDP_UNSHARDED_BLOCKS * C.DTYPE_BYTES["bf16"]
        # Unsharded parameters: FSDP2 (bundled) also on one rank and with its root; gradients: the blocks.
        weight_block = fsdp2_working_set_bytes(s, tp) if state.unsharded_working_set and self.engine == "bundled" \
            else block

        def one_end(dense: float) -> tuple[float, float, float]:
            adapters = self.lora_params * fraction / tp
            if self.peft and self.engine == "bundled":
                # Frozen base kept in the model's storage dtype (model.dtype, fp32 by default), fp32
                # adapters as the sharded masters, fp32 grads and two Adam moments (trainer/peft.py).
                weights = (dense / w_d + expert / w_e + adapters / w_d) * C.FSDP2_PARAM_BYTES
                return (weights + weight_block, adapters / g_d * C.FSDP2_GRAD_BYTES,
                        adapters / o_d * C.FSDP2_ADAM_MOMENT_BYTES)
            if self.peft:  # frozen bf16 base; only the adapters carry training state
                weights = (dense / w_d + expert / w_e) * C.LORA_BASE_WEIGHT_BYTES + adapters / w_d * 2
                return (weights + block, adapters / g_d * C.MEGATRON_MAIN_GRAD_BYTES,
                        adapters / o_d * C.ADAM_STATE_BYTES)
            return ((dense / w_d + expert / w_e) * state.weight + weight_block,
                    (dense / g_d + expert / g_e) * state.grad + block,
                    (dense / o_d + expert / o_e) * state.optimizer)

        if pp == 1:
            first = last = one_end(body + (s.embedding_params + s.head_params) / tp)
        else:
            first, last = one_end(body + s.embedding_params / tp), one_end(body + s.head_params / tp)
        hit = self._states[key] = (first, last, fraction)
        return hit

    def _activation_per_token(self, tp: int, sp: bool, recompute: str) -> tuple[float, float]:
        """(bytes kept per token for all layers, working bytes per token) on one GPU."""
        key = (tp, sp, recompute)
        hit = self._acts.get(key)
        if hit is None:
            s = self.shape
            gathered = self.engine == "bundled"  # PyTorch DTensor TP saves the all-gathered GEMM inputs
            if recompute == "full":
                kept = C.FULL_RECOMPUTE_BYTES_PER_HIDDEN * s.hidden * (1 / tp if sp else 1) * s.layers
                # One layer is recomputed at a time; its activations and their gradients coexist.
                working = (s.act_largest_layer.per_gpu(tp, sp, gathered, self.gemm_scale)
                           * C.FULL_RECOMPUTE_WORKING_FACTOR)
            else:
                acts = s.act_selective if recompute == "selective" else s.act_none
                kept, working = acts.per_gpu(tp, sp, gathered, self.gemm_scale), 0.0
            hit = self._acts[key] = (kept, working)
        return hit

    def loss_bytes(self, tp: int) -> tuple[float, float]:
        """(bytes per token, fixed bytes) the LM head and loss keep for backward on the last stage.

        Always the final norm's input (bf16). Megatron's fused cross-entropy keeps the logits (4 bytes
        per element, Megatron-LM theoretical_memory_usage.py). The plain PyTorch loss keeps bf16
        logits, their fp32 copy and the fp32 log-softmax. The bundled trainer's fused linear +
        cross-entropy (trainer/fused/linear_cross_entropy.py) keeps no logits, only the gradient of
        the hidden states (bf16) and, when the head trains, an fp32 accumulator of its gradient.
        """
        s = self.shape
        norm_in = C.ACTIVATION_BYTES * s.hidden
        if self.engine == "bundled" and self.fused_loss and tp == 1:
            head_grad = 0.0 if self.peft else s.vocab * s.hidden * C.DTYPE_BYTES["fp32"]
            return norm_in + C.ACTIVATION_BYTES * s.hidden, head_grad
        return (s.vocab / tp) * self.logits_bytes + norm_in, 0.0

    def parts(self, layout: Layout, sharding: str, num_microbatches: int) -> tuple[float, float, float, float]:
        """(weights, grads, optimizer, activations) bytes on the pipeline stage that needs the most."""
        lay = layout
        tp, pp = lay.tp, lay.pp
        first, last, fraction = self.state_bytes(tp, pp, lay.cp, lay.ep, lay.etp, sharding)
        kept, working = self._activation_per_token(tp, lay.sp and tp > 1, lay.recompute)
        tokens = lay.micro_batch_size * self.seq / lay.cp
        layer_bytes = kept * fraction * tokens
        working *= tokens
        per_token_logits, loss_fixed = self.loss_bytes(tp)
        logits = tokens * per_token_logits + loss_fixed
        last_acts = layer_bytes + working + logits
        if pp == 1:
            return first[0], first[1], first[2], last_acts
        # The ends differ: embedding and in-flight micro batches vs LM head and logits.
        first_acts = layer_bytes * in_flight_microbatches(pp, lay.vp, num_microbatches) + working
        if first[0] + first[1] + first[2] + first_acts >= last[0] + last[1] + last[2] + last_acts:
            return first[0], first[1], first[2], first_acts
        return last[0], last[1], last[2], last_acts

    def totals(self, structure: Layout, sizes: list[tuple[int, int]], shardings: tuple[str, ...],
               recomputes: tuple[str, ...]) -> list[list[float]]:
        """Total GiB of ``structure`` per (micro batch, micro batches) in ``sizes``, as a flat list over
        (sharding, recompute) in the given orders: the planner's inner loop. The same arithmetic as
        :meth:`parts`, with the training state and per-token activations looked up once."""
        lay = structure
        tp, pp = lay.tp, lay.pp
        sp = lay.sp and tp > 1
        per_token_logits, loss_fixed = self.loss_bytes(tp)
        scale, runtime = (1 + C.FRAGMENTATION_FRACTION) / C.GIB, self.runtime_bytes / C.GIB
        per_token = [self._activation_per_token(tp, sp, recompute) for recompute in recomputes]
        states = []
        for sharding in shardings:
            first, last, fraction = self.state_bytes(tp, pp, lay.cp, lay.ep, lay.etp, sharding)
            states.append((first[0] + first[1] + first[2], last[0] + last[1] + last[2], fraction))
        out = []
        for micro_batch_size, num_microbatches in sizes:
            tokens = micro_batch_size * self.seq / lay.cp
            logits = tokens * per_token_logits + loss_fixed
            inflight = in_flight_microbatches(pp, lay.vp, num_microbatches) if pp > 1 else 1.0
            totals = []
            for first_state, last_state, fraction in states:
                for kept, working in per_token:
                    layer_bytes = kept * fraction * tokens
                    work = working * tokens
                    total = last_state + layer_bytes + work + logits
                    if pp > 1:
                        first_total = first_state + layer_bytes * inflight + work
                        if first_total > total:
                            total = first_total
                    totals.append(runtime + scale * total)
            out.append(totals)
        return out

    def estimate(self, layout: Layout, sharding: str = "optimizer", num_microbatches: int = 1) -> MemoryEstimate:
        """Per-GPU memory of ``layout`` (see the module docstring for the formulas and sources).

        ``sharding`` is how data parallelism shares the training state: ``none`` (DDP, every
        rank a full replica), ``optimizer`` (Megatron distributed optimizer, ZeRO-1), ``full``
        (FSDP / Megatron-FSDP, ZeRO-3). The engine picks the mixed-precision layout of that state.
        """
        if (self.engine, sharding) not in STATE_BYTES:
            raise ValueError(f"sharding {sharding!r} is not available on the {self.engine} engine")
        w, g, o, a = self.parts(layout, sharding, num_microbatches)
        other = self.runtime_bytes + C.FRAGMENTATION_FRACTION * (w + g + o + a)
        gib = C.GIB
        return MemoryEstimate(w / gib, g / gib, o / gib, a / gib, other / gib)


def estimate_memory(shape: ModelShape, layout: Layout, *, world_size: int, seq_length: int,
                    num_microbatches: int = 1, sharding: str = "optimizer", engine: str = "megatron",
                    peft: bool = False, cpu: bool = False, precision: str = "bf16", fused_loss: bool = True,
                    lora_rank: int | None = None) -> MemoryEstimate:
    """One-off estimate (the planner keeps a :class:`MemoryModel` to share work across layouts)."""
    model = MemoryModel(shape, world_size=world_size, seq_length=seq_length, engine=engine, peft=peft, cpu=cpu,
                        precision=precision, fused_loss=fused_loss, lora_rank=lora_rank)
    return model.estimate(layout, sharding, num_microbatches)


def usable_memory_gib(memory_gib: float) -> float:
    """What a layout may use and still "fit": the card's memory less the headroom."""
    return memory_gib * (1 - C.MEMORY_HEADROOM_FRACTION)
