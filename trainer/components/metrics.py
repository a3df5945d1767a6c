"""Per-step metrics (NeMo AutoModel's MetricsSample), JSONL files and the rank-0 progress bar.

MFU follows PaLM (Chowdhery et al. 2022, appendix B): model FLOPs per token
``6 N + 12 L d S`` (N parameters, L layers, d hidden size, S sequence length: the
second term is attention's score and value products), times tokens per second,
over the dense peak of all devices. The peak comes from the hardware card named
by ``hardware.gpu_type`` and only when that card describes the device the run is
on (a CPU run against an H100 card would be meaningless); otherwise mfu is null.
"""

from __future__ import annotations

import json
import resource
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Optional

from trainer.contract.atomic_files import write_atomic
from trainer.contract.safe_paths import open_no_follow


@dataclass
class MetricsSample:
    step: int
    epoch: int
    loss: float
    grad_norm: Optional[float]
    lr: float
    mem: float  # GiB: peak allocated on the accelerator, else peak resident memory of the process
    tps: float  # tokens per second, whole global batch
    mfu: Optional[float]  # fraction of the devices' dense peak
    # MoE models only (trainer.models.moe.collect_router_stats): the load-balancing loss (without its
    # coefficient), the tokens routed to the least / most loaded expert in one step, the largest coefficient
    # of variation of a layer's load, and per layer {layer, min, max, cv}.
    moe_aux_loss: Optional[float] = None
    expert_load_min: Optional[float] = None
    expert_load_max: Optional[float] = None
    expert_load_cv: Optional[float] = None
    expert_load: Optional[list[dict[str, float]]] = None

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for key in ("moe_aux_loss", "expert_load_min", "expert_load_max", "expert_load_cv", "expert_load"):
            if out[key] is None:  # dense models: the record keeps its keys
                del out[key]
        return out


def flops_per_token(num_params: int, num_layers: int, hidden_size: int, seq_length: int,
                    peft: bool = False) -> float:
    """Training FLOPs per token, PaLM appendix B: 6 N + 12 L d S, with the attention term halved for
    causal masking (the kernels skip the masked half). A frozen base (LoRA) computes no weight
    gradients: 4 N. The planner's MFU (service/estimate/steptime.py) counts the same way."""
    return (4.0 if peft else 6.0) * num_params + 6.0 * num_layers * hidden_size * seq_length


def peak_memory_gib(device) -> float:
    import torch

    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**30
    # ru_maxrss is KiB on Linux.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def device_peak_flops(gpu_type: Optional[str], precision: str, device_type: str) -> Optional[float]:
    """Dense peak FLOP/s of one device from the bundled hardware card, or None when unknown."""
    if not gpu_type:
        return None
    from recipe_index.errors import UnknownHardwareError
    from recipe_index.hardware import get_hardware

    try:
        card = get_hardware(gpu_type)
    except UnknownHardwareError:
        return None
    if (card.arch == "cpu") != (device_type == "cpu"):
        return None
    tflops = card.peak_tflops(precision)
    return tflops * 1e12 if tflops else None


class JsonlWriter:
    """Append-only JSON lines, flushed per record; written by rank 0 only."""

    def __init__(self, path: Path, enabled: bool):
        self.path = Path(path)
        self.enabled = enabled
        self._fh = None

    def start(self, resumed_step: Optional[int]) -> None:
        """A resumed run drops records past its checkpoint (left by a run that died after it);
        a fresh run moves an older file aside instead of mixing two runs in one file."""
        if not self.enabled or not self.path.is_file():
            return
        if resumed_step is None:
            self.path.rename(self.path.with_name(f"{self.path.name}.{int(time.time())}.old"))
            return
        self.truncate_after(resumed_step)

    def truncate_after(self, step: int) -> None:
        """Drop records past ``step``."""
        if not self.enabled or not self.path.is_file():
            return
        kept = []
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                if json.loads(line).get("step", 0) <= step:
                    kept.append(line)
            except (json.JSONDecodeError, AttributeError):
                continue  # a line torn by a kill
        # A staging file of a unique name, created new: a `training.jsonl.tmp` someone left (a link) is not ours.
        write_atomic(self.path, "".join(line + "\n" for line in kept))

    def write(self, record: dict[str, Any]) -> None:
        if not self.enabled:
            return
        if self._fh is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fh = open_no_follow(self.path, "a")
        self._fh.write(json.dumps(record) + "\n")
        self._fh.flush()

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None


def make_progress_bar(enabled: bool, total: int, initial: int):
    """A tqdm bar on rank 0 (None elsewhere)."""
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(total=total, initial=initial, desc="train", unit="step", dynamic_ncols=True)


def update_progress_bar(pbar, sample: MetricsSample, steps: int) -> None:
    if pbar is None:
        return
    pbar.set_postfix(loss=f"{sample.loss:.4f}", lr=f"{sample.lr:.2e}", tps=f"{sample.tps:,.0f}", refresh=False)
    pbar.update(steps)
