"""Config overrides that are really request fields.

`recommend --dataset.seq_length 131072` asks for another request, not a tweak of the config the
planner chose: the layout, memory and time estimates and the launch commands all depend on it.
So the overrides of keys a request field sets become that field before anything is planned, and
a contradiction between the two spellings is refused rather than resolved silently.
"""

from __future__ import annotations

from typing import Any, Optional

from recipe_index import get_hardware
from recipe_index.errors import UnknownHardwareError
from service import constants as C
from service.memory import GRAD_REDUCE_DTYPES
from service.planner import PRECISIONS
from service.yamlio import OverrideError, parse_overrides
from trainer.config import top_level_keys

# Config key -> (request field, its CLI flag): the config keys `recommend` writes from the request.
REQUEST_KEYS = {
    "dataset.seq_length": ("seq_length", "--seq-length"),
    "model.seq_length": ("seq_length", "--seq-length"),
    "step_scheduler.global_batch_size": ("global_batch_size", "--global-batch-size"),
    "precision": ("precision", "--precision"),
    "distributed.grad_reduce_dtype": ("grad_reduce_dtype", "--grad-reduce-dtype"),
    "hardware.gpu_type": ("gpu_type", "--gpu-type"),
}
# Keys --gpus and --nodes set together (--gpus 4 --nodes 2: 4 per node on 2 nodes); one of them alone
# does not say which count the user means to keep, so an override of it is refused.
COUNT_KEYS = ("hardware.gpus_per_node", "hardware.num_nodes")
INTEGER_LIMITS = {"seq_length": C.MAX_SEQ_LENGTH, "global_batch_size": C.MAX_GLOBAL_BATCH}
CHOICES = {"precision": PRECISIONS, "grad_reduce_dtype": GRAD_REDUCE_DTYPES}


def _same(name: str, a: Any, b: Any) -> bool:
    if name == "gpu_type":  # aliases and case name one GPU type
        try:
            return get_hardware(str(a)).name == get_hardware(str(b)).name
        except UnknownHardwareError:
            return str(a).lower() == str(b).lower()
    return a == b


def _leaves(key: str, value: Any):
    """(dotted key, value) of an override; a whole section (``--dataset "{seq_length: 4096}"``) by its keys."""
    if isinstance(value, dict):
        for name, inner in value.items():
            yield from _leaves(f"{key}.{name}", inner)
    else:
        yield key, value


def request_fields(overrides: list[str], given: dict[str, Any]) -> dict[str, Any]:
    """``given`` (the request fields the user set, None where not) with the overrides of request keys
    folded in. Raises OverrideError naming the flag for a count key, a non-integer length or batch,
    or an override that contradicts the field given beside it."""
    fields = dict(given)
    origin: dict[str, str] = {}
    for key, value in (leaf for pair in parse_overrides(overrides) for leaf in _leaves(*pair)):
        section = key.split(".", 1)[0]
        if section not in top_level_keys():  # a mistyped flag, e.g. --override a.b=1, is no config key
            raise OverrideError(f"--{key}: not an option and not a config section; the config's sections are "
                                f"{', '.join(sorted(top_level_keys()))} (override one as --section.key value)")
        if key in COUNT_KEYS:
            raise OverrideError(f"--{key}: the GPU count is set by --gpus and --nodes (API: gpus, nodes), which "
                                "also size the layout and the launch commands; --gpus 4 --nodes 2 means 4 per "
                                "node on 2 nodes")
        if key not in REQUEST_KEYS or value is None:  # `none` clears the key: the recipe's value applies
            continue
        name, flag = REQUEST_KEYS[key]
        limit = INTEGER_LIMITS.get(name)
        if limit and (isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= limit):
            raise OverrideError(f"--{key}: expected an integer from 1 to {limit:,}, got {value!r}")
        if not limit and not isinstance(value, str):
            raise OverrideError(f"--{key}: expected a name, got {value!r}")
        if name in CHOICES and value not in CHOICES[name]:
            raise OverrideError(f"--{key}: {value!r} is not one of {', '.join(CHOICES[name])}")
        current: Optional[Any] = fields.get(name)
        if current is not None and not _same(name, current, value):
            said = f"--{origin[name]}" if name in origin else flag
            raise OverrideError(f"--{key} {value} contradicts {said} {current}: they set the same thing "
                                f"({name}); give it once, as {flag}")
        fields[name] = value
        origin.setdefault(name, key)
    return fields
