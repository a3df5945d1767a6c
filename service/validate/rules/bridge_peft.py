"""Rules on a Megatron Bridge ``peft:`` section by Bridge's own names (service/validate/megatron/peft.py reads the
section into this product's ``peft``; these judge what its file writes)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from service.validate.rules.registry import Violation, config_rule

if TYPE_CHECKING:
    from service.validate.view import ConfigView

# Codes whose findings name a dialect's key as its file writes it (no translation back from this product's names).
BRIDGE_NAMED = frozenset({"RA-C015"})
# Hugging Face PEFT's (LoraConfig r, lora_alpha, lora_dropout) and this product's (peft.rank) names for Bridge's
# fields: the same setting under another name, which no edit distance finds.
SYNONYMS = {"r": "dim", "rank": "dim", "lora_r": "dim", "lora_rank": "dim", "lora_dim": "dim",
            "lora_alpha": "alpha", "lora_dropout": "dropout", "target_module_names": "target_modules"}


def named_field(key: str, fields: tuple[str, ...]) -> str | None:
    """The field of Bridge's PEFT class that ``key`` is another spelling of, or None."""
    from service.configs.near_miss import near_miss

    if key in fields:
        return None
    if SYNONYMS.get(key) in fields:
        return SYNONYMS[key]
    return near_miss(key.removeprefix("lora_"), fields) or near_miss(key, fields)


@config_rule("RA-C015", "error", "peft", "a Megatron Bridge peft key is not a misspelt field",
             "Megatron Bridge peft/lora.py LoRA, peft/dora.py DoRA, peft/canonical_lora.py CanonicalLoRA and "
             "peft/module_matcher.py ModuleMatcher fields; training/utils/omegaconf_utils.py _apply_overrides "
             "skips a key the class has not, with a warning")
def bridge_peft_near_miss_keys(view: "ConfigView") -> Iterator[Violation]:
    from service.validate.megatron.peft import BRIDGE_PEFT_CLASSES, peft_class

    section = view.doc.dialect_sections.get("peft")
    name = peft_class(section)
    if not isinstance(section, dict) or name is None:  # another class's keys are its own
        return
    fields, dim, alpha = BRIDGE_PEFT_CLASSES[name]
    defaults = {"dim": dim, "alpha": alpha}
    for key in section:
        known = named_field(str(key), fields)
        if known is None:
            continue
        default = f" ({defaults[known]})" if known in defaults else ""
        yield Violation(f"peft.{key} is not a field of Bridge's {name}; it reads as `{known}`, which Bridge skips "
                        f"with a warning, so as written the run trains with {known} at its default{default}",
                        f"rename peft.{key} to peft.{known}", key=f"peft.{key}")
