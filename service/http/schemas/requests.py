"""Request bodies of the HTTP API (see ``service.http.schemas``), bounded by ``service.request``'s limits, which
the command line checks too.

Request bodies forbid unknown keys, so a typo (``gpu-type`` for ``gpu_type``) is a 422 naming the
key instead of a silently ignored field, and are strict about types: ``"gpus": "8"``, ``true`` or
``8.5`` is a 422 naming ``gpus``, not a value pydantic's lax mode converts (the web form, whose
values are all text, validates the same model in lax mode). A whole number written as a float
(``8.0``) is that integer: JSON Schema's ``integer``, which the OpenAPI schema promises, includes it,
and some clients write every number so. Bodies mirror the CLI flags.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Annotated, Any, Literal, Optional, Union, get_args

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from service.plan.planner import DEFAULT_GLOBAL_BATCH, DEFAULT_SEQ_LENGTH
from service.request import MAX_GLOBAL_BATCH, MAX_GPUS, MAX_NAME, MAX_NODES, MAX_SEQ_LENGTH, MAX_TOP, least

GOAL = Literal["pretrain", "sft", "peft"]
ENGINE = Literal["bundled", "megatron"]
# A precision, or for fp8 Megatron Bridge's FP8 recipe token: service.validate.rules.precision.PRECISION_CHOICES (a test
# keeps the two equal; a Literal spelled out keeps the OpenAPI enum readable).
PRECISION = Literal["bf16", "fp16", "fp32", "fp8", "nvfp4", "fp8cs", "fp8ds", "fp8mx", "fp8sc"]
GRAD_REDUCE_DTYPE = Literal["fp32", "bf16"]
RECIPE_KIND = Literal["library", "benchmark", "bundled"]
# service.validate.automodel.dialect.DIALECTS
DIALECT = Literal["auto", "recipe-advisor", "automodel", "megatron-bridge", "megatron-lm"]
EMIT = Literal["recipe-advisor", "automodel"]  # service.recommend.automodel_emit.EMIT_CHOICES


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True, strict=True)

    @model_validator(mode="before")
    @classmethod
    def _whole_numbers(cls, data: Any) -> Any:
        """8.0 -> 8 for an integer field (JSON Schema counts it an integer); 8.5, "8" and true stay what
        strict mode refuses. Here rather than in the field types, so the schema keeps minimum/maximum."""
        if not isinstance(data, dict):
            return data
        return {key: int(value) if type(value) is float and value.is_integer() and key in _integer_fields(cls)
                else value for key, value in data.items()}


@lru_cache(maxsize=None)
def _integer_fields(model: type[BaseModel]) -> frozenset[str]:
    return frozenset(name for name, field in model.model_fields.items()
                     if field.annotation is int or int in get_args(field.annotation))


# ---------------------------------------------------------------- validate


class ValidateRequest(_Request):
    """A config to check, as JSON. The same endpoint also takes the raw YAML as `text/plain`."""

    yaml: str = Field(
        description="The YAML config document (the config format of docs/config.md).",
        max_length=1 << 20,
        examples=["distributed:\n  tp_size: 3\nhardware:\n  gpu_type: h100\n  gpus_per_node: 8\n"],
    )
    gpus: Optional[int] = Field(
        default=None,
        ge=1,
        le=MAX_GPUS,
        description=(
            "GPUs per node to check the layout against (overrides the config's `hardware.gpus_per_node`). "
            "Without `nodes`, a multiple of the GPU type's node size is read as the total (1024 on h100 = 128 x 8)."
        ),
        examples=[8],
    )
    gpu_type: Optional[str] = Field(
        default=None,
        min_length=1,
        max_length=MAX_NAME,
        description="GPU type (a name from GET /v1/hardware; overrides `hardware.gpu_type`).",
        examples=["h100"],
    )
    nodes: Optional[int] = Field(
        default=None,
        ge=1,
        le=MAX_NODES,
        description="Number of nodes (overrides `hardware.num_nodes`).",
        examples=[1],
    )
    dialect: DIALECT = Field(
        default="auto",
        description=("`auto` tells the config's dialect from it; `recipe-advisor`: this product's config format; "
                     "`automodel`: a NeMo AutoModel recipe, judged at `gpus`/`nodes`, else the GPUs its header's "
                     "launch command names, else 8 (docs/automodel.md); `megatron-bridge`: a Megatron Bridge "
                     "ConfigContainer YAML; `megatron-lm`: Megatron-LM arguments (a command line or a log's "
                     "arguments block) (docs/rules.md, Megatron dialects)."),
        examples=["auto"],
    )
    automodel_version: Optional[str] = Field(
        default=None,
        min_length=1,
        max_length=MAX_NAME,
        description=("The NeMo AutoModel release (`0.4.0`) or checkout date (`2026-05-01`, or `main`) whose schema an "
                     "AutoModel recipe is judged by (overrides its `metadata.automodel_version`; docs/automodel.md)."),
        examples=["0.5.0"],
    )


# ---------------------------------------------------------------- plan


def _fallback(by_goal: dict[str, int]) -> str:
    """The planner's per-goal default in words: `4096 for pretrain, 2048 for sft/peft`."""
    goals: dict[int, list[str]] = {}
    for goal, value in by_goal.items():
        goals.setdefault(value, []).append(goal)
    return ", ".join(f"{value} for {'/'.join(names)}" for value, names in goals.items())


