"""Model FLOPs per training token: what MFU counts, the step-time model computes with, and the bundled
engine's MFU ceiling compares published runs by."""

from __future__ import annotations

from service.estimate.memory import ModelShape

ATTENTION_CAUSAL_FRACTION = 0.5  # fused causal attention skips the masked half of the score blocks


def gemm_passes(peft: bool) -> float:
    """FLOPs per parameter and token of the weight GEMMs: forward 2, input gradient 2, weight gradient 2.
    A frozen base (LoRA) computes no weight gradients: 4 (Hu et al. 2021, section 4.2; the adapters'
    own FLOPs are under 1 % of the base at rank 32)."""
    return 4.0 if peft else 6.0


def model_flops_per_token(shape: ModelShape, seq_length: int, peft: bool = False) -> float:
    """Training FLOPs per token: 6·N_active (matmul parameters incl. LM head; 4·N under LoRA) + the causal
    attention term, half of 12·L·h·s: a causal kernel skips the masked half of the score blocks, and counting
    it would put MFU above what the GPU executes (FlashAttention's benchmark counts causal FLOPs so)."""
    return (gemm_passes(peft) * shape.gemm_params_per_token
            + shape.attention_flops_coef * seq_length * ATTENTION_CAUSAL_FRACTION)
