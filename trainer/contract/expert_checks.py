"""Torch-free checks of an MoE model's expert layout, shared by the pre-flight (which reads the model's
config.json or bundled card) and the workers (trainer/recipes/model_io.py, with the built config), so the
two never disagree. Each refusal names the key, why, and the fix.
"""

from __future__ import annotations

from typing import Any, Optional

from trainer.contract.capabilities import CAPABILITIES
from trainer.contract.model_checks import declared_value
from trainer.contract.overrides import ConfigError

# Families the bundled trainer builds with experts (trainer/models/moe_config.py MOE_ARCHITECTURES).
MOE_MODEL_TYPES = tuple(CAPABILITIES["moe_model_types"])
EXPERT_COUNT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts")


def check_expert_layout(*, num_experts: Optional[int], ep_size: int, etp_size: int, tp_size: int,
                        strategy: str, world_size: int, activation_checkpointing: str = "none", cp_size: int = 1,
                        pp_size: int = 1) -> None:
    """What expert parallel cannot run. `num_experts`: the model's (0 for a dense model, None: not known
    before the model is built)."""
    check_expert_combinations(moe=bool(num_experts), ep_size=ep_size, etp_size=etp_size, tp_size=tp_size,
                              strategy=strategy, activation_checkpointing=activation_checkpointing, cp_size=cp_size,
                              pp_size=pp_size)
    if ep_size == 1:
        return
    if num_experts == 0:
        raise ConfigError(f"distributed.ep_size: {ep_size} but the model is dense (no experts); set ep_size: 1")
    if world_size % ep_size:
        raise ConfigError(f"distributed.ep_size: {ep_size} does not divide the world size {world_size}; EP is "
                          "carved out of data parallel: use an ep_size that divides the number of processes")
    if num_experts and num_experts % ep_size:
        options = [d for d in range(1, num_experts + 1) if num_experts % d == 0 and world_size % d == 0]
        raise ConfigError(f"distributed.ep_size: {ep_size} does not divide the model's {num_experts} experts; "
                          f"use ep_size in {options}")


def check_expert_combinations(*, moe: bool, ep_size: int, etp_size: int, tp_size: int, strategy: str,
                              activation_checkpointing: str, cp_size: int = 1, pp_size: int = 1) -> None:
    """The settings expert parallel does not combine with (the sizes aside); validate's RA-E007 applies
    these to every bundled MoE layout, its layout rules RA-L007..RA-L009 check the sizes."""
    if ep_size > 1 and etp_size > 1:
        raise ConfigError(f"distributed.etp_size: {etp_size}: the bundled trainer keeps each expert whole on one "
                          "rank (no expert tensor parallel); set etp_size: 1")
    if moe and tp_size > 1:
        raise ConfigError(f"distributed.tp_size: {tp_size}: tensor parallel does not split the MoE layers of the "
                          "bundled trainer; set tp_size: 1 and shard the experts with ep_size")
    if ep_size == 1:
        return
    if strategy != "fsdp2":
        raise ConfigError(f"distributed.ep_size: {ep_size} needs strategy fsdp2 (experts shard over an (edp, ep) "
                          f"mesh) and strategy {strategy} replicates every parameter; set distributed.strategy: "
                          "fsdp2 or ep_size: 1")
    for key, size, what in (("cp_size", cp_size, "context"), ("pp_size", pp_size, "pipeline")):
        if size > 1:
            raise ConfigError(f"distributed.{key}: {size}: {what} parallel does not combine with expert parallel in "
                              f"the bundled trainer (one mesh per run); set {key}: 1 or ep_size: 1")
    if activation_checkpointing == "selective":
        # The experts' own FSDP2 unit runs inside the checkpointed block, and its hooks run other ops in
        # the recompute than in the forward, which op-level selective checkpointing cannot match.
        raise ConfigError("distributed.activation_checkpointing: selective does not run with expert parallel; "
                          "use full or none (or ep_size: 1)")


def declared_experts(model_section: Any) -> Optional[int]:
    """The number of experts the model's config.json or bundled card declares: 0 for a dense model, None
    when the model is not readable before it is built (hub model, custom builder)."""
    where, model_type = declared_value(model_section, "model_type")
    if model_type is None:
        return None
    for key in EXPERT_COUNT_KEYS:
        value = declared_value(model_section, key)[1]
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return 0
