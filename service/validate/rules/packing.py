"""Sequence-packing rules of Megatron Bridge (its ConfigContainer.validate() and packing helpers)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from service.validate.rules.registry import Violation, config_rule

if TYPE_CHECKING:  # pragma: no cover
    from service.validate.view import ConfigView


@config_rule("RA-B002", "error", "step_scheduler.local_batch_size",
             "offline packing (dataset.packed_sequence) runs with micro batch 1 on Megatron Bridge",
             "Bridge ConfigContainer.validate(): 'Micro batch size should be 1 when training with packed "
             "sequence' (Megatron Bridge, Sequence packing)")
def packed_sequence_micro_batch(view: "ConfigView") -> Optional[Violation]:
    cfg = view.config
    if cfg is None or cfg.distributed.strategy != "megatron":
        return None
    packed = (cfg.dataset.model_extra or {}).get("packed_sequence")
    mbs, gbs = cfg.step_scheduler.local_batch_size, cfg.step_scheduler.global_batch_size
    if packed is not True or mbs <= 1:
        return None
    return Violation(
        f"dataset.packed_sequence: true with step_scheduler.local_batch_size {mbs}: a pack already holds several "
        "samples, and Megatron Bridge refuses a micro batch above 1 with offline packing at start-up",
        f"set step_scheduler.local_batch_size: 1 and keep global_batch_size {gbs} (gradient accumulation takes "
        f"the factor {mbs}; the same experiment, only the layout changes)")
