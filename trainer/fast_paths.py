"""The bundled trainer's fast paths that apply to a target machine, as config keys. Pure data, no torch.

The planner calls `default_fast_paths(card.id, card.arch)` for `--engine bundled` and sets each
dotted key the base recipe leaves unset. Every key is an execution setting (same math, same
convergence): kernels and loss fusion change rounding only.

| key | GPU (ampere and newer) | CPU |
|---|---|---|
| model.attn_implementation | sdpa (flash / memory-efficient kernels) | sdpa (flash kernel for CPU) |
| model.kernels | auto (Liger when installed, else torch) | torch (memory-lean autograd functions) |
| loss_fn.chunked | auto (fused linear + cross-entropy unless TP) | auto |
| optimizer.fused | true (one kernel per step) | true (CPU fused AdamW, torch >= 2.4) |
| compile.enabled | true (inductor per block) | false (compile time outweighs short CPU runs) |

Measured in benchmarks/README.md ("Trainer speed" section). FP8 is a precision, i.e. a
convergence choice the planner makes, not a default here (trainer/fused/runtime.py runs it).
"""

from __future__ import annotations

from typing import Any, Optional

# Architectures of the recipe index's hardware cards with tensor cores that inductor and Liger target.
GPU_ARCHS = ("ampere", "ada", "hopper", "blackwell", "rubin")
# torch optimizers with a fused (single-kernel) step on CPU and CUDA.
FUSED_OPTIMIZERS = ("torch.optim.AdamW", "torch.optim.Adam", "torch.optim.SGD", "torch.optim.Adagrad")


def default_fast_paths(gpu_type: str, arch: str, optimizer_target: Optional[str] = "torch.optim.AdamW") -> dict[str, Any]:
    """Dotted config keys -> values that turn on the fast paths for hardware `gpu_type` of `arch`
    (the `arch` field of a recipe_index HardwareCard: "hopper", "cpu", ...). `optimizer.fused`
    is included only for an `optimizer_target` that has a fused step."""
    arch = (arch or "").lower()
    common: dict[str, Any] = {"model.attn_implementation": "sdpa", "loss_fn.chunked": "auto"}
    if optimizer_target in FUSED_OPTIMIZERS:
        common["optimizer.fused"] = True
    if arch == "cpu" or (gpu_type or "").lower() == "cpu":
        return {**common, "model.kernels": "torch", "compile.enabled": False}
    if arch in GPU_ARCHS:
        return {**common, "model.kernels": "auto", "compile.enabled": True}
    # An accelerator we have no measurements for: the portable paths only.
    return {**common, "model.kernels": "torch"}
