"""Every constant of the memory and step-time models, named, with where it comes from.

The estimators (``service.estimate.memory``, ``service.estimate.steptime``) read only from here, so a
reviewer can check the whole model on one page and a calibration change is one line.
Figures marked "assumed" are modelling choices, not measurements. Those marked "calibrated"
were tuned, within their physically plausible range, against the figures in
benchmarks/README.md: memory against torchtitan's published Llama 3.1 peaks, and the
step-time terms against the ranking of Megatron Bridge's expert-tuned benchmark layouts
(one global value each, never per model or per recipe).
"""

from __future__ import annotations

GIB = 1024**3

# ---------------------------------------------------------------- precision and training state

# Bytes per element of a tensor stored in a given format.
DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "nvfp4": 0.5}

# Activations are stored in bf16 whatever the GEMM precision: FP8/NVFP4 recipes quantise
# GEMM inputs on the fly and keep the bf16 tensors for backward (Transformer Engine
# fp8_autocast; Megatron Bridge mixed-precision recipes).
ACTIVATION_BYTES = 2

# Megatron mixed precision, per parameter (Megatron-LM theoretical_memory_usage.py,
# compute_weight_and_optimizer_memory: "18 bytes per parameter" without the distributed
# optimizer = 2 bf16 weight + 4 fp32 main grad + 12 Adam; with it 6 + 12/DP).
MEGATRON_WEIGHT_BYTES = 2
MEGATRON_MAIN_GRAD_BYTES = 4
ADAM_STATE_BYTES = 12  # fp32 master copy + first and second moments (Adam, Kingma & Ba 2015)

# FSDP2 with MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32), as torchtitan and
# NeMo AutoModel run it: the sharded parameter *is* the fp32 master, gradients are fp32
# shards, Adam adds two fp32 moments (HF Ultra-Scale Playbook, "Memory usage in Transformers":
# 4 + 4 + 8 = 16 bytes per parameter, all divided by the shard count under ZeRO-3).
FSDP2_PARAM_BYTES = 4
FSDP2_GRAD_BYTES = 4
FSDP2_ADAM_MOMENT_BYTES = 8
# Transient unsharded bf16 copies FSDP keeps: the block being computed plus the one prefetched.
FSDP_UNSHARDED_BLOCKS = 2

# LoRA: the frozen base stays in bf16 with no gradient or optimizer state; the adapters are
# trained in fp32 master + Adam like any parameter (Hu et al. 2021; Megatron Bridge peft/lora.py).
LORA_BASE_WEIGHT_BYTES = 2
LORA_ADAPTER_STATE_BYTES = 2 + 4 + ADAM_STATE_BYTES
LORA_DEFAULT_RANK = 32  # Megatron Bridge LoRA default dim (Megatron Bridge, section 1)
LORA_DEFAULT_RANK_BUNDLED = 8  # the bundled trainer's LoRA rank that recommend emits (config_build.LORA)

# ---------------------------------------------------------------- activations and logits

# FP8 / NVFP4 recipes save the quantised copy of each GEMM input for the backward GEMMs
# (Transformer Engine Linear/LayerNormLinear with fp8_autocast), not the bf16 tensor:
# 1 byte per element for FP8, 4 bits plus one E4M3 scale per 16 elements for NVFP4.
SAVED_GEMM_INPUT_BYTES = {"fp8": 1.0, "nvfp4": 0.5 + 1 / 16}

# Cross-entropy over the vocabulary, bytes per logit element held at the loss.
# Megatron's fused cross entropy (Bridge's cross_entropy_loss_fusion) keeps the bf16 logits and
# writes the gradient in place, with fp32 work per chunk: Megatron-LM theoretical_memory_usage.py
# counts 4·s·b·V for the output layer and loss. Unfused PyTorch loss (torchtitan, HF) holds bf16
# logits, their fp32 upcast and the fp32 log-softmax saved for backward.
LOGITS_BYTES_FUSED = 4
LOGITS_BYTES_UNFUSED = 2 + 4 + 4

# Per-layer activations follow Korthikanti et al. 2022, "Reducing Activation Recomputation in
# Large Transformer Models", Table 2 (sbh·(34 + 5as/h) without parallelism), re-derived
# tensor by tensor for today's blocks (see service/estimate/memory.py): no dropout, RMSNorm, gated MLP,
# grouped-query attention, fused (flash) attention which keeps no s x s matrix.
# Full recompute keeps only each layer's bf16 input (2 bytes per hidden element).
FULL_RECOMPUTE_BYTES_PER_HIDDEN = 2
# While full recompute re-runs one layer in backward, that layer's activations and their
# gradients are alive together (assumed: one copy each).
FULL_RECOMPUTE_WORKING_FACTOR = 2.0

