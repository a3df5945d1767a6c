"""What the bundled trainer can run: the planner's `--engine bundled` reads this.

Pure data, no torch import. Grow it together with the trainer (and its tests): every entry here
is exercised by tests/test_model_*.py, tests/test_parallel_*.py or tests/test_peft.py.
"""

from __future__ import annotations

CAPABILITIES: dict = {
    "strategies": ["fsdp2", "ddp"],
    # Megatron-style column/row splits via DTensor; with FSDP2 on a (dp, tp) mesh, never with DDP.
    "tensor_parallel": True,
    "sequence_parallel": True,
    "pipeline_parallel": False,
    "virtual_pipeline": False,
    "context_parallel": False,
    "expert_parallel": False,
    "moe": False,
    "recompute": ["none", "selective", "full"],
    # FSDP2 MixedPrecisionPolicy (param dtype, fp32 reduce); autocast for DDP. No fp8/nvfp4 kernels.
    "precisions": ["bf16", "fp32", "fp16"],
    "peft": ["lora"],
    "model_types": ["llama", "qwen2", "qwen3", "mistral"],
    "rope_types": ["default", "linear", "llama3"],
    "attn_implementations": ["sdpa", "eager"],
    "compile": True,
    # Combinations the trainer refuses with a clear error.
    "tp_with_ddp": False,
    "tp_with_lora": False,
    "chunked_loss_with_tp": False,
}


def supports(dimension: str) -> bool:
    """True when the trainer supports a parallel dimension or feature flag."""
    value = CAPABILITIES.get(dimension)
    return bool(value)
