"""Memory per GPU of one parallel layout, every term shown separately.

Sources of the formulas:

* Weights, gradients, optimizer: Megatron-LM ``theoretical_memory_usage.py``
  (``compute_weight_and_optimizer_memory``: 18 bytes per parameter, or 6 + 12/DP with the
  distributed optimizer) and the Hugging Face Ultra-Scale Playbook ("Memory usage in
  Transformers", ZeRO-1/3: which of the 2 + 4 + 12 bytes are divided by the shard count).
  Dense weights are split over TP x PP; routed-expert weights over EP x ETP x PP; the
  embedding and the LM head over TP on the first / last pipeline stage.
* Activations: Korthikanti et al. 2022, Table 2, re-derived tensor by tensor for current blocks
  (``service.estimate.memory_shape``). CP divides the sequence; SP divides the norm/linear inputs by TP.
* Pipeline: under 1F1B the first stage holds up to PP micro batches in flight, and the
  interleaved schedule multiplies that by ``1 + (PP-1)/(PP·VP)`` (Megatron-LM
  ``compute_activation_memory``); the last stage holds one micro batch plus the logits. The
  estimate is the larger of the two stages.
* Other: a fixed runtime allowance (CUDA context, library workspaces, NCCL buffers) plus a
  caching-allocator fragmentation fraction (``service.estimate.constants``).

Megatron keeps its main-gradient buffer in fp32 (``grad_reduce_in_fp32``, the library recipes) or
in the parameters' bf16 (Megatron Bridge's performance recipes turn it off in
``_benchmark_common()``). With 16-bit gradients the optimizer keeps its own fp32 copy of the
gradient beside the master weights and moments: 2 + 2 + 16/d bytes per parameter instead of
2 + 4 + 12/d (Megatron-LM ``docs/source/api-guide/dist_optimizer.md``, "fp16 param, fp16 grads"), so
bf16 gradients save memory only when the optimizer is sharded over d > 2. FSDP2 (bundled)
reduces in ``reduce_dtype`` but keeps sharded gradients in the fp32 of its sharded parameters, so
there the setting changes the traffic, not the memory.

LoRA keeps the frozen base in bf16 with no gradient or optimizer state; only the adapters
carry training state (their activations are those of full fine-tuning).

The bundled engine (our trainer) differs where it was measured to (benchmarks/README.md,
"Planner memory model vs the trainer"): fp32 master weights, FSDP2's unsharded working set, the
fused linear + cross-entropy loss, and activation dtypes that follow how it runs mixed precision:
FSDP2's MixedPrecisionPolicy computes in bf16 throughout; DDP runs ``torch.autocast`` over fp32
parameters, which keeps an fp32 residual stream, one bf16 copy of a norm output per projection that
reads it and bf16 copies of the block weights saved by the GEMMs; ``precision: fp32`` keeps
everything in fp32.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from decimal import ROUND_HALF_UP, Decimal

from service.estimate import constants as C

# The per-model view lives in service.estimate.memory_shape; its names are part of this module's interface.
from service.estimate.memory_shape import ActivationBytes, ModelShape, adapter_params, model_shape  # noqa: F401
from service.facts import Layout
from service.layouts.arithmetic import stage_split

SHARDINGS = ("none", "optimizer", "full")  # ZeRO-0 (DDP), ZeRO-1 (distributed optimizer), ZeRO-3 (FSDP)
ENGINES = ("megatron", "bundled")
GRAD_REDUCE_DTYPES = ("fp32", "bf16")
PUBLISHED_DIGITS = 2  # decimals of the memory figures the JSON answers publish (MemoryEstimate.as_dict)


@dataclass(frozen=True)
class MemoryEstimate:
    """GiB per GPU, on the pipeline stage that needs the most (``stage``: first, middle, last, or only
    when there is no pipeline)."""

    weights: float
    grads: float
    optimizer: float
    activations: float
    other: float
    stage: str = "only"

    @property
    def total(self) -> float:
        return self.weights + self.grads + self.optimizer + self.activations + self.other

    def as_dict(self, digits: int = PUBLISHED_DIGITS) -> dict:
        return {
            "weights": round(self.weights, digits),
            "grads": round(self.grads, digits),
            "optimizer": round(self.optimizer, digits),
            "activations": round(self.activations, digits),
            "other": round(self.other, digits),
            "total": round(self.total, digits),
        }


def gib_text(value: float) -> str:
    """A memory figure to one decimal, as every page and the CLI text show it: from the value the JSON
    answers publish (``PUBLISHED_DIGITS``), rounded half up in decimal. Rounding the unrounded estimate
    instead would show 61.3 where the page, which has only the published 61.35, shows 61.4."""
    published = Decimal(repr(round(float(value), PUBLISHED_DIGITS)))
    return str(published.quantize(Decimal("0.1"), rounding=ROUND_HALF_UP))


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


def fsdp2_unsharded_blocks(dp_shards: int) -> int:
    """Decoder blocks whose unsharded parameters FSDP2 holds at once.

    Sharded over more than one rank: FSDP_UNSHARDED_BLOCKS (2). FSDP2's defaults keep two
    all-gather outputs alive: in forward the current block's and the next one's (implicit
    prefetching), in backward the block computing and the one its pre-backward hook prefetches in
    reverse post-forward order (pytorch/pytorch#128884, "[FSDP2] Added APIs for explicit fwd/bwd
    prefetching"; ``FSDPParamGroup._backward_prefetch`` in torch/distributed/fsdp/_fully_shard).
    This is the same on CPU/gloo as on CUDA: streams decide what overlaps, not which buffers are
    alive. One rank: nothing is all-gathered or prefetched; a block's shard is copied into its
    unsharded parameters when it runs (``wait_for_unshard``), so one block at a time.
    """
    return 1 if dp_shards <= 1 else C.FSDP_UNSHARDED_BLOCKS


def fsdp2_working_set_bytes(shape: ModelShape, tp: int = 1, *, dp_shards: int, param_bytes: float = 2,
                            ep: int = 1, etp: int = 1) -> float:
    """Unsharded parameters FSDP2 holds during backward, where the step's memory peaks: the root
    (embedding, final norm, LM head), unsharded from the first forward to the end of backward, and
    ``fsdp2_unsharded_blocks(dp_shards)`` decoder blocks, in the compute dtype (``param_bytes``: 2 under
    the bf16 mixed-precision policy, 4 for fp32). With expert parallel (``ep`` > 1) the routed experts
    of a layer are their own FSDP2 unit over the expert-data-parallel group (dp_shards x tp / (ep x etp)
    ranks; trainer/distributed/expert_parallel.py): a rank gathers its own experts only, as many
    layers' worth as that group's size allows. Left out: at the start of forward, with more than one
    rank, the root's all-gather output lives until the first block's copy-out (the root twice), while
    hardly any activation exists yet. Measured in benchmarks/estimate_vs_measured.py."""
    root = shape.embedding_params + shape.head_params
    blocks = shape.largest_block_params * fsdp2_unsharded_blocks(dp_shards) / tp
    if shape.is_moe and ep * etp > 1:
        expert_shards = max(dp_shards * tp // (ep * etp), 1)
        moe = ((shape.moe_block_params - shape.block_expert_params) / tp * fsdp2_unsharded_blocks(dp_shards)
               + shape.block_expert_params / (ep * etp) * fsdp2_unsharded_blocks(expert_shards))
        blocks = max(shape.largest_dense_block_params / tp * fsdp2_unsharded_blocks(dp_shards), moe)
    return (root / tp + blocks) * param_bytes


def in_flight_microbatches(pp: int, vp: int | None, num_microbatches: int) -> float:
    """Micro batches whose activations the first stage holds at the 1F1B peak (Megatron-LM
    compute_activation_memory): PP, or fewer when there are fewer micro batches; the
    interleaved schedule adds the factor 1 + (PP-1)/(PP·VP)."""
    if pp == 1:
        return 1.0
    if vp and vp > 1:
        return pp * (1 + (pp - 1) / (pp * vp))
    return float(min(pp, max(num_microbatches, 1)))


@dataclass(frozen=True)
class Stage:
    """One pipeline stage's training state: which stage (first, middle, last, or the only one), the
    share of the decoder layers it holds, and its weights, gradients and optimizer bytes."""
    role: str
    fraction: float
    weights: float
    grads: float
    optimizer: float

    @property
    def state_total(self) -> float:
        return self.weights + self.grads + self.optimizer


class MemoryModel:
    """Memory estimates for one model, world size, sequence length and engine.

    The training state per (TP, PP, CP, EP, ETP, sharding) and the activation bytes per token
    per (TP, SP, recompute) are cached, so the planner's thousands of layouts share the work.
    """

    def __init__(self, shape: ModelShape, *, world_size: int, seq_length: int, engine: str = "megatron",
                 peft: bool = False, cpu: bool = False, precision: str = "bf16", fused_loss: bool = True,
                 lora_rank: int | None = None, grad_reduce_dtype: str = "fp32",
                 explicit_layout: bool = False, peft_base_bytes: float = C.FSDP2_PARAM_BYTES):
        if engine not in ENGINES:
            raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}")
        if grad_reduce_dtype not in GRAD_REDUCE_DTYPES:
            raise ValueError(f"grad_reduce_dtype must be one of {GRAD_REDUCE_DTYPES}, got {grad_reduce_dtype!r}")
        self.shape, self.world_size, self.seq = shape, world_size, seq_length
        self.engine, self.peft = engine, peft
        self.peft_base_bytes = peft_base_bytes  # the FSDP2 engine's frozen base: its storage dtype (AutoModel: bf16)
        self.explicit_layout = explicit_layout  # Bridge layout strings place its pipelines (stage_split)
        # The bundled trainer's default loss (loss_fn.chunked: auto) is the fused linear + cross-entropy
        # whenever the LM head is not tensor-parallel; fused_loss=False models the plain loss (torchtitan).
        self.fused_loss = fused_loss
        self.lora_params = adapter_params(shape, engine, lora_rank)
        # Transformer Engine saves FP8/NVFP4 GEMM inputs quantised; the bundled trainer keeps bf16.
        gemm_bytes = C.SAVED_GEMM_INPUT_BYTES.get(precision, C.ACTIVATION_BYTES) if engine == "megatron" else 2
        self.gemm_scale = gemm_bytes / C.ACTIVATION_BYTES
        self.runtime_bytes = (C.CPU_RUNTIME_OVERHEAD_GIB if cpu else C.RUNTIME_OVERHEAD_GIB) * C.GIB
        self.logits_bytes = C.LOGITS_BYTES_FUSED if engine == "megatron" else C.LOGITS_BYTES_UNFUSED
        # Under precision fp32 both engines compute in the parameters' dtype (no policy, no autocast,
        # Megatron without --bf16): unsharded FSDP copies and every activation are fp32, and Megatron's
        # fp32 parameters are their own master copy (Adam keeps only the two moments).
        self.fp32_compute = precision == "fp32"
        self.compute_param_bytes = C.DTYPE_BYTES["fp32"] if self.fp32_compute else C.DTYPE_BYTES["bf16"]
        # Megatron's gradient buffer: fp32, or the parameters' dtype when grads are not reduced in fp32.
        self.main_grad_bytes = C.DTYPE_BYTES[grad_reduce_dtype] if not self.fp32_compute else C.DTYPE_BYTES["fp32"]
        self._states: dict[tuple, tuple[Stage, ...]] = {}
        self._acts: dict[tuple, tuple[float, float, float]] = {}

    def state_bytes(self, tp: int, pp: int, cp: int, ep: int, etp: int, sharding: str,
                    vp: int = 1) -> tuple[Stage, ...]:
        """The pipeline stages that can need the most memory, each with its (weights, grads, optimizer)
        bytes: the first (embedding, the most micro batches in flight), the last (LM head and logits),
        and a middle one where Megatron's split gives it more layers (``stage_split``). One stage
        without pipeline parallelism."""
        split = stage_split(self.shape.layers, pp, vp, self.explicit_layout)
        key = (tp, pp, split, cp, ep, etp, sharding)  # VP matters only through the split
        hit = self._states.get(key)
        if hit is not None:
            return hit
        s = self.shape
        dense_shards = self.world_size // (tp * pp)  # DP x CP: Megatron's optimizer group, FSDP2's mesh
        expert_dp = max(self.world_size // (pp * ep * etp), 1)
        state = STATE_BYTES[(self.engine, sharding)]
        if self.engine == "megatron" and self.fp32_compute:
            state = replace(state, weight=C.DTYPE_BYTES["fp32"], optimizer=C.ADAM_STATE_BYTES - C.DTYPE_BYTES["fp32"])
        elif self.engine == "megatron" and self.main_grad_bytes < C.MEGATRON_MAIN_GRAD_BYTES:
            state = replace(state, grad=self.main_grad_bytes,
                            optimizer=C.ADAM_STATE_BYTES + C.MEGATRON_MAIN_GRAD_BYTES)
        w_d, w_e = (dense_shards, expert_dp) if state.weight_sharded else (1, 1)
        g_d, g_e = (dense_shards, expert_dp) if state.grad_sharded else (1, 1)
        o_d, o_e = (dense_shards, expert_dp) if state.optimizer_sharded else (1, 1)
        block = 0.0
        if state.unsharded_working_set and (dense_shards > 1 or expert_dp > 1):
            block = s.unsharded_block_params(tp, ep, etp) * C.FSDP_UNSHARDED_BLOCKS * self.compute_param_bytes
        # Unsharded parameters: FSDP2 (bundled) also on one rank and with its root; gradients: the blocks.
        weight_block = block
        if state.unsharded_working_set and self.engine == "bundled":
            weight_block = fsdp2_working_set_bytes(s, tp, dp_shards=dense_shards, param_bytes=self.compute_param_bytes,
                                                   ep=ep, etp=etp)

        def stage(role: str, layers: int, outside_layers: float) -> Stage:
            fraction = layers / s.layers
            dense = s.layer_dense_params * fraction / tp + outside_layers / tp
            expert = s.layer_expert_params * fraction / (ep * etp)
            adapters = self.lora_params * fraction / tp
            if self.peft and self.engine == "bundled":
                # Frozen base kept in the model's storage dtype (model.dtype, fp32 by default), fp32
                # adapters as the sharded masters, fp32 grads and two Adam moments (trainer/components/peft.py).
                weights = (dense / w_d + expert / w_e) * self.peft_base_bytes + adapters / w_d * C.FSDP2_PARAM_BYTES
                return Stage(role, fraction, weights + weight_block, adapters / g_d * C.FSDP2_GRAD_BYTES,
                             adapters / o_d * C.FSDP2_ADAM_MOMENT_BYTES)
            if self.peft:  # frozen bf16 base; only the adapters carry training state
                weights = (dense / w_d + expert / w_e) * C.LORA_BASE_WEIGHT_BYTES + adapters / w_d * 2
                extra_grad_copy = C.MEGATRON_MAIN_GRAD_BYTES if state.grad < C.MEGATRON_MAIN_GRAD_BYTES else 0
                return Stage(role, fraction, weights + block, adapters / g_d * state.grad,
                             adapters / o_d * (C.ADAM_STATE_BYTES + extra_grad_copy))
            working = weight_block
            if self.engine == "bundled" and pp > 1 and state.unsharded_working_set:
                # The bundled pipeline keeps its stages gathered from the first forward to the last backward of a
                # step (trainer/distributed/pipeline.py): the whole stage in the compute dtype.
                working = (dense + expert) * self.compute_param_bytes
            return Stage(role, fraction, (dense / w_d + expert / w_e) * state.weight + working,
                         (dense / g_d + expert / g_e) * state.grad + block,
                         (dense / o_d + expert / o_e) * state.optimizer)

        if pp == 1:
            stages: tuple[Stage, ...] = (stage("only", s.layers, s.embedding_params + s.head_params),)
        else:
            first, middle, last = split
            stages = (stage("first", first, s.embedding_params), stage("last", last, s.head_params))
            if pp > 2 and middle > first:  # e.g. the embedding counted as a layer: the second stage is fuller
                stages += (stage("middle", middle, 0.0),)
        self._states[key] = stages
        return stages

    def activation_dtypes(self, sharding: str) -> tuple[float, float]:
        """(residual stream, other activations) bytes relative to bf16. Megatron and the bundled
        trainer under FSDP2's bf16 policy: (1, 1). The bundled trainer's DDP (``sharding`` none) runs
        autocast over fp32 parameters: the embedding output and the residual adds stay fp32, GEMM
        outputs are bf16 (2, 1). ``precision: fp32``: (2, 2)."""
        if self.fp32_compute:
            return 2.0, 2.0
        if self.engine == "bundled" and sharding == "none":
            return 2.0, 1.0
        return 1.0, 1.0

    def _activation_per_token(self, tp: int, sp: bool, recompute: str, sharding: str = "full") -> tuple[float, float]:
        """(bytes kept per token for all layers, working bytes per token) on one GPU."""
        key = (tp, sp, recompute, sharding)
        hit = self._acts.get(key)
        if hit is None:
            s = self.shape
            gathered = self.engine == "bundled"  # PyTorch DTensor TP saves the all-gathered GEMM inputs
            residual, compute = self.activation_dtypes(sharding)
            if recompute == "full":
                kept = C.FULL_RECOMPUTE_BYTES_PER_HIDDEN * s.hidden * (1 / tp if sp else 1) * s.layers * residual
                # One layer is recomputed at a time; its activations and their gradients coexist.
                working = (s.act_largest_layer.in_dtypes(residual, compute).per_gpu(tp, sp, gathered, self.gemm_scale)
                           * C.FULL_RECOMPUTE_WORKING_FACTOR)
            else:
                acts = s.act_selective if recompute == "selective" else s.act_none
                kept, working = acts.in_dtypes(residual, compute).per_gpu(tp, sp, gathered, self.gemm_scale), 0.0
                if self.engine == "bundled":
                    # Measured on the bundled trainer (benchmarks/estimate_vs_measured.py). Left out for
                    # Megatron: its published layouts fit with less recompute than this term would allow
                    # (benchmarks/step_time_published.py, MoE: mean abs log error 0.25 -> 0.28 with it).
                    kept += s.qk_norm_activations * compute / tp
                if residual > compute and recompute == "none":
                    # Autocast casts per op and caches only parameters: each projection keeps its own
                    # bf16 copy of the norm output. Selective recompute re-runs the casts.
                    kept += s.autocast_extra_input_casts / tp
            hit = self._acts[key] = (kept, working)
        return hit

    def autocast_weight_copies(self, tp: int, recompute: str, sharding: str) -> float:
        """Bytes of the bf16 weight copies autocast makes for the blocks' GEMMs, kept for backward
        without recompute (all layers; selective and full recompute re-run the casts, and the cache
        itself is dropped when autocast exits at the end of the forward)."""
        residual, compute = self.activation_dtypes(sharding)
        if residual > compute and recompute == "none":
            return self.shape.layer_dense_params / tp * C.DTYPE_BYTES["bf16"]
        return 0.0

    def loss_bytes(self, tp: int, sharding: str = "full") -> tuple[float, float]:
        """(bytes per token, fixed bytes) the LM head and loss keep for backward on the last stage.

        Always the final norm's input (on the residual stream). Megatron's fused cross-entropy keeps
        the logits (4 bytes per element, Megatron-LM theoretical_memory_usage.py). The plain PyTorch
        loss keeps bf16 logits, their fp32 copy and the fp32 log-softmax. The bundled trainer's fused
        linear + cross-entropy (trainer/fused/linear_cross_entropy.py) keeps no logits, only the
        gradient of the hidden states (the final norm's output dtype: bf16 under FSDP2's policy, fp32
        under autocast over fp32 parameters) and, when the head trains, an fp32 accumulator of its
        gradient.
        """
        s = self.shape
        residual, _ = self.activation_dtypes(sharding)
        norm_in = C.ACTIVATION_BYTES * s.hidden * residual
        if self.engine == "bundled" and self.fused_loss and tp == 1:
            head_grad = 0.0 if self.peft else s.vocab * s.hidden * C.DTYPE_BYTES["fp32"]
            return norm_in + C.ACTIVATION_BYTES * s.hidden * residual, head_grad
        return (s.vocab / tp) * self.logits_bytes + norm_in, 0.0

    def _stage_activations(self, stage: Stage, kept: float, fixed_work: float, work: float, logits: float,
                           inflight: float) -> float:
        """Activation bytes one stage keeps at its peak: the first stage ``inflight`` micro batches (1F1B),
        a middle one one fewer (it starts its first backward one step sooner; approximate), the last one
        micro batch and the logits."""
        layer_bytes = kept * stage.fraction
        work += fixed_work * stage.fraction
        if stage.role == "first":
            return layer_bytes * inflight + work
        if stage.role == "middle":
            return layer_bytes * max(inflight - 1, 1.0) + work
        return layer_bytes + work + logits

    def parts(self, layout: Layout, sharding: str, num_microbatches: int) -> tuple[float, float, float, float]:
        """(weights, grads, optimizer, activations) bytes on the pipeline stage that needs the most."""
        stage, acts = self._fullest_stage(layout, sharding, num_microbatches)
        return stage.weights, stage.grads, stage.optimizer, acts

    def _fullest_stage(self, layout: Layout, sharding: str, num_microbatches: int) -> tuple[Stage, float]:
        """The pipeline stage that needs the most memory, and its activation bytes."""
        lay = layout
        tp, pp = lay.tp, lay.pp
        stages = self.state_bytes(tp, pp, lay.cp, lay.ep, lay.etp, sharding, lay.vp or 1)
        kept, working = self._activation_per_token(tp, lay.sp and tp > 1, lay.recompute, sharding)
        tokens = lay.micro_batch_size * self.seq / lay.cp
        per_token_logits, loss_fixed = self.loss_bytes(tp, sharding)
        logits = tokens * per_token_logits + loss_fixed
        inflight = in_flight_microbatches(pp, lay.vp, num_microbatches)
        copies = self.autocast_weight_copies(tp, lay.recompute, sharding)
        best = None
        for stage in stages:  # the ends differ: embedding and in-flight micro batches vs LM head and logits
            acts = self._stage_activations(stage, kept * tokens, copies, working * tokens, logits, inflight)
            if best is None or stage.state_total + acts > best[0]:
                best = (stage.state_total + acts, stage, acts)
        _, stage, acts = best
        return stage, acts

    def totals(self, structure: Layout, sizes: list[tuple[int, int]], shardings: tuple[str, ...],
               recomputes: tuple[str, ...]) -> list[list[float]]:
        """Total GiB of ``structure`` per (micro batch, micro batches) in ``sizes``, as a flat list over
        (sharding, recompute) in the given orders: the planner's inner loop. The same arithmetic as
        :meth:`parts`, with the training state and per-token activations looked up once."""
        lay = structure
        tp, pp = lay.tp, lay.pp
        sp = lay.sp and tp > 1
        scale, runtime = (1 + C.FRAGMENTATION_FRACTION) / C.GIB, self.runtime_bytes / C.GIB
        states = []
        for sharding in shardings:
            stages = self.state_bytes(tp, pp, lay.cp, lay.ep, lay.etp, sharding, lay.vp or 1)
            per_token = [(*self._activation_per_token(tp, sp, recompute, sharding),
                          self.autocast_weight_copies(tp, recompute, sharding)) for recompute in recomputes]
            states.append((stages, per_token, self.loss_bytes(tp, sharding)))
        out = []
        for micro_batch_size, num_microbatches in sizes:
            tokens = micro_batch_size * self.seq / lay.cp
            inflight = in_flight_microbatches(pp, lay.vp, num_microbatches)
            # _stage_activations inlined: (state, layer share, micro batches kept, whether the logits are kept)
            held = {"first": inflight, "middle": max(inflight - 1, 1.0)}
            totals = []
            for stages, per_token, (per_token_logits, loss_fixed) in states:
                logits = tokens * per_token_logits + loss_fixed
                # per stage: its state (and the logits on the last), its layers x micro batches kept, its layers
                ends = [(st.state_total + (logits if st.role in ("last", "only") else 0.0),
                         st.fraction * held.get(st.role, 1.0), st.fraction) for st in stages]
                for kept, working, copies in per_token:
                    layer_tokens = kept * tokens
                    total = 0.0
                    for fixed, kept_share, share in ends:  # a loop, not max(): the planner's hottest line
                        stage_total = fixed + kept_share * layer_tokens + share * copies
                        if stage_total > total:
                            total = stage_total
                    totals.append(runtime + scale * (total + working * tokens))
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
        stage, a = self._fullest_stage(layout, sharding, num_microbatches)
        w, g, o = stage.weights, stage.grads, stage.optimizer
        other = self.runtime_bytes + C.FRAGMENTATION_FRACTION * (w + g + o + a)
        gib = C.GIB
        return MemoryEstimate(w / gib, g / gib, o / gib, a / gib, other / gib, stage.role)


def estimate_memory(shape: ModelShape, layout: Layout, *, world_size: int, seq_length: int,
                    num_microbatches: int = 1, sharding: str = "optimizer", engine: str = "megatron",
                    peft: bool = False, cpu: bool = False, precision: str = "bf16", fused_loss: bool = True,
                    lora_rank: int | None = None, grad_reduce_dtype: str = "fp32",
                    explicit_layout: bool = False) -> MemoryEstimate:
    """One-off estimate (the planner keeps a :class:`MemoryModel` to share work across layouts)."""
    model = MemoryModel(shape, world_size=world_size, seq_length=seq_length, engine=engine, peft=peft, cpu=cpu,
                        precision=precision, fused_loss=fused_loss, lora_rank=lora_rank,
                        grad_reduce_dtype=grad_reduce_dtype, explicit_layout=explicit_layout)
    return model.estimate(layout, sharding, num_microbatches)


def usable_memory_gib(memory_gib: float) -> float:
    """What a layout may use and still "fit": the card's memory less the headroom."""
    return memory_gib * (1 - C.MEMORY_HEADROOM_FRACTION)