# ---------------------------------------------------------------- allowances ("other")

# CUDA context, cuBLAS/cuDNN/Transformer Engine workspaces and NCCL channel buffers
# (CUDA C programming guide: ~0.3-0.5 GiB context; NCCL_BUFFSIZE 4 MiB per channel and peer).
RUNTIME_OVERHEAD_GIB = 1.5  # calibrated together with the fraction below
# A CPU run (gloo, the bundled trainer's smoke tests): the torch runtime and gloo buffers (assumed).
CPU_RUNTIME_OVERHEAD_GIB = 0.5
# Caching-allocator fragmentation, as a fraction of everything else (calibrated against
# torchtitan's reported peak reserved memory; PyTorch "CUDA memory management" notes).
FRAGMENTATION_FRACTION = 0.06
# DDP gradient buckets (torch DDP bucket_cap_mb=25, two buckets in flight) and Megatron's
# DDP bucket (40M elements) are counted inside the gradient term already.

# ---------------------------------------------------------------- fit thresholds

# A layout "fits" when its estimate leaves this fraction of the GPU free: allocator spikes and
# NCCL growth at scale (the estimate itself already carries the fragmentation allowance above).
MEMORY_HEADROOM_FRACTION = 0.05
# The memory-fit validate rule (service/validate/rules/memory_fit.py) warns above this fraction of the
# GPU, so tight configs are visible in CI, and errors above 100 %.
MEMORY_WARNING_FRACTION = 0.90
# Among layouts whose estimates tie, the planner prefers those at or below this fraction of the
# GPU: near capacity the caching allocator starts flushing and retrying (PyTorch "CUDA memory
# management": num_alloc_retries), fragmentation grows over a long run, and tuned recipes keep
# that margin (calibrated between 0.85 and 0.95 on the expert-layout benchmark; just under the
# warning threshold above).
MEMORY_COMFORT_FRACTION = 0.88

# ---------------------------------------------------------------- compute

# Fraction of the dense tensor-core peak that large training GEMMs sustain. cuBLAS/cuBLASLt
# reach ~75 % of the H100 BF16 peak on large square GEMMs (NVIDIA "Matrix Multiplication
# Background User's Guide"; Megatron-LM reports 47-52 % end-to-end MFU for GPT/Llama on H100,
# Narayanan et al. 2021 and the Megatron-Core README), lower for FP8 and NVFP4 where scaling
# and casting kernels take a larger share. NVFP4: 0.40 puts the 21 published NVFP4 dense
# measurements at a median of 1.05 (benchmarks/step_time_published.py; 0.50 gave 1.22).
MATMUL_EFFICIENCY = {"fp32": 0.70, "bf16": 0.72, "fp16": 0.72, "fp8": 0.62, "nvfp4": 0.40}
# GEMM efficiency falls when a dimension is small (tile and wave quantisation): modelled as
# d / (d + half) per dimension, with ``half`` growing with the MMA tile of the architecture:
# Ampere/Ada 128x128 CTA tiles, Hopper WGMMA 128x256, Blackwell 2-CTA UMMA 256x256 and more
# SMs to fill (NVIDIA CUTLASS tile shapes; "Matrix Multiplication Background User's Guide",
# wave quantisation). The half-efficiency sizes themselves are calibrated.
GEMM_HALF_EFFICIENCY_DIM = {"ampere": 128, "ada": 128, "hopper": 192, "blackwell": 384, "rubin": 512, "cpu": 16}
GEMM_HALF_EFFICIENCY_DIM_DEFAULT = 192
# FlashAttention-2/3 forward+backward sustain about half the BF16 peak (Dao 2023; Shah et al.
# 2024: FA3 forward 75 %, backward lower). Attention stays in BF16 in FP8 recipes.
ATTENTION_EFFICIENCY = 0.50
# Element-wise kernels (norms, activations, rotary, residuals, permutes, casts) are HBM-bound:
# each stored activation byte is written and read in forward and twice in backward (assumed).
ELEMENTWISE_TRAFFIC_PER_ACTIVATION_BYTE = 6.0
# Full recompute repeats the forward pass (Korthikanti et al. 2022, section 5: 8·N instead of
# 6·N FLOPs per token; steptime.py). Selective recompute of the cheap element-wise ops costs a few
# percent (ibid., Table 4: 2-4 %).
SELECTIVE_RECOMPUTE_TIME_FACTOR = 1.03
# Adam step: reads master, moments and grad, writes master, moments and the bf16 weight.
OPTIMIZER_STEP_BYTES_PER_PARAM = 4 * 4 + 3 * 4 + 2

