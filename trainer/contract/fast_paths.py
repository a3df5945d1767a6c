"""The bundled trainer's fast paths that apply to a target machine, as config keys. Pure data, no torch.

The recommender (service/recommend/recommendation.py build_config) calls `default_fast_paths(hw.name, hw.arch, ...)`
for `--engine bundled` and sets each dotted key the base recipe leaves unset. Every key is an
execution setting (same math, same convergence): kernels and loss fusion change rounding only.

| key | GPU (ampere and newer) | CPU |
|---|---|---|
| model.attn_implementation | sdpa (flash / memory-efficient kernels) | sdpa (flash kernel for CPU) |
| model.kernels | auto (Liger when installed, else torch) | torch (memory-lean autograd functions) |
| loss_fn.chunked | auto (fused linear + cross-entropy unless TP) | auto |
| optimizer.fused | true (one kernel per step; under FSDP2 only Adam/AdamW) | true (CPU fused AdamW, torch >= 2.4) |
| compile.enabled | true (inductor per block) | true from CPU_COMPILE_MIN_STEPS steps, else false |

On CPU inductor's C++ kernels made a step ~5 % faster (4-layer, hidden-256 Llama) but cost 20-45 s
of compilation per process, so they pay off only on long runs; the smoke-test recipes run 24-40
steps. Measured in benchmarks/README.md ("Trainer speed" section). FP8 is a precision, i.e. a
convergence choice the planner makes, not a default here (trainer/fused/runtime.py runs it).
"""

from __future__ import annotations

from typing import Any, Optional

# Architectures of the recipe index's hardware cards with tensor cores that inductor and Liger target.
GPU_ARCHS = ("ampere", "ada", "hopper", "blackwell", "rubin")
# torch optimizers with a fused (single-kernel) step on CPU and CUDA.
FUSED_OPTIMIZERS = ("torch.optim.AdamW", "torch.optim.Adam", "torch.optim.SGD", "torch.optim.Adagrad")
# Those whose fused kernel also runs on DTensor parameters (FSDP2, TP): torch registers a sharding
# strategy for aten._fused_adam(w)_ only (torch/distributed/tensor/_ops/_pointwise_ops.py, torch 2.13);
# fused SGD / Adagrad on a DTensor raise "does not have a sharding strategy registered".
DTENSOR_FUSED_OPTIMIZERS = ("torch.optim.AdamW", "torch.optim.Adam")


def optimizer_name(target: Optional[str]) -> Optional[str]:
    """``torch.optim.X`` for a torch optimizer however its module is spelt (``torch.optim.adamw.AdamW``
    is the same class as ``torch.optim.AdamW``); any other target unchanged."""
    if isinstance(target, str) and target.startswith("torch.optim.") and target.count(".") > 2:
        return "torch.optim." + target.rpartition(".")[2]
    return target


def fused_step_runs(optimizer_target: Optional[str], strategy: str) -> bool:
    """Whether torch's fused step of ``optimizer_target`` runs under ``distributed.strategy``."""
    name = optimizer_name(optimizer_target)
    if strategy == "fsdp2":
        return name in DTENSOR_FUSED_OPTIMIZERS
    return name in FUSED_OPTIMIZERS
# `loss_fn._target_` values that take `chunked` / `chunk_size` (None: the trainer's default loss).
TRAINER_LOSSES = (None, "trainer.loss.causal_lm_loss")
# Steps from which compiling the blocks pays off on CPU: ~0.2 s saved per step of the benchmark
# model against 20-45 s of compilation per process (benchmarks/README.md, "Trainer speed").
CPU_COMPILE_MIN_STEPS = 200


def default_fast_paths(gpu_type: str, arch: str, optimizer_target: Optional[str] = "torch.optim.AdamW",
                       loss_target: Optional[str] = None, max_steps: Optional[int] = None,
                       strategy: str = "fsdp2") -> dict[str, Any]:
    """Dotted config keys -> values that turn on the fast paths for hardware `gpu_type` of `arch`
    (the `arch` field of a recipe_index HardwareCard: "hopper", "cpu", ...). `optimizer.fused`
    is included only for an `optimizer_target` whose fused step runs under `strategy` (the
    default's, fsdp2: Adam/AdamW only; fused_step_runs), `loss_fn.chunked` only for
    the trainer's own loss (`loss_target` None or trainer.loss.causal_lm_loss); on CPU the blocks
    are compiled when the run has at least CPU_COMPILE_MIN_STEPS steps (`max_steps`)."""
    arch = (arch or "").lower()
    common: dict[str, Any] = {"model.attn_implementation": "sdpa"}
    if loss_target in TRAINER_LOSSES:
        common["loss_fn.chunked"] = "auto"
    if fused_step_runs(optimizer_target, strategy):
        common["optimizer.fused"] = True
    if arch == "cpu" or (gpu_type or "").lower() == "cpu":
        long_run = max_steps is not None and max_steps >= CPU_COMPILE_MIN_STEPS
        return {**common, "model.kernels": "torch", "compile.enabled": long_run}
    if arch in GPU_ARCHS:
        return {**common, "model.kernels": "auto", "compile.enabled": True}
    # An accelerator we have no measurements for: the portable paths only.
    return {**common, "model.kernels": "torch"}


def adapts_lm_head(cfg: Any) -> bool:
    """Whether a config puts a LoRA adapter on the LM head ("all-linear" leaves it out, trainer/components/peft.py):
    the chunked loss then cannot run (it multiplies by the frozen weight alone)."""
    targets = cfg.peft.target_modules if cfg.peft is not None else ()
    return not isinstance(targets, str) and any(t == "lm_head" or t.endswith(".lm_head") for t in targets)
