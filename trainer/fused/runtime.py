"""Which fast path a run can take on the device it is on, decided once at setup.

- `resolve_kernels`: `model.kernels` auto | torch | liger | reference (trainer/fused/ops.py);
  `resolve_loss_kernels`: the same setting for the fused linear + cross-entropy.
- `fast_optimizer_kwargs`: `fused=True` for torch's Adam/AdamW/SGD/Adagrad (Adam/AdamW only under
  FSDP2, whose DTensor parameters have no fused SGD/Adagrad kernel) unless the config sets `fused`
  or `foreach` (one multi-tensor kernel per step instead of a loop of small ops; CPU has fused
  Adam(W) since torch 2.4).
- `cpu_has_native_bf16`: whether bf16 autocast on this CPU runs native bf16 GEMMs (AVX512-BF16,
  AMX, Arm BF16) or emulates them, slower than fp32.
- `apply_fp8`: torchao float8 linears (Micikevicius et al. 2022, "FP8 Formats for Deep Learning")
  on CUDA devices of compute capability 8.9+ (Ada, Hopper, Blackwell), refused elsewhere.

Every refusal is a ConfigError that names the key and the fix.
"""

from __future__ import annotations

import importlib.util
import platform
from pathlib import Path
from typing import Any, Mapping, Optional

import torch
from torch import nn

from trainer.contract.fast_paths import fused_step_runs
from trainer.contract.overrides import ConfigError
from trainer.models.config import KERNEL_SETTINGS

_FUSED_DEVICES = ("cpu", "cuda", "xpu", "mps")
FP8_MIN_CAPABILITY = (8, 9)
# torch._scaled_mm needs both GEMM dimensions of the weight to be multiples of 16.
FP8_DIM_MULTIPLE = 16
_CPU_BF16_FLAGS = ("avx512_bf16", "amx_bf16", "bf16")  # x86 AVX512-BF16 / AMX; Arm FEAT_BF16 ("bf16")


def liger_available() -> bool:
    return importlib.util.find_spec("liger_kernel") is not None


def resolve_kernels(setting: str, device_type: str, *, compile_enabled: bool = False) -> str:
    """`model.kernels` for this run. "auto": Liger on CUDA when installed and blocks are not
    compiled (inductor fuses the same ops itself), otherwise the plain-torch fused functions."""
    if setting not in KERNEL_SETTINGS:
        raise ConfigError(f"model.kernels: {setting!r} is not one of {', '.join(KERNEL_SETTINGS)}")
    if setting == "auto":
        return "liger" if device_type == "cuda" and liger_available() and not compile_enabled else "torch"
    if setting == "liger":
        if device_type != "cuda":
            raise ConfigError(f"model.kernels: liger runs Triton kernels on CUDA GPUs; this run is on {device_type}. "
                              "Use model.kernels: auto or torch")
        if not liger_available():
            raise ConfigError("model.kernels: liger needs the liger-kernel package: pip install "
                              "'recipe-advisor[gpu]', or set model.kernels: torch")
    return setting


def resolve_loss_kernels(setting: str, device_type: str) -> str:
    """The fused loss's implementation: Liger's kernel on CUDA when installed and `model.kernels` is
    auto or liger (compiled blocks do not change it: the loss runs outside them), else plain torch."""
    if setting in ("auto", "liger") and device_type == "cuda" and liger_available():
        return "liger"
    return "torch"


def fast_optimizer_kwargs(target: Optional[str], kwargs: Mapping[str, Any], device_type: str,
                          strategy: str = "ddp") -> dict[str, Any]:
    """The optimizer's keyword arguments with `fused=True` added where torch has a fused kernel for
    this device and ``distributed.strategy`` (trainer.contract.fast_paths.fused_step_runs)."""
    out = dict(kwargs)
    if (fused_step_runs(target, strategy) and device_type in _FUSED_DEVICES and "fused" not in out
            and "foreach" not in out):
        out["fused"] = True
    return out


