"""What the bundled trainer can run: the planner's `--engine bundled` reads this.

Pure data, no torch import. Grow it together with the trainer (and its tests).
"""

from __future__ import annotations

CAPABILITIES: dict = {
    "strategies": ["fsdp2", "ddp"],
    "tensor_parallel": True,
    "sequence_parallel": True,
    "pipeline_parallel": False,
    "virtual_pipeline": False,
    "context_parallel": False,
    "expert_parallel": False,
    "moe": False,
    "recompute": ["none", "selective", "full"],
    "precisions": ["bf16", "fp32", "fp16", "fp8"],
    "peft": ["lora"],
    "model_types": ["llama", "qwen2", "qwen3", "mistral"],
}


def supports(dimension: str) -> bool:
    """True when the trainer supports a parallel dimension or feature flag."""
    value = CAPABILITIES.get(dimension)
    return bool(value)
