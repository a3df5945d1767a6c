"""Fused and memory-saving paths of the trainer's hot core, each with a plain-torch fallback.

- ops.py: RMSNorm, SwiGLU, RoPE (`model.kernels`: torch | liger | reference);
- linear_cross_entropy.py: LM head + cross-entropy without full logits (`loss_fn.chunked`);
- runtime.py: what this device can take (kernels, fused optimizer, CPU bf16, FP8 via torchao).

tests/test_fused_*.py hold each fused path to its fallback (loss and gradients) on CPU.
"""
