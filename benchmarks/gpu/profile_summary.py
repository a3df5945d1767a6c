"""Where a training step's time goes, from a torch.profiler trace: GEMMs, attention, element-wise, communication, idle.

bench.py ``--profile`` runs its timed steps under ``torch.profiler`` (CPU and CUDA activities) and writes
``kernel_groups`` of them into its report's ``profile``. The groups are by kernel name, the way the usual trace
readers group them: a GEMM is a cuBLAS/CUTLASS/Triton matmul kernel (``gemm``, ``matmul``, ``mm_``, ``cutlass``,
``sm90_xmma``, ``nvjet``), attention is a flash / memory-efficient / cuDNN attention kernel, communication is a NCCL
kernel, and the rest of the device's busy time is element-wise and reductions (norms, activations, optimizer,
copies). Idle is the wall time of the profiled steps the device spent running no kernel: launch gaps, host syncs,
the Python between kernels — what CUDA graphs or a whole-model compile remove.
"""

from __future__ import annotations

from typing import Iterable

GROUPS = (
    ("communication", ("nccl",)),
    ("attention", ("flash", "fmha", "attention", "cudnn_sdpa", "sdpa", "attn")),
    ("gemm", ("gemm", "matmul", "mm_", "cutlass", "xmma", "nvjet", "cublas", "grouped_mm")),
)


def group_of(kernel_name: str) -> str:
    """The group a device kernel's name puts it in; element-wise when no group's needle is in it."""
    name = kernel_name.lower()
    for group, needles in GROUPS:
        if any(needle in name for needle in needles):
            return group
    return "element-wise"


def kernel_groups(events: Iterable, wall_s: float) -> dict[str, float]:
    """Seconds of device time per group over the profiled steps, and ``idle`` = wall - busy (never below 0).

    ``events``: ``prof.key_averages()`` entries (``key``, ``self_device_time_total`` in microseconds; older torch
    names it ``self_cuda_time_total``). Only device kernels carry device time, so host-side operators add 0."""
    out = {group: 0.0 for group, _ in GROUPS} | {"element-wise": 0.0}
    for event in events:
        micros = getattr(event, "self_device_time_total", None)
        if micros is None:
            micros = getattr(event, "self_cuda_time_total", 0.0)
        if micros:
            out[group_of(event.key)] += micros / 1e6
    busy = sum(out.values())
    out["idle"] = max(0.0, wall_s - busy)
    out["wall"] = wall_s
    return out


def shares(groups: dict[str, float]) -> dict[str, float]:
    """Each group's share of the profiled wall time."""
    wall = groups.get("wall") or 0.0
    return {k: (v / wall if wall else 0.0) for k, v in groups.items() if k != "wall"}
