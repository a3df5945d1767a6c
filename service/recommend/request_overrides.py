"""Config overrides that are really request fields.

`recommend --dataset.seq_length 131072` asks for another request, not a tweak of the config the
planner chose: the layout, memory and time estimates and the launch commands all depend on it.
So the overrides of keys a request field sets become that field before anything is planned, and
a contradiction between the two spellings is refused rather than resolved silently. The model name
is --model, which is always given: an override may only restate it. Overrides are refused before
planning, too, where they could not make a config: an unknown section, a section that is not a
mapping (``--dataset x``), or a mapping where one value belongs (``--precision "{a: 1}"``).
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

from recipe_index import get_hardware
from recipe_index.cards import ModelCard
from recipe_index.errors import UnknownHardwareError
from recipe_index.models import find_bundled_model
from service.configs.yamlio import OverrideError
from service.estimate.memory import GRAD_REDUCE_DTYPES
from service.request import LIMITS, Override, least
from service.validate.rules.precision import PRECISION_CHOICES, precision_of_token
from trainer.contract.config import section_type, top_level_keys

# Config key -> (request field, its CLI flag): the config keys `recommend` writes from the request.
REQUEST_KEYS = {
    "dataset.seq_length": ("seq_length", "--seq-length"),
    "model.seq_length": ("seq_length", "--seq-length"),
    "step_scheduler.global_batch_size": ("global_batch_size", "--global-batch-size"),
    "precision": ("precision", "--precision"),
    "distributed.grad_reduce_dtype": ("grad_reduce_dtype", "--grad-reduce-dtype"),
    "hardware.gpu_type": ("gpu_type", "--gpu-type"),
    # The model sizes the layout, the estimates and the commands: it is --model, which is always given.
    "model.pretrained_model_name_or_path": ("model", "--model"),
}
# Keys --gpus and --nodes set together (--gpus 4 --nodes 2: 4 per node on 2 nodes); one of them alone
# does not say which count the user means to keep, so an override of it is refused.
COUNT_KEYS = ("hardware.gpus_per_node", "hardware.num_nodes")
CHOICES = {"precision": PRECISION_CHOICES, "grad_reduce_dtype": GRAD_REDUCE_DTYPES}


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _not_a_mapping(key: str, value: Any) -> OverrideError:
    shown = _shown(value)
    return OverrideError(f"--{key}: expected a mapping (the {key} section), got {type(value).__name__} {shown}; "
                         f"override one key as --{key}.KEY value, or the whole section as --{key} \"{{KEY: value}}\"")


def names_model(card: ModelCard, name: str) -> bool:
    """Whether ``name`` names ``card``'s model: its id, its Hugging Face id (or local folder), or a bundled
    alias of it. Looked up in the bundled cards only: an override never reads files or the network."""
    name = name.strip()
    if name in (card.id, card.hf_id):
        return True
    bundled = find_bundled_model(name)
    return bundled is not None and bundled.id == card.id


def _same(name: str, a: Any, b: Any) -> bool:
    if name == "gpu_type":  # aliases and case name one GPU type
        try:
            return get_hardware(str(a)).name == get_hardware(str(b)).name
        except UnknownHardwareError:
            return str(a).lower() == str(b).lower()
    if name == "precision" and "fp8" in (a, b):  # fp8 restates an FP8 recipe's precision (fp8mx is fp8)
        return precision_of_token(str(a)) == precision_of_token(str(b))
    return a == b


def _leaves(key: str, value: Any):
    """(dotted key, value) of an override; a whole section (``--dataset "{seq_length: 4096}"``) by its keys."""
    if isinstance(value, dict):
        for name, inner in value.items():
            yield from _leaves(f"{key}.{name}", inner)
    else:
        yield key, value


def _checked_leaves(overrides: Sequence[Override]):
    """(dotted key, value) of every override, a whole section by its keys; refuses an unknown section
    and a section given as a scalar or list (``--dataset x``)."""
    for key, value in overrides:
        section = key.split(".", 1)[0]
        if section not in top_level_keys():  # a mistyped flag, e.g. --override a.b=1, is no config key
            raise OverrideError(f"--{key}: not an option and not a config section; the config's sections are "
                                f"{', '.join(sorted(top_level_keys()))} (override one as --section.key value)")
        if key == section and section_type(key) is not None and value is not None and not isinstance(value, dict):
            raise _not_a_mapping(key, value)
        if isinstance(value, dict) and _takes_one_value(key):  # `{}` has no leaves to catch below
            raise _not_a_value(key, key, value)
        for leaf, inner in _leaves(key, value):
            scalar = next((p for p in _prefixes(leaf) if _takes_one_value(p)), None)
            if scalar is not None:  # `--precision "{a: 1}"` would otherwise be dropped without a word
                raise _not_a_value(key, scalar, value)
            yield leaf, inner


def _prefixes(key: str) -> list[str]:
    """The dotted keys above ``key``: ``a.b.c`` -> ``a``, ``a.b``."""
    parts = key.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _takes_one_value(key: str) -> bool:
    """A key that holds one value, never a mapping: a request key, a count key or a top-level value."""
    return key in REQUEST_KEYS or key in COUNT_KEYS or (key in top_level_keys() and section_type(key) is None)


def _not_a_value(flag: str, key: str, value: Any) -> OverrideError:
    shown = _shown(value)
    given = f"got {shown}" if flag == key else "it has no keys under it"
    return OverrideError(f"--{flag}: {key} takes a single value, not a mapping ({given}); write the value "
                         f"itself, e.g. --{key} VALUE")


def request_fields(overrides: Sequence[Override], given: dict[str, Any],
                   model: Optional[ModelCard] = None) -> dict[str, Any]:
    """``given`` (the request fields the user set, None where not) with the overrides of request keys
    folded in. Raises OverrideError naming the flag for a count key, a section that is not a mapping,
    a non-integer length or batch, an override that contradicts the field given beside it, or a model
    name other than ``model`` (the card --model resolved to)."""
    fields = dict(given)
    origin: dict[str, str] = {}
    for key, value in _checked_leaves(overrides):
        if key in COUNT_KEYS:
            raise OverrideError(f"--{key}: the GPU count is set by --gpus and --nodes (API: gpus, nodes), which "
                                "also size the layout and the launch commands; --gpus 4 --nodes 2 means 4 per "
                                "node on 2 nodes")
        if key not in REQUEST_KEYS or value is None:  # `none` clears the key: the recipe's value applies
            continue
        name, flag = REQUEST_KEYS[key]
        limit = LIMITS.get(name)
        if limit and (isinstance(value, bool) or not isinstance(value, int) or not least(name) <= value <= limit):
            raise OverrideError(f"--{key}: expected an integer from {least(name)} to {limit:,}, got {value!r}")
        if not limit and not isinstance(value, str):
            raise OverrideError(f"--{key}: expected a name, got {value!r}")
        if name in CHOICES and value not in CHOICES[name]:
            raise OverrideError(f"--{key}: {value!r} is not one of {', '.join(CHOICES[name])}")
        if name == "model":  # the same model under another name is fine; the config keeps the plan's name
            if model is not None and not names_model(model, value):
                raise OverrideError(f"--{key} {value} contradicts --model {model.id}: they set the same thing (the "
                                    "model, which sizes the layout, the estimates and the commands); give it once, "
                                    "as --model (API: model)")
            continue
        current: Optional[Any] = fields.get(name)
        if current is not None and not _same(name, current, value):
            said = f"--{origin[name]}" if name in origin else flag
            raise OverrideError(f"--{key} {value} contradicts {said} {current}: they set the same thing "
                                f"({name}); give it once, as {flag}")
        # Else the same value: keep the one given first, but an FP8 recipe token over the fp8 that restates it.
        if current is None or (name == "precision" and current == "fp8"):
            fields[name] = value
        origin.setdefault(name, key)
    return fields
