"""What `plan` and `recommend` are asked, as one typed request, and the bounds on what a request may ask.

Both doors build an ``AdviceRequest`` and hand it to the core: the command line from its flags
(``service.cli.plan.request_from_args``), the HTTP service from its JSON body
(``service.http.routes.advise``). Each door resolves the model once, by its own rules (the command
line reads a local path or the Hub, the service only bundled names unless its operator allows the Hub),
and parses the config overrides once: (dotted key, value) pairs in the order given, each value typed
as YAML.

The bounds are generous for real clusters and small enough that one request stays cheap: the planner
finds divisors by trial division, so a count in the billions would search for hours, and a batch or
sequence length beyond them is no config a trainer could hold. The HTTP schemas declare them as field
bounds; the command line checks its flags, and ``recommend`` the overrides of the same fields, against them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence, Union

from recipe_index import resolve_model
from recipe_index.cards import ModelCard
from service.configs.yamlio import parse_overrides
from service.plan.types import PlanError
from trainer.contract.config import MIN_SEQ_LENGTH

MAX_NAME = 256  # characters of a model, GPU type or recipe name
MAX_GPUS = 65536  # per node with `nodes`; without it a multiple of the node size is read as the total
MAX_NODES = 8192
MAX_SEQ_LENGTH = 4 * 1024 * 1024
MAX_GLOBAL_BATCH = 1 << 24
MAX_TOP = 20  # layouts in one HTTP answer, which is bounded; the command line shows any number (0: all)
LIMITS = {"gpus": MAX_GPUS, "nodes": MAX_NODES, "seq_length": MAX_SEQ_LENGTH, "global_batch_size": MAX_GLOBAL_BATCH}

Override = tuple[str, Any]  # (dotted config key, value typed as YAML)


def least(name: str) -> int:
    """The smallest value of a count in LIMITS: a sequence holds one input token and its label."""
    return MIN_SEQ_LENGTH if name == "seq_length" else 1


def check_limits(**values: Optional[int]) -> None:
    """Refuse a count above its bound (LIMITS): PlanError naming the field, which the command line prints as
    its flag (gpus -> --gpus). A value below the least is make_request's to refuse, naming the field."""
    for name, value in values.items():
        limit = LIMITS[name]
        if value is not None and value > limit:
            raise PlanError(f"expected an integer from {least(name)} to {limit:,}, got {value}", field=name)


@dataclass(frozen=True)
class AdviceRequest:
    """A `plan` or `recommend` request as the user gave it. None: the base recipe's value (its convergence
    contract), or the planner's default where the index has no recipe."""

    model: ModelCard
    gpus: int  # GPUs per node; without `nodes` a multiple of the node size is read as the total
    gpu_type: str  # as given: an override of hardware.gpu_type may restate it under another alias
    nodes: Optional[int] = None
    goal: str = "pretrain"
    seq_length: Optional[int] = None
    global_batch_size: Optional[int] = None
    precision: Optional[str] = None  # a precision, or for fp8 Megatron Bridge's FP8 recipe token (fp8cs, ...)
    grad_reduce_dtype: Optional[str] = None
    engine: str = "megatron"
    top: Optional[int] = None  # layouts to publish, best first; None: all
    overrides: tuple[Override, ...] = ()  # config keys to set on the recommended config, in order


def advice_request(model: Union[str, ModelCard], gpus: int, gpu_type: str, *,
                   overrides: Optional[Sequence[str]] = (),
                   **fields: Any) -> AdviceRequest:
    """A request of plain values as the command line gives them: ``model`` a card, or a name resolve_model
    reads (a bundled id or alias, a config.json path, a Hugging Face repo id), and ``overrides`` the
    ``--a.b v`` arguments, parsed here once the model is known (an unknown model is named first)."""
    card = resolve_model(model) if isinstance(model, str) else model
    return AdviceRequest(card, gpus, gpu_type, overrides=tuple(parse_overrides(list(overrides or ()))),
                         **fields)
