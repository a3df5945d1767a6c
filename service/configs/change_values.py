"""A config value as the trainer reads it, for ``diff`` (service/configs/changes.py): the schema default of a key a
config leaves out, one spelling of values the trainer takes alike (``bf16`` and ``torch.bfloat16``; LoRA target
modules in any order; a list and its tuple default), and where the schema's strict types make ``2`` and ``2.0``
two settings."""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel

from service.configs.bridge_keys import CHECK_DEFAULTS
from trainer.contract.config import RecipeConfig, section_type
from trainer.contract.model_settings import DTYPES
from trainer.contract.optim_defaults import optimizer_defaults

MISSING = "<absent>"


def _schema_default(key: str, flat: dict[str, Any]) -> Any:
    """What the trainer reads for a key this (flattened) config leaves out: its RecipeConfig default.

    MISSING where there is none: unknown keys, required ones, a `_target_` section's kwargs (the
    callable's defaults are not in the schema), and keys of an optional section (peft, metadata, ...)
    the config does not have, because such a section is off, not filled in. A whole section left out
    is ``{}``, no settings, when it always exists, so ``step_scheduler: {}`` equals no step_scheduler.
    """
    section, _, rest = key.partition(".")
    field = RecipeConfig.model_fields.get(section)
    if field is None or field.is_required():
        return MISSING
    default = field.get_default(call_default_factory=True)
    if not rest:
        return {} if isinstance(default, BaseModel) else default
    if default is None and not _has_section(flat, section):
        return MISSING
    model = section_type(section)
    if model is None:
        return MISSING
    for name, sub in model.model_fields.items():
        if rest in (name, sub.alias) and not sub.is_required():
            return sub.get_default(call_default_factory=True)
    return MISSING


def _has_section(flat: dict[str, Any], section: str) -> bool:
    return flat.get(section) is not None or any(k.startswith(section + ".") for k in flat)


def _canonical_dtype(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    name = value.removeprefix("torch.")
    return DTYPES.get(name, name)


def _module_set(value: Any) -> Any:
    return sorted(set(value)) if isinstance(value, list) and all(isinstance(v, str) for v in value) else value


# Keys with several spellings of one value, as the trainer reads them: `torch.bfloat16`, `bfloat16`
# and `bf16` are one model.dtype (trainer.contract.model_settings.DTYPES); LoRA's target modules are matched as a set.
_CANONICAL = {"model.dtype": _canonical_dtype, "peft.target_modules": _module_set}


def effective_value(flat: dict[str, Any], key: str) -> Any:
    """The value the trainer reads for ``key``: the config's own, else the schema default."""
    if key not in flat and any(k.startswith(key + ".") for k in flat):
        return {}  # a section with settings of its own: those are compared key by key
    value = flat.get(key, MISSING)
    default = _schema_default(key, flat)
    leaf = key.rsplit(".", 1)[-1]
    if default is MISSING and leaf in CHECK_DEFAULTS:
        default = CHECK_DEFAULTS[leaf]  # off in Megatron/Bridge: writing it out is no change
    if default in (MISSING, None) and key.startswith("optimizer.") and leaf != "_target_":
        # The schema's None means "the optimizer's own default": AdamW's eps 1e-8, amsgrad false, read
        # from torch's source.
        default = optimizer_defaults(flat.get("optimizer._target_")).get(leaf, default)
    # `step_scheduler: null` configures nothing, like `{}`; `peft: null` is already its default.
    if value is MISSING or (value is None and default == {}):
        return default
    return _CANONICAL.get(key, lambda v: v)(value)


def same_value(a: Any, b: Any) -> bool:
    """``a == b``, except that NaN equals NaN (also inside lists and mappings): a config that writes
    ``.nan`` twice says the same thing twice; a list equals a tuple of the same items (YAML's ``[0.9, 0.999]``
    and the ``(0.9, 0.999)`` default of an optimizer's signature)."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_value(a[k], b[k]) for k in a)
    return a == b


def strict_field(key: str) -> bool:
    """Whether the schema reads ``key`` strictly (``tp_size``, ``global_batch_size``; ``optimizer.fused``), so
    that it refuses ``2.0`` and ``true`` for an int, ``1`` for a bool: there ``2`` -> ``2.0`` is a change, where a
    float setting (``weight_decay: 0``) or a lax bool one (``shuffle: 1``, read as true) is not."""
    section, _, name = key.partition(".")
    model = section_type(section) if section in RecipeConfig.model_fields and name else None
    field = next((f for n, f in model.model_fields.items() if name in (n, f.alias)), None) if model else None
    return field is not None and any(getattr(m, "strict", False) for m in field.metadata)


def same_setting(key: str, a: Any, b: Any) -> bool:
    """:func:`same_value`, and of the same type where the schema reads ``key`` strictly."""
    if not same_value(a, b):
        return False
    typed = isinstance(a, float) != isinstance(b, float) or isinstance(a, bool) != isinstance(b, bool)
    return not (typed and strict_field(key))
