"""The highest MFU a bundled-engine estimate may show: what FSDP2 runs of its model class reached.

The bundled engine's efficiencies are fitted on published FSDP2 runs (torchtitan, NeMo AutoModel) and this
trainer's own GPU runs, to about 11 % out of sample; an estimate above every published run of its class would be
a promise nothing backs. So on the hardware and precision those runs cover (Hopper, BF16), a dense model's
estimate is held to the best MFU published for its size class (or, for a class with no run, for any class),
unless this trainer measured the model on that GPU, which then backs up to its own measured MFU.

MFU is counted as the step-time model counts it (``model_flops_per_token`` over the dense BF16 peak), for the
published runs too, so the ceiling and the estimate compare like with like.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Optional

from recipe_index import find_bundled_model, get_hardware
from recipe_index.cards import HardwareCard
from recipe_index.measurements import bundled_trainer_runs, fsdp2_calibration_rows, measured_tokens_per_s
from service.estimate.flops import model_flops_per_token
from service.estimate.memory import ModelShape, model_shape

CEILING_ARCHS = ("hopper",)
CEILING_PRECISIONS = ("bf16",)
# Size classes by the parameters a token multiplies through (upper bounds, in parameters).
SIZE_CLASSES = (3e9, 15e9, 100e9, float("inf"))


def size_class(shape: ModelShape) -> int:
    return next(i for i, bound in enumerate(SIZE_CLASSES) if shape.gemm_params_per_token < bound)


def _mfu(row: dict) -> Optional[tuple[str, str, int, float]]:
    """(model, hardware, size class, MFU) of a dense BF16 Hopper run, as this project counts MFU."""
    card = find_bundled_model(row["model"] or "")
    if card is None or card.is_moe or row["precision_token"] not in CEILING_PRECISIONS:
        return None
    hardware = get_hardware(row["hardware"])
    if hardware.arch not in CEILING_ARCHS:
        return None
    shape = model_shape(card)
    flops = model_flops_per_token(shape, row["seq_length"], row["mode"] == "peft")
    return card.id, hardware.name, size_class(shape), flops * measured_tokens_per_s(row) / (
        hardware.peak_tflops("bf16") * 1e12)


@lru_cache(maxsize=1)
def _published() -> tuple[dict[int, float], float, dict[tuple[str, str], float]]:
    """(best published MFU per size class, best over all classes, this trainer's best per (model, GPU))."""
    by_class: dict[int, float] = {}
    for row in fsdp2_calibration_rows():
        found = _mfu(row)
        if found:
            by_class[found[2]] = max(by_class.get(found[2], 0.0), found[3])
    own: dict[tuple[str, str], float] = {}
    for row in bundled_trainer_runs():
        found = _mfu(row)
        if found:
            own[found[:2]] = max(own.get(found[:2], 0.0), found[3])
    return by_class, max(by_class.values(), default=0.0), own


def mfu_ceiling(shape: ModelShape, model_id: str, hardware: HardwareCard, precision: str) -> Optional[float]:
    """The MFU a bundled-engine estimate of this model may not exceed, or None where no run covers it."""
    if shape.is_moe or hardware.arch not in CEILING_ARCHS or precision not in CEILING_PRECISIONS:
        return None
    by_class, best, own = _published()
    if not best:
        return None
    ceiling = by_class.get(size_class(shape), best)
    return max(ceiling, own.get((model_id, hardware.name), 0.0))