class PlanBody(_Request):
    """What to plan for; the fields of `recipe-advisor plan`."""

    model: str = Field(
        min_length=1,
        max_length=MAX_NAME,
        description="Bundled model id, alias or Hugging Face id of a bundled model (GET /v1/models).",
        examples=["llama3-8b"],
    )
    gpus: int = Field(
        ge=1,
        le=MAX_GPUS,
        description=(
            "GPUs per node. Without `nodes`, a multiple of the GPU type's node size is read as the total "
            "(64 on h100 = 8 nodes of 8)."
        ),
        examples=[8],
    )
    gpu_type: str = Field(
        min_length=1, max_length=MAX_NAME, description="GPU type (GET /v1/hardware).", examples=["h100"]
    )
    nodes: Optional[int] = Field(default=None, ge=1, le=MAX_NODES, description="Number of nodes.", examples=[1])
    goal: GOAL = Field(default="pretrain", description="pretrain, sft (full fine-tune) or peft (LoRA).",
                       examples=["pretrain"])
    seq_length: Optional[int] = Field(
        default=None,
        ge=least("seq_length"),
        le=MAX_SEQ_LENGTH,
        description="Tokens per sequence; default: the recipe's, that is the base recipe `recommend` picks for "
        "this model, goal and hardware (llama3-8b pretrain: 8192). Only where the index has no recipe: "
        f"{_fallback(DEFAULT_SEQ_LENGTH)}, capped by the model's context.",
        examples=[8192],
    )
    global_batch_size: Optional[int] = Field(
        default=None,
        ge=1,
        le=MAX_GLOBAL_BATCH,
        description="Sequences per optimizer step; default: the recipe's, that is the base recipe `recommend` "
        f"picks (llama3-8b pretrain: 512). Only where the index has no recipe: {_fallback(DEFAULT_GLOBAL_BATCH)}.",
        examples=[128],
    )
    precision: Optional[PRECISION] = Field(
        default=None, description="Training precision, or for fp8 Megatron Bridge's FP8 recipe (fp8cs current "
        "scaling, fp8ds delayed, fp8mx MXFP8, fp8sc blockwise; Megatron engine only); default: the base recipe's "
        "(bf16 where it names none).",
        examples=["bf16"]
    )
    grad_reduce_dtype: Optional[GRAD_REDUCE_DTYPE] = Field(
        default=None,
        description="Dtype gradients are reduced and (Megatron) buffered in; default: the base recipe's, "
        "fp32 for the library and bundled recipes recommend starts from (Bridge's benchmark recipes state bf16).",
        examples=["fp32"],
    )
    engine: ENGINE = Field(
        default="megatron",
        description="`megatron` may use every parallel dimension; `bundled` only what the bundled trainer runs.",
        examples=["megatron"],
    )
    top: int = Field(default=5, ge=1, le=MAX_TOP, description="How many layouts to return, best first.", examples=[5])


# ---------------------------------------------------------------- recommend

_OVERRIDE_KEY = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$"
OverrideValue = Optional[Union[bool, int, float, str]]


class RecommendBody(PlanBody):
    """What to recommend for; the fields of `recipe-advisor recommend`."""

    top: int = Field(default=5, ge=1, le=MAX_TOP, description="How many runner-up layouts to return.", examples=[5])
    overrides: dict[Annotated[str, StringConstraints(pattern=_OVERRIDE_KEY, max_length=128)], OverrideValue] = Field(
        default_factory=dict,
        max_length=64,
        description=(
            "Config keys to set on the result, like the CLI's `--optimizer.lr 1e-4`. "
            "Strings are read as YAML, as on the command line, so a whole section is a YAML mapping in a "
            "string (`\"lr_scheduler\": \"{schedule: constant, min_lr: 1.0e-5}\"`). A section together "
            "with a key inside it (`lr_scheduler` and `lr_scheduler.min_lr`) is refused with 400: not every "
            "client keeps a JSON object's key order, which would decide which one wins."
        ),
        examples=[{"optimizer.lr": 0.0001, "step_scheduler.max_steps": 1000}],
    )
    emit: EMIT = Field(
        default="recipe-advisor",
        description=("`automodel` writes `config_yaml` as a NeMo AutoModel recipe (validated in its dialect) and "
                     "`commands.automodel` as the command that runs it (docs/automodel.md)."),
        examples=["recipe-advisor"],
    )


# ---------------------------------------------------------------- diff


class DiffBody(_Request):
    base: str = Field(
        max_length=1 << 20, description="The reference config YAML (e.g. the recipe).",
        examples=["distributed:\n  tp_size: 2\nstep_scheduler:\n  global_batch_size: 64\n"],
    )
    new: str = Field(
        max_length=1 << 20, description="The changed config YAML.",
        examples=["distributed:\n  tp_size: 4\nstep_scheduler:\n  global_batch_size: 128\n"],
    )
