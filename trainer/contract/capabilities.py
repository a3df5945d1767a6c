"""What the bundled trainer can run: the planner's `--engine bundled` reads this.

Pure data, no torch import. Grow it together with the trainer (and its tests): every entry here
is exercised by tests/trainer/models/, tests/trainer/distributed/test_parallel_*.py,
tests/trainer/components/test_peft.py or tests/trainer/fused/.
"""

from __future__ import annotations

from typing import Optional

from trainer.contract.fast_paths import FUSED_OPTIMIZERS, GPU_ARCHS

# Hardware-card architectures whose GPUs run torchao's float8 GEMMs (compute capability 8.9+:
# torch._scaled_mm on Ada, Hopper, Blackwell and later; trainer/fused/runtime.py check_fp8).
FP8_ARCHS = tuple(arch for arch in GPU_ARCHS if arch != "ampere")

CAPABILITIES: dict = {
    "strategies": ["fsdp2", "ddp"],
    # Megatron-style column/row splits via DTensor; with FSDP2 on a (dp, tp) mesh, never with DDP.
    "tensor_parallel": True,
    "sequence_parallel": True,
    # torch.distributed.pipelining, stages cut at Megatron's split (trainer/contract/pipeline_split.py), FSDP2
    # within each stage; vp_size > 1 runs interleaved 1F1B (trainer/distributed/pipeline.py).
    "pipeline_parallel": True,
    "virtual_pipeline": True,
    "pipeline_schedules": ["1f1b", "interleaved_1f1b"],
    # Load-balanced chunks (2 x CP per sequence), keys and values all-gathered over the cp mesh dimension
    # (trainer/distributed/context_parallel.py); with FSDP2 or DDP over dp x cp, and with TP.
    "context_parallel": True,
    "cp_attention": "all_gather_kv",
    # Experts Shard(0) over an ``ep`` mesh dimension carved out of DP (tokens moved by all-to-all), FSDP2
    # over the expert-data-parallel rest (trainer/distributed/expert_parallel.py). Whole experts per rank:
    # no expert tensor parallel; MoE layers not under TP; not with DDP or selective recompute.
    "expert_parallel": True,
    "expert_tensor_parallel": False,
    "moe": True,
    # deepseek_v3: sigmoid group-limited routing with a selection bias, shared experts, MLA attention
    # (trainer/models/deepseek.py), which TP and CP do not split (trainer/contract/attention_checks.py).
    "moe_model_types": ["qwen3_moe", "qwen2_moe", "mixtral", "deepseek_v3"],
    "mla_with_tp": False,
    "mla_with_cp": False,
    "moe_with_tp": False,
    "ep_with_ddp": False,
    "ep_with_selective_recompute": False,
    # One mesh per run: the expert mesh (edp, ep) or the layout mesh (pp, dp, cp); not both yet.
    "ep_with_cp": False,
    "ep_with_pp": False,
    "recompute": ["none", "selective", "full"],
    # FSDP2 MixedPrecisionPolicy (param dtype, reduce dtype: distributed.grad_reduce_dtype, fp32 by
    # default); autocast for DDP, whose bf16 reduce is PyTorch's bf16_compress_hook. Everywhere.
    "precisions": ["bf16", "fp32", "fp16"],
    # Float8 training through torchao (optional extra `gpu`): eligible linears swapped for
    # Float8Linear with dynamic tensor-wise scaling, LM head kept in bf16; only on FP8_ARCHS, with
    # data parallel only. Hardware-dependent, hence apart from "precisions": see supports_precision.
    "fp8": {"via": "torchao.float8", "extra": "gpu", "archs": list(FP8_ARCHS), "tensor_parallel": False,
            "pipeline_parallel": False, "context_parallel": False},
    "peft": ["lora"],
    "model_types": ["llama", "qwen2", "qwen3", "mistral", "qwen3_moe", "qwen2_moe", "mixtral", "deepseek_v3"],
    "rope_types": ["default", "linear", "llama3", "yarn"],
    "attn_implementations": ["sdpa", "eager"],
    "compile": True,
    # Fused and memory-saving paths (trainer/fused), each with a plain-torch fallback that a CPU
    # test holds it to (loss and gradients). `model.kernels`: auto | torch | liger | reference.
    "kernels": ["auto", "torch", "liger", "reference"],
    # RMSNorm, SwiGLU and RoPE (trainer/fused/ops.py rms_norm, silu_mul, rotary) as autograd
    # functions (torch) or Liger's Triton kernels (liger, CUDA); the fused loss is
    # trainer/fused/linear_cross_entropy.py.
    "fused_ops": ["rms_norm", "silu_mul", "rotary"],
    # loss_fn.chunked: LM head + cross-entropy chunk by chunk, never the whole logits (not with TP).
    "fused_loss": True,
    # optimizer.fused: one multi-tensor kernel per step, CPU and CUDA.
    "fused_optimizers": list(FUSED_OPTIMIZERS),
    # Combinations the trainer refuses with a clear error.
    "tp_with_ddp": False,
    "tp_with_lora": False,
    "chunked_loss_with_tp": False,
    # What pipeline parallel does not combine with here (trainer/contract/layout_checks.py check_pipeline).
    "pp_with_ddp": False,
    "pp_with_tp": False,
    "pp_with_cp": False,
    "pp_with_lora": False,
    "pp_with_tied_embeddings": False,
}


def supports(dimension: str) -> bool:
    """True when the trainer supports a parallel dimension or feature flag."""
    value = CAPABILITIES.get(dimension)
    return bool(value)


def supports_precision(precision: str, arch: Optional[str] = None, tp_size: int = 1, *, pp_size: int = 1,
                       cp_size: int = 1) -> bool:
    """Whether the trainer trains in `precision` on hardware of `arch` (a HardwareCard's `arch`;
    None: any hardware) with tensor, pipeline and context parallel sizes `tp_size`, `pp_size`, `cp_size`."""
    if precision in CAPABILITIES["precisions"]:
        return True
    if precision != "fp8":
        return False
    fp8 = CAPABILITIES["fp8"]
    for size, dimension in ((tp_size, "tensor_parallel"), (pp_size, "pipeline_parallel"),
                            (cp_size, "context_parallel")):
        if size > 1 and not fp8.get(dimension, False):
            return False
    return arch is not None and arch.lower() in fp8["archs"]
