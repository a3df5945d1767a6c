"""Sequence-packing rules of Megatron Bridge (its ConfigContainer.validate() and packing helpers)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from service.validate.rules.registry import Violation, config_rule

if TYPE_CHECKING:  # pragma: no cover
    from service.validate.view import ConfigView
    from trainer.contract.config import RecipeConfig


def _packing_on_megatron(view: "ConfigView", switch: str) -> Optional["RecipeConfig"]:
    """The config when Megatron Bridge runs it with ``dataset.<switch>: true``, else None."""
    cfg = view.config
    if cfg is None or cfg.distributed.strategy != "megatron" or (cfg.dataset.model_extra or {}).get(switch) is not True:
        return None
    return cfg


@config_rule("RA-B002", "error", "step_scheduler.local_batch_size",
             "offline packing (dataset.packed_sequence) runs with micro batch 1 on Megatron Bridge",
             "Bridge ConfigContainer.validate(): 'Micro batch size should be 1 when training with packed "
             "sequence' (Megatron Bridge, Sequence packing)")
def packed_sequence_micro_batch(view: "ConfigView") -> Optional[Violation]:
    cfg = _packing_on_megatron(view, "packed_sequence")
    if cfg is None or cfg.step_scheduler.local_batch_size <= 1:
        return None
    mbs, gbs = cfg.step_scheduler.local_batch_size, cfg.step_scheduler.global_batch_size
    return Violation(
        f"dataset.packed_sequence: true with step_scheduler.local_batch_size {mbs}: a pack already holds several "
        "samples, and Megatron Bridge refuses a micro batch above 1 with offline packing at start-up",
        f"set step_scheduler.local_batch_size: 1 and keep global_batch_size {gbs} (gradient accumulation takes "
        f"the factor {mbs}; the same experiment, only the layout changes)")


@config_rule("RA-B003", "error", "dataset.enable_in_batch_packing",
             "in-batch packing (dataset.enable_in_batch_packing) needs a micro batch above 1 on Megatron Bridge",
             "Bridge training/config.py ConfigContainer.validate(): 'micro_batch_size should be greater than 1 when "
             "using enable_in_batch_packing=True' (ValueError)")
def in_batch_packing_micro_batch(view: "ConfigView") -> Optional[Violation]:
    cfg = _packing_on_megatron(view, "enable_in_batch_packing")
    if cfg is None or cfg.step_scheduler.local_batch_size != 1:
        return None
    gbs = cfg.step_scheduler.global_batch_size
    # Keyed to the packing switch: the micro batch is the memory-sized value, the packing what the recipe turned on
    # (Bridge's VLM SFT base, recipes/common.py _sft_common_vlm, enables it for every recipe built on it).
    return Violation(
        "dataset.enable_in_batch_packing: true with step_scheduler.local_batch_size 1: in-batch packing concatenates "
        "the sequences of one micro batch, so it needs at least 2, and Megatron Bridge refuses it at start-up",
        "set dataset.enable_in_batch_packing: false, or step_scheduler.local_batch_size: 2 (if "
        f"global_batch_size {gbs} stays divisible by it times the data-parallel size, and the micro batch fits)")
