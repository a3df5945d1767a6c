"""Step time, tokens/s per GPU and MFU of one parallel layout.

The model, per micro batch on the slowest pipeline stage:

* **Compute.** Model FLOPs per token are ``6·N`` (N: the parameters a token multiplies
  through: dense body, its top-k routed experts, the LM head; Kaplan et al. 2020) plus the
  attention term ``12·L·h·s`` (``6·a·(d_qk + d_v)·s`` per layer, which is ``12·h·s`` for
  standard heads; Narayanan et al. 2021, PaLM appendix B), halved for causal masking. GEMMs run at the precision's dense
  peak times an achievable efficiency that falls when a GEMM dimension is small (TP-split
  widths, few tokens per expert); causal fused attention runs at the BF16 peak (FP32 in an FP32
  run) times ``ATTENTION_EFFICIENCY``; element-wise kernels are bound by HBM bandwidth.
  Full recompute repeats the forward (8·N instead of 6·N).
* **Communication that does not overlap.** TP/SP all-gathers and reduce-scatters per block
  (4 per block and micro batch, over NVLink when TP stays in the NVLink domain, else over the
  inter-node link); the CP ring exchange of K/V beyond what attention hides; EP all-to-all
  dispatch and combine; pipeline point-to-point transfers.
* **Pipeline bubble** ``(PP-1)/VP`` micro-batch times (Narayanan et al. 2021: bubble fraction
  ``(PP-1)/(VP·m)``) when there are at least PP micro batches, ``(PP-m) + (m-1)/VP`` when there
  are fewer (:func:`pipeline_bubble`), and stage imbalance: the slowest stage sets the pace, its
  layers as Megatron splits them (``service.validate.rules.sizes.stage_split``) and, on the last stage, the
  LM head and loss, unless a layout string balances them with the layers.
* **Data parallel.** The gradient reduce-scatter (distributed optimizer) or all-reduce (DDP)
  overlaps the last micro batch's backward, the parameter all-gather the first forward, up
  to ``DP_OVERLAP_FRACTION``; FSDP gathers and reduces every micro batch.
* **Optimizer step**, bound by HBM bandwidth.
* **MoE time no term explains.** Published Megatron MoE steps take ``MOE_MEASURED_STEP_FACTOR``
  times the sum above (``benchmarks/step_time_published.py``); that rest of a MoE step is the
  breakdown's ``moe_unattributed_s``, and plan and recommend say so in a note
  (:func:`calibration_note`).

Collective costs are ring formulas (all-reduce ``2(n-1)/n·B``, all-gather and
reduce-scatter ``(n-1)/n·B``, all-to-all ``(n-1)/n·B`` per GPU) over the bus bandwidth
NCCL achieves (``service.estimate.constants``). Megatron's rank order is tp-cp-ep-dp-pp, so a group
spans its size times the sizes inside it; it runs over NVLink when that span fits in one
NVLink domain. MFU is model FLOPs per second over the dense peak of the training precision, so it
stays below the efficiencies above.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from recipe_index.cards import HardwareCard
from service.estimate import constants as C
from service.estimate.flops import ATTENTION_CAUSAL_FRACTION, gemm_passes, model_flops_per_token
from service.estimate.memory import ModelShape, adapter_params
from service.estimate.mfu_ceiling import mfu_ceiling
from service.facts import Layout
from service.layouts.arithmetic import stage_split


def pipeline_bubble(pp: int, vp: int, microbatches: int) -> float:
    """Idle time of a pipelined step, in micro-batch times of one stage.

    With at least PP micro batches, 1F1B (interleaved over VP chunks) idles ``(PP-1)/VP`` of them
    (Narayanan et al. 2021, eq. 1 and section 2.2.2). With fewer, the pipeline never fills: one
    micro batch still has to pass every stage forward and back, so the step is at least ``PP``
    stage times, and the other ``m-1`` follow one chunk (1/VP of a stage) apart:
    ``(PP - m) + (m - 1)/VP``. Both expressions meet at ``m = PP``.
    """
    if pp <= 1:
        return 0.0
    if microbatches >= pp:
        return (pp - 1) / vp
    return (pp - microbatches) + (microbatches - 1) / vp


def _moe_imbalance(experts: int, ep: int) -> float:
    """Load of the busiest EP rank over the mean (see MOE_EXPERT_LOAD_CV)."""
    if ep <= 1:
        return 1.0
    return 1.0 + C.MOE_EXPERT_LOAD_CV / math.sqrt(experts / ep) * math.sqrt(2.0 * math.log(ep))


def _overlapped(comm_s: float, hideable_s: float) -> float:
    """Cost of ``comm_s`` of traffic that can hide behind ``hideable_s`` of compute."""
    hidden = min(comm_s, hideable_s)
    return comm_s - hidden + C.OVERLAP_INTERFERENCE * hidden


@dataclass(frozen=True)
class StepTime:
    """Seconds per optimizer step and what they are made of (all exposed, i.e. not overlapped)."""

    step_time_s: float
    compute_s: float
    bubble_s: float
    tp_comm_s: float
    cp_comm_s: float
    ep_comm_s: float
    pp_comm_s: float
    dp_comm_s: float
    optimizer_s: float
    moe_unattributed_s: float  # measured MoE time no term above explains (C.MOE_MEASURED_STEP_FACTOR)
    tokens_per_s_per_gpu: float
    mfu: float

    def breakdown(self, digits: int = 4) -> dict:
        return {k: round(v, digits) for k, v in self.__dict__.items()}


@dataclass(frozen=True)
class _MicroBatch:
    """Whole-model costs of one micro batch on one GPU (before the pipeline split)."""

    layer_s: float  # compute of one average decoder layer
    head_s: float  # LM head and loss
    tp_s: float
    cp_s: float
    ep_s: float


class StepTimeModel:
    """Step-time estimates for one model, hardware, precision and batch; caches what layouts share.

    The planner builds one per request and calls :meth:`estimate` for every candidate.
    """

    def __init__(self, shape: ModelShape, hardware: HardwareCard, *, world_size: int, seq_length: int,
                 global_batch_size: int, precision: str = "bf16", engine: str = "megatron",
                 grad_reduce_dtype: str = "fp32", peft: bool = False,
                 explicit_layout: bool = False, compiled: bool = False, model_id: Optional[str] = None):
        self.shape, self.hw = shape, hardware
        self.explicit_layout = explicit_layout  # Bridge layout strings place its pipelines (stage_split)
        self.peft, self.passes = peft, gemm_passes(peft)
        self.adapters = adapter_params(shape, engine) if peft else 0.0
        self.world_size, self.seq, self.gbs = world_size, seq_length, global_batch_size
        self.precision, self.engine = precision, engine
        self.peak = hardware.peak_tflops(precision) * 1e12
        # Attention runs in BF16 in BF16/FP8/NVFP4 recipes, in FP32 in an FP32 run (never faster than that).
        self.peak_attention = min(hardware.bf16_tflops * 1e12, self.peak) if precision == "fp32" \
            else hardware.bf16_tflops * 1e12
        self.hbm = hardware.hbm_tbps * 1e12
        # The bundled trainer on a GPU runs PyTorch's own kernels (cuBLAS GEMMs, torchao float8, SDPA's
        # FlashAttention-2), eager unless the config compiles it; Megatron runs Transformer Engine's.
        gpu_bundled = engine == "bundled" and hardware.arch != "cpu"
        self.calibration = "bundled" if gpu_bundled else "megatron"
        efficiency = C.BUNDLED_MATMUL_EFFICIENCY if gpu_bundled else C.MATMUL_EFFICIENCY
        self.matmul_eff = efficiency.get(precision, efficiency["bf16"])
        self.attention_eff = C.BUNDLED_ATTENTION_EFFICIENCY if gpu_bundled else C.ATTENTION_EFFICIENCY
        self.elementwise_factor = C.BUNDLED_EAGER_ELEMENTWISE_FACTOR if gpu_bundled and not compiled else 1.0
        # No bundled estimate promises more than FSDP2 runs of its class reached (service/estimate/mfu_ceiling.py).
        self.mfu_ceiling = mfu_ceiling(shape, model_id, hardware, precision) if gpu_bundled and model_id else None
        # Hugging Face PEFT adapters are separate small GEMMs: each moves its input and output through HBM.
        self.adapter_bytes_per_token = (shape.lora_params_split / C.LORA_DEFAULT_RANK * C.LORA_ADAPTER_TRAFFIC_BYTES
                                        if peft and gpu_bundled else 0.0)
        # Gradients travel in the reduce dtype (Megatron grad_reduce_in_fp32, FSDP2 reduce_dtype, DDP's
        # bf16 compress hook); Megatron's fp32 parameters keep fp32 gradient buffers whatever it says.
        fp32_buffers = precision == "fp32" and engine == "megatron"
        self.grad_bytes = C.DTYPE_BYTES["fp32" if fp32_buffers else grad_reduce_dtype]
        self.domain = max(hardware.nvlink_domain, 1)
        self.tp_exposed = C.TP_COMM_EXPOSED_FRACTION if engine == "megatron" else 1.0
        self.moe_step_factor = C.MOE_MEASURED_STEP_FACTOR if shape.is_moe and engine == "megatron" else 1.0
        self.flops_per_token = model_flops_per_token(shape, seq_length, peft)
        self.half_dim = C.GEMM_HALF_EFFICIENCY_DIM.get(hardware.arch, C.GEMM_HALF_EFFICIENCY_DIM_DEFAULT)
        self._mb_cache: dict[tuple, _MicroBatch] = {}
        self._dp_cache: dict[tuple, tuple[float, float, float]] = {}
        self._structure_cache: dict[tuple, tuple] = {}

    def _size_efficiency(self, dim: float) -> float:
        """GEMM efficiency lost to a small dimension ``dim`` (tile and wave quantisation)."""
        return dim / (dim + self.half_dim)

    # ------------------------------------------------------------ links

    def _link(self, size: int, stride: int = 1) -> tuple[float, float]:
        """(bus bandwidth in bytes/s, latency) of a ring collective over ``size`` ranks ``stride`` apart.

        Inside one NVLink domain the ring runs over NVLink. Across domains NCCL runs one ring
        channel per member NIC, so the members a domain holds share the crossing: the bus
        bandwidth is min(NVLink, members per domain x NIC) (rail-optimised fabrics; nccl-tests
        multi-node busbw on DGX H100 approaches 8 x 50 GB/s with TP=1, one NIC's worth with TP=8).
        """
        hw = self.hw
        nvlink = hw.intra_node_gbps * 1e9 * C.NCCL_BUS_EFFICIENCY_NVLINK
        if size * stride <= self.domain:
            return nvlink, C.COLLECTIVE_LATENCY_NVLINK_S
        members = max(1, min(size, self.domain // stride)) if stride < self.domain else 1
        network = members * hw.inter_node_gbps * 1e9 * C.NCCL_BUS_EFFICIENCY_NETWORK
        return min(nvlink, network), C.COLLECTIVE_LATENCY_NETWORK_S

    # ------------------------------------------------------------ one micro batch

    def _micro_batch(self, tp: int, cp: int, ep: int, etp: int, sp: bool, mbs: int, recompute: str) -> _MicroBatch:
        key = (tp, cp, ep, etp, sp, mbs, recompute)
        cached = self._mb_cache.get(key)
        if cached is not None:
            return cached
        s = self.shape
        tokens = mbs * self.seq / cp
        size_tokens = self._size_efficiency(tokens)
        dense_eff = self.matmul_eff * size_tokens * self._size_efficiency(s.min_dense_width / tp)
        body_dense_s = self.passes * s.layer_dense_params / tp * tokens / (self.peak * dense_eff)
        head_s = self.passes * s.head_params / tp * tokens / (self.peak * dense_eff)
        expert_s = 0.0
        if s.is_moe:
            local_tokens = tokens / tp
            per_expert_tokens = local_tokens * s.top_k * ep / s.experts
            expert_eff = (self.matmul_eff * self._size_efficiency(per_expert_tokens)
                          * self._size_efficiency(s.expert_width / etp))
            imbalance = _moe_imbalance(s.experts, ep)
            expert_s = self.passes * s.active_expert_params * local_tokens / (self.peak * expert_eff) * imbalance
        attention_s = (s.attention_flops_coef * self.seq * tokens * ATTENTION_CAUSAL_FRACTION / tp
                       / (self.peak_attention * self.attention_eff * size_tokens))
        gathered = self.engine == "bundled"
        act_bytes = s.act_none.per_gpu(tp, sp and tp > 1, gathered) * tokens
        elementwise_s = (act_bytes * C.ELEMENTWISE_TRAFFIC_PER_ACTIVATION_BYTE * self.elementwise_factor
                         + tokens * self.adapter_bytes_per_token / tp) / self.hbm
        logits_s = tokens * s.vocab / tp * C.LOGITS_BYTES_UNFUSED * 2 / self.hbm
        gemm_s, other_s = body_dense_s + expert_s, attention_s + elementwise_s
        if recompute == "full":
            # The forward again: 2N more GEMM FLOPs (8/6 of the work, 6/4 under LoRA); attention and
            # element-wise kernels do their full backward under LoRA too (forward 1 + backward 2 -> 4/3).
            body_s = gemm_s * (self.passes + 2.0) / self.passes + other_s * 4.0 / 3.0
        elif recompute == "selective":
            body_s = (gemm_s + other_s) * C.SELECTIVE_RECOMPUTE_TIME_FACTOR
        else:
            body_s = gemm_s + other_s
        replay = 1.5 if recompute == "full" else 1.0  # full recompute replays the forward's collectives

        tp_s = 0.0
        if tp > 1:
            bw, lat = self._link(tp, 1)
            volume = tokens * s.hidden * C.ACTIVATION_BYTES * (tp - 1) / tp
            traffic = s.tp_blocks * 4 * (volume / bw + lat) * replay
            tp_s = traffic * self.tp_exposed + C.OVERLAP_INTERFERENCE * traffic * (1 - self.tp_exposed)
        cp_s = 0.0
        if cp > 1:
            bw, lat = self._link(cp, tp)
            ring = 3 * (cp - 1) * tokens * s.kv_bytes_per_token / tp / bw + 3 * (cp - 1) * s.attention_layers * lat
            exposed = max(ring * C.CP_MIN_EXPOSED_FRACTION, ring - C.CP_OVERLAP_FRACTION * attention_s)
            cp_s = exposed + C.OVERLAP_INTERFERENCE * (ring - exposed)
        ep_s = 0.0
        if s.is_moe and ep > 1:
            ep_s = self._ep_dispatch_s(tokens / tp, ep, etp) * replay
        result = _MicroBatch(layer_s=body_s / s.layers, head_s=head_s + logits_s, tp_s=tp_s, cp_s=cp_s, ep_s=ep_s)
        self._mb_cache[key] = result
        return result

    def _ep_dispatch_s(self, local_tokens: float, ep: int, etp: int) -> float:
        """Exposed seconds of one micro batch's MoE dispatch and combine (forward and backward).

        A token goes once to each EP rank holding one of its top-k experts (DeepEP/HybridEP send
        one copy per rank): ranks hit = ep·(1 - (1 - 1/ep)^k). When the EP group spans several
        NVLink domains, the hierarchical dispatchers (DeepEP internode, HybridEP) send a token
        once per destination *domain* over the network and fan it out over NVLink there, so the
        network carries only the domains hit = d·(1 - (1 - 1/d)^k) of the other d-1 domains.
        """
        s = self.shape
        a2a_bytes = 1.5 if self.precision in ("fp8", "nvfp4") else C.ACTIVATION_BYTES  # FP8 dispatch, BF16 combine
        token_bytes = local_tokens * s.hidden * a2a_bytes * _moe_imbalance(s.experts, ep)
        ranks_hit = ep * (1.0 - (1.0 - 1.0 / ep) ** s.top_k)
        span = etp * ep
        lat_nvl, lat_net = C.COLLECTIVE_LATENCY_NVLINK_S, C.COLLECTIVE_LATENCY_NETWORK_S
        nvl = self.hw.intra_node_gbps * 1e9 * C.ALLTOALL_EFFICIENCY
        if span <= self.domain:
            per_a2a = token_bytes * ranks_hit * (ep - 1) / ep / nvl + lat_nvl
            exposed = C.EP_A2A_EXPOSED_FRACTION_NVLINK
        else:
            domains = span / self.domain
            domains_hit = domains * (1.0 - (1.0 - 1.0 / domains) ** s.top_k)
            net = self.hw.inter_node_gbps * 1e9 * C.ALLTOALL_EFFICIENCY
            remote = token_bytes * domains_hit * (domains - 1) / domains / net
            local = token_bytes * ranks_hit / nvl  # NVLink fan-out inside the domain, alongside the network
            per_a2a = max(remote, local) + lat_net
            exposed = C.EP_A2A_EXPOSED_FRACTION_NETWORK
        traffic = s.moe_layers * 4 * per_a2a
        return traffic * exposed + C.OVERLAP_INTERFERENCE * traffic * (1 - exposed)

    # ------------------------------------------------------------ one step

    def _structure(self, tp: int, pp: int, vp: int, cp: int, ep: int, etp: int, sp: bool, sharding: str) -> tuple:
        """What a step shares across micro batch sizes and recompute: (dp, stage fraction, layers on the
        fullest stage, pipeline link, DP traffic before overlap, optimizer step)."""
        key = (tp, pp, vp, cp, ep, etp, sp, sharding)
        hit = self._structure_cache.get(key)
        if hit is None:
            layers = self.shape.layers
            dp = self.world_size // (tp * pp * cp)
            split = stage_split(layers, pp, vp, self.explicit_layout)
            fraction = max(split) / layers
            pp_bw, pp_lat = self._link(2, self.world_size // pp) if pp > 1 else (1.0, 0.0)  # to the next stage
            first, second, optimizer_s = self._dp_costs(tp, pp, cp, ep, etp, sharding, dp, fraction)
            hit = self._structure_cache[key] = (dp, fraction, split, pp_bw, pp_lat, first, second, optimizer_s)
        return hit

    def components(self, tp: int, pp: int, vp: int, cp: int, ep: int, etp: int, sp: bool, mbs: int,
                    recompute: str, sharding: str) -> tuple:
        """(step, compute, bubble, tp, cp, ep, pp, dp, optimizer, MoE unattributed) seconds per step of one
        layout, in plain arguments so the planner need not build a Layout per variant."""
        dp, _, (first, middle, last), pp_bw, pp_lat, dp_first, dp_second, optimizer_s = self._structure(
            tp, pp, vp, cp, ep, etp, sp, sharding)
        m = max(self.gbs // (mbs * dp), 1)
        mb = self._micro_batch(tp, cp, ep, etp, sp, mbs, recompute)
        layers = self.shape.layers
        # The slowest stage sets the pace: its layers, with their TP/CP/EP traffic, and on the last stage
        # the LM head and loss (all on it unless the split counts the loss as a layer, which stage_split
        # does by giving that stage one layer fewer). A layout string balances the head with the layers.
        per_layer = mb.layer_s + (mb.tp_s + mb.cp_s + mb.ep_s) / layers
        if self.explicit_layout and pp > 1:
            head_layers = mb.head_s / mb.layer_s if mb.layer_s > 0 else 0.0
            on_stage, head_s = max(first, math.ceil((layers + head_layers) / pp)), 0.0
        else:
            on_stage, head_s = max(((first, 0.0), (middle, 0.0), (last, mb.head_s)),
                                   key=lambda stage: stage[0] * per_layer + stage[1])
        compute = on_stage * mb.layer_s + head_s
        fraction = on_stage / layers
        tp_s, cp_s, ep_s = mb.tp_s * fraction, mb.cp_s * fraction, mb.ep_s * fraction
        pp_s = 0.0
        if pp > 1:
            boundary = mbs * self.seq / cp * self.shape.hidden * C.ACTIVATION_BYTES / (tp if sp and tp > 1 else 1)
            pp_s = 2 * vp * (boundary / pp_bw + pp_lat) * C.PP_P2P_EXPOSED_FRACTION
        t_mb = compute + tp_s + cp_s + ep_s + pp_s
        bubble = pipeline_bubble(pp, vp, m) * t_mb
        # DP traffic: exposed part plus OVERLAP_INTERFERENCE of the hidden part.
        if sharding == "full":  # gather for forward and backward and reduce-scatter, every micro batch
            dp_s = m * _overlapped(dp_first, C.DP_OVERLAP_FRACTION * t_mb)
        elif sharding == "optimizer":  # reduce-scatter under the last backward, all-gather under the first forward
            dp_s = (_overlapped(dp_first, C.DP_OVERLAP_FRACTION * t_mb * 2 / 3)
                    + _overlapped(dp_second, C.DP_OVERLAP_FRACTION * t_mb / 3))
        else:  # DDP all-reduce under the last backward
            dp_s = _overlapped(dp_first, C.DP_OVERLAP_FRACTION * t_mb * 2 / 3)
        modelled = m * t_mb + bubble + dp_s + optimizer_s
        unattributed = modelled * (self.moe_step_factor - 1.0)
        held = 0.0
        if self.mfu_ceiling:  # the time the step takes at the ceiling's MFU, if the terms above promise more
            floor = self.gbs * self.seq / self.world_size * self.flops_per_token / (self.mfu_ceiling * self.peak)
            held = max(0.0, floor - modelled)
            modelled += held
        return (modelled + unattributed, m * compute + held, bubble, m * tp_s, m * cp_s, m * ep_s, m * pp_s, dp_s,
                optimizer_s, unattributed)

    def step_seconds(self, layout: Layout, sharding: str = "optimizer") -> float:
        """Seconds per optimizer step (the planner's ranking needs only this)."""
        lay = layout
        return self.components(lay.tp, lay.pp, lay.vp or 1, lay.cp, lay.ep, lay.etp, lay.sp, lay.micro_batch_size,
                                lay.recompute, sharding)[0]

    def tokens_per_s_per_gpu(self, step_seconds: float) -> float:
        return self.gbs * self.seq / (step_seconds * self.world_size)

    def estimate(self, layout: Layout, sharding: str = "optimizer") -> StepTime:
        """Step time with its breakdown, tokens/s per GPU and MFU."""
        lay = layout
        return self.step_time(self.components(lay.tp, lay.pp, lay.vp or 1, lay.cp, lay.ep, lay.etp, lay.sp,
                                              lay.micro_batch_size, lay.recompute, sharding))

    def step_time(self, components: tuple) -> StepTime:
        """The StepTime of a layout's ``components`` (what the planner computed when it ranked the layout)."""
        step, compute, bubble, tp_s, cp_s, ep_s, pp_s, dp_s, optimizer_s, moe_s = components
        tokens_per_gpu = self.tokens_per_s_per_gpu(step)
        mfu = self.flops_per_token * tokens_per_gpu / self.peak
        return StepTime(step_time_s=step, compute_s=compute, bubble_s=bubble, tp_comm_s=tp_s, cp_comm_s=cp_s,
                        ep_comm_s=ep_s, pp_comm_s=pp_s, dp_comm_s=dp_s, optimizer_s=optimizer_s,
                        moe_unattributed_s=moe_s, tokens_per_s_per_gpu=tokens_per_gpu, mfu=mfu)

    def _dp_costs(self, tp: int, pp: int, cp: int, ep: int, etp: int, sharding: str, dp: int,
                  fraction: float) -> tuple[float, float, float]:
        """Collective seconds of one step's data-parallel traffic before overlap, and the optimizer step."""
        key = (tp, pp, cp, ep, etp, sharding, fraction)  # the stage's share of the layers follows the split
        hit = self._dp_cache.get(key)
        if hit is not None:
            return hit
        s = self.shape
        weights = ((s.layer_dense_params * fraction + max(s.embedding_params, s.head_params)) / tp,
                   s.layer_expert_params * fraction / (ep * etp))
        # Gradients and optimizer states: every weight, or under LoRA only the adapters (the frozen base
        # is still gathered by FSDP every forward and backward when sharded).
        dense, expert = (self.adapters * fraction / tp, 0.0) if self.peft else weights
        # Rank order tp-cp-ep-dp-pp: the dense DP x CP group strides TP ranks, the expert-DP
        # group strides ETP x EP ranks.
        dense_group, expert_group = dp * cp, max(self.world_size // (pp * ep * etp), 1)
        grad_bytes, weight_bytes = self.grad_bytes, C.DTYPE_BYTES["bf16"]

        def ring(bytes_per: float, params: tuple[float, float] = (dense, expert)) -> float:
            total = 0.0
            for count, size, stride in zip(params, (dense_group, expert_group), (tp, etp * ep)):
                if size > 1:
                    bw, _ = self._link(size, stride)
                    total += (size - 1) / size * count * bytes_per / bw
            return total

        if sharding == "full":  # gather the weights for forward and backward, reduce-scatter the gradients
            hit = (ring(2 * weight_bytes, weights) + ring(grad_bytes), 0.0, dense / dense_group + expert / expert_group)
        elif sharding == "optimizer":
            hit = (ring(grad_bytes), ring(weight_bytes), dense / dense_group + expert / expert_group)
        else:
            hit = (2 * ring(grad_bytes), 0.0, dense + expert)
        hit = (hit[0], hit[1], hit[2] * C.OPTIMIZER_STEP_BYTES_PER_PARAM / self.hbm)
        self._dp_cache[key] = hit
        return hit


def calibration_note(shape: ModelShape, engine: str) -> str | None:
    """What plan and recommend say when an estimate carries the measured MoE factor."""
    if not (shape.is_moe and engine == "megatron" and C.MOE_MEASURED_STEP_FACTOR != 1.0):
        return None
    return (f"MoE step times include the x{C.MOE_MEASURED_STEP_FACTOR:g} that NVIDIA's published Megatron MoE "
            "throughput shows over the modelled compute and communication (benchmarks/README.md, \"Step time vs "
            "published throughput\"); per model the measured factor ranges 1.4-1.9, so one MoE estimate can be "
            "about 20 % off either way. It scales every layout alike: the ranking does not depend on it")


def estimate_step_time(shape: ModelShape, hardware: HardwareCard, layout: Layout, *, world_size: int,
                       seq_length: int, global_batch_size: int, precision: str = "bf16",
                       sharding: str = "optimizer", engine: str = "megatron",
                       grad_reduce_dtype: str = "fp32", peft: bool = False,
                       explicit_layout: bool = False, compiled: bool = False) -> StepTime:
    """One-off estimate (the planner keeps a :class:`StepTimeModel` to share work across layouts)."""
    model = StepTimeModel(shape, hardware, world_size=world_size, seq_length=seq_length,
                          global_batch_size=global_batch_size, precision=precision, engine=engine,
                          grad_reduce_dtype=grad_reduce_dtype, peft=peft, explicit_layout=explicit_layout,
                          compiled=compiled)
    return model.estimate(layout, sharding)