# The bundled engine on a GPU (PyTorch FSDP2, no Transformer Engine). Fitted with leave-one-setup-out
# cross-validation on the published FSDP2 runs (torchtitan, NeMo AutoModel) and this trainer's own GPU runs
# (recipe_index/data/published_fsdp2_throughput.json, measured_bundled_trainer.json;
# benchmarks/bundled_calibration.py): the share of the dense peak its GEMMs sustain, fp8 being torchao's
# dynamic tensor-wise float8, whose casts and amax reductions are separate kernels (calibrated).
# Fitted on all 11 rows: bf16 0.58, fp8 0.38; out of sample (leave one setup out) the median absolute error is
# 10.8 % (benchmarks/README.md). fp16 runs the bf16 kernels; fp32 (no rows) keeps bf16's share of the peak.
BUNDLED_MATMUL_EFFICIENCY = {"fp32": 0.58, "bf16": 0.58, "fp16": 0.58, "fp8": 0.38}
# PyTorch's scaled_dot_product_attention runs FlashAttention-2 on Hopper: about 35 % of the BF16 peak forward
# and less backward (Shah et al. 2024, FlashAttention-3, figures 5-7: FA2 at 300-370 TFLOPs forward on H100).
BUNDLED_ATTENTION_EFFICIENCY = 0.35
# Eager PyTorch writes and reads every element-wise intermediate (norms, SwiGLU, rotary, residuals) that
# torch.compile fuses: element-wise traffic over the compiled count. Set from torchtitan's paired runs of
# Llama 3.1 8B with and without compile on one machine (6,667 vs 5,762 and 6,514 vs 5,605 tokens/s/GPU: 1.16x),
# which no hardware difference moves (benchmarks/bundled_calibration.py --compile-pair).
BUNDLED_EAGER_ELEMENTWISE_FACTOR = 3.0
# Hugging Face PEFT LoRA adapters are two small GEMMs beside each frozen linear: per token, the input is
# read for A, B's output written and added to the base output, and the same again backward: 2 bytes x 4
# passes per adapter input and output dimension (bf16 activations).
LORA_ADAPTER_TRAFFIC_BYTES = 8.0

# ---------------------------------------------------------------- communication

# Achieved NCCL bus bandwidth as a fraction of the link's one-way bandwidth (nccl-tests
# all_reduce_perf busbw: ~360-380 GB/s of 450 on H100 NVLink4, ~45 of 50 GB/s on NDR IB).
NCCL_BUS_EFFICIENCY_NVLINK = 0.80
NCCL_BUS_EFFICIENCY_NETWORK = 0.85
# All-to-all bandwidth with the flex dispatcher Bridge's recipes use (DeepEP README: ~150 of
# 160 GB/s NVLink and ~45 of 50 GB/s RDMA; HybridEP on NVL72 similar), less launch overhead.
ALLTOALL_EFFICIENCY = 0.80
# Launch + synchronisation latency of one collective (nccl-tests small-message latency).
COLLECTIVE_LATENCY_NVLINK_S = 10e-6
COLLECTIVE_LATENCY_NETWORK_S = 30e-6

