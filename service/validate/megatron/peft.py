"""A Megatron Bridge ``peft:`` section (a ``ConfigContainer``'s LoRA / DoRA / CanonicalLoRA dataclass) read into this
product's ``peft`` section, so the goal is PEFT and the same rules judge it.

Bridge names -> ours: ``dim`` -> ``rank``, ``alpha``, ``dropout``, ``target_modules`` (Megatron module names ->
the Hugging Face names this product writes, as recipe_index/megatron.py converts Bridge's recipes). Settings with no
counterpart here (``dropout_position``, ``lora_A_init_method``, ``exclude_modules``, ...) are Bridge's own and
need none. What the section leaves out takes the Bridge class's default (LoRA: dim 32, alpha 32; DoRA: alpha 64),
not this product's.

Bridge applies a YAML's keys to the dataclass by name and skips one the class has not, with a warning
(training/utils/omegaconf_utils.py ``_apply_overrides``): ``rank: 16`` trains at dim 32. RA-C015 reads the section
as written for such keys.
"""

from __future__ import annotations

from typing import Any, Optional

from recipe_index.megatron import LORA_TARGETS

# Bridge's PEFT dataclasses (pinned 067f987: peft/lora.py LoRA, peft/dora.py DoRA, peft/canonical_lora.py
# CanonicalLoRA), by class name: (their fields, their dim and alpha defaults). ModuleMatcher (peft/module_matcher.py)
# adds target_modules, exclude_modules and canonical_mapping to each.
MATCHER_FIELDS = ("target_modules", "exclude_modules", "canonical_mapping")
_COMMON = ("dim", "alpha", "dropout", "dropout_position", "lora_A_init_method", "lora_B_init_method")
BRIDGE_PEFT_CLASSES: dict[str, tuple[tuple[str, ...], int, int]] = {
    "LoRA": (MATCHER_FIELDS + _COMMON + (
        "sequence_parallel_input_regather", "a2a_experimental", "lora_dtype", "normalize_moe_lora",
        "share_expert_adapters", "experts_shared_outer_loras"), 32, 32),
    "DoRA": (MATCHER_FIELDS + _COMMON, 32, 64),
    "CanonicalLoRA": (MATCHER_FIELDS + _COMMON + ("normalize_moe_lora", "share_expert_adapters"), 32, 32),
}
# run_recipe.py's --mode lora / dora (scripts/training/run_recipe.py) names the class without a _target_.
SCHEMES = {"lora": "LoRA", "dora": "DoRA", "canonical_lora": "CanonicalLoRA"}
# CanonicalLoRA's split names (peft/canonical_lora.py), beside the fused ones the recipe conversion maps.
CANONICAL_TARGETS = {"linear_q": ("q_proj",), "linear_k": ("k_proj",), "linear_v": ("v_proj",),
                     "linear_fc1_up": ("up_proj",), "linear_fc1_gate": ("gate_proj",)}
# Bridge name -> this product's key in `peft`.
OURS = {"dim": "rank", "alpha": "alpha", "dropout": "dropout", "target_modules": "target_modules"}


def peft_class(section: Any) -> Optional[str]:
    """The Bridge PEFT class a section names (``LoRA``, ...), or None for one this table does not hold."""
    if isinstance(section, str):
        return SCHEMES.get(section.lower())
    target = section.get("_target_") if isinstance(section, dict) else None
    if target is None:
        return "LoRA"  # a section without a _target_ overrides the recipe's LoRA (Bridge's PEFT recipes)
    name = str(target).rpartition(".")[2]
    return name if name in BRIDGE_PEFT_CLASSES and str(target).startswith("megatron.bridge.peft.") else None


def bridge_peft_fields(section: Any) -> Optional[tuple[str, ...]]:
    """The keys the section's class takes, or None when the class is not one this table knows."""
    name = peft_class(section)
    return BRIDGE_PEFT_CLASSES[name][0] if name else None


def hf_targets(modules: Any) -> Any:
    """Bridge's target module names as this product writes them (``linear_qkv`` -> q/k/v_proj); a wildcard pattern
    or a name without a counterpart stays as written; anything but a list of names is left to the schema."""
    if not isinstance(modules, list) or not all(isinstance(m, str) for m in modules):
        return modules
    names: list[str] = []
    for module in modules:
        for name in LORA_TARGETS.get(module) or CANONICAL_TARGETS.get(module) or (module,):
            if name not in names:
                names.append(name)
    return names


def our_peft(section: Any) -> tuple[dict, dict[str, str]]:
    """This product's ``peft`` section for a Bridge one, and for each of its keys the Bridge key it came from
    (only the keys the section writes: a default has no line)."""
    name = peft_class(section) or "LoRA"
    _, dim, alpha = BRIDGE_PEFT_CLASSES[name]
    ours: dict[str, Any] = {"method": "lora", "rank": dim, "alpha": alpha}
    written: dict[str, str] = {}
    for theirs, key in OURS.items():
        if isinstance(section, dict) and section.get(theirs) is not None:
            value = section[theirs]
            ours[key] = hf_targets(value) if theirs == "target_modules" else value
            written[f"peft.{key}"] = f"peft.{theirs}"
    return ours, written
