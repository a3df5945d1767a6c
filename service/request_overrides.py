"""Config overrides that are really request fields.

`recommend --dataset.seq_length 131072` asks for another request, not a tweak of the config the
planner chose: the layout, memory and time estimates and the launch commands all depend on it.
So the overrides of keys a request field sets become that field before anything is planned, and
a contradiction between the two spellings is refused rather than resolved silently.
"""

from __future__ import annotations

from typing import Any, Optional

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
INTEGER_FIELDS = ("seq_length", "global_batch_size")


def request_fields(overrides: list[str], given: dict[str, Any]) -> dict[str, Any]:
    """``given`` (the request fields the user set, None where not) with the overrides of request keys
    folded in. Raises OverrideError naming the flag for a count key, a non-integer length or batch,
    or an override that contradicts the field given beside it."""
    fields = dict(given)
    origin: dict[str, str] = {}
    for key, value in parse_overrides(overrides):
        section = key.split(".", 1)[0]
        if section not in top_level_keys():  # a mistyped flag, e.g. --override a.b=1, is no config key
            raise OverrideError(f"--{key}: not an option and not a config section; the config's sections are "
                                f"{', '.join(sorted(top_level_keys()))} (override one as --section.key value)")
        if key in COUNT_KEYS:
            raise OverrideError(f"--{key}: the GPU count is set by --gpus and --nodes (API: gpus, nodes), which "
                                "also size the layout and the launch commands; --gpus 4 --nodes 2 means 4 per "
                                "node on 2 nodes")
        if key not in REQUEST_KEYS:
            continue
        name, flag = REQUEST_KEYS[key]
        if name in INTEGER_FIELDS and (isinstance(value, bool) or not isinstance(value, int)):
            raise OverrideError(f"--{key}: expected an integer, got {value!r}")
        if name not in INTEGER_FIELDS and not isinstance(value, str):
            raise OverrideError(f"--{key}: expected a name, got {value!r}")
        current: Optional[Any] = fields.get(name)
        if current is not None and current != value:
            said = f"--{origin[name]}" if name in origin else flag
            raise OverrideError(f"--{key} {value} contradicts {said} {current}: they set the same thing "
                                f"({name}); give it once, as {flag}")
        fields[name] = value
        origin.setdefault(name, key)
    return fields