# Share of TP/SP collectives left exposed by Transformer Engine's userbuffer overlap
# (tp_comm_overlap, on in Bridge's H100+ performance recipes; Wang et al. 2022 report most
# of the all-gather/reduce-scatter hidden behind the GEMMs) (assumed).
TP_COMM_EXPOSED_FRACTION = 0.35
# Share of pipeline point-to-point transfers left exposed (overlap_p2p_comm with VP,
# batched p2p without) (assumed).
PP_P2P_EXPOSED_FRACTION = 0.5
# The DP gradient reduce-scatter overlaps the last micro-batch's backward and the
# parameter all-gather the first micro-batch's forward (Megatron overlap_grad_reduce /
# overlap_param_gather); NCCL kernels take SMs, so at most this fraction hides (assumed).
DP_OVERLAP_FRACTION = 0.85
# Overlapped communication is not free: NCCL and userbuffer kernels take SMs and HBM
# bandwidth from the GEMMs they hide behind (NCCL uses up to 32 SMs per collective; Megatron-LM
# and TE docs on comm/compute overlap). Each hidden second of traffic slows compute by this
# fraction of a second (assumed).
OVERLAP_INTERFERENCE = 0.15
# Ring attention hides its K/V exchange behind the attention of the previous chunk
# (Megatron CP p2p, Liu et al. 2023 "Ring Attention") up to this fraction (assumed), but the
# first hop, the per-step synchronisation and the split attention kernels never hide:
# at least CP_MIN_EXPOSED_FRACTION of the ring traffic stays on the critical path (assumed).
CP_OVERLAP_FRACTION = 0.85
CP_MIN_EXPOSED_FRACTION = 0.25
# MoE token dispatch/combine: inside one NVLink domain the flex dispatcher (DeepEP/HybridEP,
# Bridge's performance default) moves tokens with few SMs while the router, permutation and
# shared experts run, so about a third stays on the critical path (calibrated). Across the network
# it is exposed unless overlap_moe_expert_parallel_comm is on (Megatron Bridge, 3e; off in
# most recipes).
EP_A2A_EXPOSED_FRACTION_NVLINK = 0.35
EP_A2A_EXPOSED_FRACTION_NETWORK = 1.0
# Routed tokens are not perfectly balanced and the busiest EP rank sets the pace. With a
# per-expert load coefficient of variation c (auxiliary-loss-balanced routers keep it near
# 0.1-0.3: Fedus et al. 2022), a rank holding E/EP experts carries c/sqrt(E/EP), and the busiest
# of EP ranks is about sqrt(2 ln EP) standard deviations above the mean (Gaussian order
# statistics). Calibrated low (0.05): DeepSeek-V3's auxiliary-loss-free balancing reports near
# even loads, and Bridge's benchmark recipes often force balancing.
MOE_EXPERT_LOAD_CV = 0.05
# Published Megatron MoE steps take this many times the time the terms above add up to, for the
# layout as published (median over 174 MoE measurements of the Megatron Bridge and NeMo performance
# summaries and dgxc-benchmarking, benchmarks/step_time_published.py; dense models: 1.05). What the
# terms miss is MoE-specific: router and top-k, token permutation, grouped-GEMM efficiency with many
# small experts, FP8 casts per expert, the dropless dispatcher's host sync. The measurements do not
# say which, and every attribution tried moved the layout ranking against the experts' choices
# (benchmarks/README.md), so the factor scales the whole MoE step: estimates, tokens/s and MFU come out
# right on average and the ranking of a request's layouts is unchanged. Megatron only (calibrated there).
MOE_MEASURED_STEP_FACTOR = 1.65

# ---------------------------------------------------------------- planner search space

# Layouts whose estimated throughput is within this fraction of the best of their group are a
# tie, ordered by layout preferences (ranking._preference): the model's own error
# is of this order (memory: about 10 % against published measurements, benchmarks/README.md).
ESTIMATE_TIE_TOLERANCE = 0.10
# A pipeline stage thinner than this many decoder layers is a tie-break loser: Megatron places
# whole layers, so one layer of imbalance (the embedding on the first stage, the LM head and loss
# on the last, an uneven split) is 25 % or more of such a stage, beyond what the estimate resolves.
# Checked on the expert-layout benchmark (thresholds 4-6 agree; 3 and 8 do worse).
MIN_LAYERS_PER_STAGE = 4
# Sequences longer than this are "long context": the recipe decision tree turns to CP there.
LONG_CONTEXT = 8192

MICRO_BATCH_SIZES = (1, 2, 3, 4, 6, 8)  # Bridge recipes use 1-8 (Megatron Bridge's recipes)
MAX_VIRTUAL_PIPELINE = 20  # largest VP in a shipped recipe (Llama 3 70B: 20)
# Explicit pipeline layouts with uneven stages: at most this many PP x VP stages (the DeepSeek-V3
# and Kimi K2 layout tables stop at 16: Megatron Bridge, 3g).
MAX_EXPLICIT_LAYOUT_STAGES = 16
# A CP rank below this many tokens cannot hide the ring exchange behind attention; the
# planner does not enumerate it (every recipe whose model the index carries keeps >= 1024).
MIN_TOKENS_PER_CP_RANK = 1024
# recommend keeps a recipe's own layout unless the planner's best is estimated faster by more than the model
# family's out-of-sample error: service/estimate/bands.py (family_bands.json, from benchmarks/step_time_cv.py).