def _cpu_flags() -> set[str]:
    cpuinfo = Path("/proc/cpuinfo")
    if not cpuinfo.is_file():
        return set()
    flags: set[str] = set()
    for line in cpuinfo.read_text(errors="replace").splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            flags.update(value.split())
    return flags


def cpu_has_native_bf16(flags: Optional[set[str]] = None) -> bool:
    """True when this CPU multiplies bf16 natively (Linux cpuinfo flags; Apple M2+ on macOS)."""
    if flags is None:
        if platform.system() == "Darwin" and platform.machine() == "arm64":
            return _darwin_bf16()
        flags = _cpu_flags()
    return any(flag in flags for flag in _CPU_BF16_FLAGS)


def _darwin_bf16() -> bool:
    import subprocess

    try:
        out = subprocess.run(["sysctl", "-n", "hw.optional.arm.FEAT_BF16"], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return False
    return out.stdout.strip() == "1"


def cpu_precision_warning(precision: str, device_type: str, flags: Optional[set[str]] = None) -> Optional[str]:
    """A warning for half-precision training on a CPU that emulates it, else None."""
    if device_type != "cpu" or precision not in ("bf16", "fp16"):
        return None
    if precision == "bf16" and cpu_has_native_bf16(flags):
        return None
    return (f"precision {precision} on this CPU: it has no native {precision} matrix units (AVX512-BF16/AMX), so "
            "autocast emulates them and runs slower than fp32; set precision: fp32 for CPU runs")


def fp8_module_filter(module: nn.Module, fqn: str) -> bool:
    """Linears that train in float8: plain nn.Linear (not LoRA) with both dimensions multiples of 16,
    except the LM head (its logits stay in bf16, as torchtitan's float8 converter does)."""
    if type(module) is not nn.Linear or fqn.rsplit(".", 1)[-1] == "lm_head":
        return False
    return module.in_features % FP8_DIM_MULTIPLE == 0 and module.out_features % FP8_DIM_MULTIPLE == 0


def check_fp8(device_type: str, capability: Optional[tuple[int, int]] = None, tp_size: int = 1) -> None:
    """Refuse precision fp8 where it cannot run, saying why and what to do instead."""
    if device_type != "cuda":
        raise ConfigError(f"precision: fp8 trains with torchao float8 linears on NVIDIA GPUs of compute capability "
                          f"{FP8_MIN_CAPABILITY[0]}.{FP8_MIN_CAPABILITY[1]}+ (Ada, Hopper, Blackwell); this run is on "
                          f"{device_type}. Use precision: bf16 or fp32 here")
    if capability is not None and tuple(capability) < FP8_MIN_CAPABILITY:
        raise ConfigError(f"precision: fp8 needs compute capability {FP8_MIN_CAPABILITY[0]}.{FP8_MIN_CAPABILITY[1]}+ "
                          f"(Ada, Hopper, Blackwell); this GPU has {capability[0]}.{capability[1]}. "
                          "Use precision: bf16")
    if tp_size > 1:
        raise ConfigError("precision: fp8 runs with data parallel (FSDP2/DDP) only in the bundled trainer; "
                          "set distributed.tp_size: 1 or precision: bf16")
    if importlib.util.find_spec("torchao") is None:
        raise ConfigError("precision: fp8 needs torchao: pip install 'recipe-advisor[gpu]', or use precision: bf16")


def apply_fp8(model: nn.Module, device_type: str, tp_size: int = 1) -> nn.Module:
    """Swap eligible linears for torchao's Float8Linear (dynamic tensor-wise scaling). Before sharding."""
    capability = torch.cuda.get_device_capability() if device_type == "cuda" else None
    check_fp8(device_type, capability, tp_size)
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    return convert_to_float8_training(model, module_filter_fn=fp8_module_filter, config=Float8LinearConfig())
