"""Request and response bodies of the HTTP API: the contract behind /openapi.json.

Every field carries a description and an example so that /docs reads as the
reference. Request bodies forbid unknown keys, so a typo (``gpu-type`` for
``gpu_type``) is a 422 naming the key instead of a silently ignored field.
Bodies mirror the CLI flags (DESIGN.md, "HTTP"); responses mirror the CLI's
JSON output, so one parser serves both.
"""

from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

SEVERITY = Literal["error", "warning", "info"]
GOAL = Literal["pretrain", "sft", "peft"]
ENGINE = Literal["bundled", "megatron"]
PRECISION = Literal["bf16", "fp16", "fp32", "fp8", "nvfp4"]
LAYER = Literal["convergence", "execution", "benchmark-only"]

# Request bounds: generous for real clusters, small enough that one request stays cheap.
MAX_NAME = 256
MAX_GPUS_PER_NODE = 128
MAX_NODES = 4096
MAX_SEQ_LENGTH = 4 * 1024 * 1024
MAX_GLOBAL_BATCH = 1 << 24
MAX_TOP = 20


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)


class _Response(BaseModel):
    # Responses are built from trusted objects; protected_namespaces=() lets a field be called `model`.
    model_config = ConfigDict(protected_namespaces=())


# ---------------------------------------------------------------- errors


class ErrorResponse(_Response):
    """Every 4xx except 422: what went wrong, which field, and what to do instead."""

    detail: str = Field(
        description="What is wrong, why, and how to fix it.",
        examples=["unknown model 'llama3-8x': not a bundled id or alias (did you mean: llama3-8b, llama3-70b?)"],
    )
    field: Optional[str] = Field(
        default=None,
        description="The request field at fault, when one is (dotted path, e.g. `model` or `body`).",
        examples=["model"],
    )
    suggestions: list[str] = Field(
        default_factory=list,
        description="Closest valid values, best first (e.g. known model ids for an unknown model).",
        examples=[["llama3-8b", "llama3-70b"]],
    )


class HealthResponse(_Response):
    status: Literal["ok"] = Field(description="Always `ok` when the service answers.", examples=["ok"])
    version: str = Field(description="Installed `recipe-advisor` version.", examples=["0.1.0"])
    recipes: int = Field(description="Recipes in the bundled index.", examples=[412])
    models: int = Field(description="Bundled model cards.", examples=[64])
    hardware: int = Field(description="Bundled hardware cards.", examples=[10])


# ---------------------------------------------------------------- findings (validate)


class FindingOut(_Response):
    """One rule finding, exactly as `recipe-advisor validate --format json` prints it."""

    code: str = Field(description="Stable rule code.", examples=["TP_KV_HEADS"])
    severity: SEVERITY = Field(description="`error` fails CI; `warning` and `info` do not.", examples=["error"])
    message: str = Field(
        description="What the rule found, with the numbers involved.",
        examples=["tensor parallel size 3 does not divide num_key_value_heads=8"],
    )
    key: Optional[str] = Field(
        default=None, description="Dotted config key the finding concerns.", examples=["distributed.tp_size"]
    )
    line: Optional[int] = Field(default=None, description="1-based line of that key in the YAML.", examples=[12])
    column: Optional[int] = Field(default=None, description="1-based column of that key.", examples=[3])
    fix: Optional[str] = Field(
        default=None, description="A concrete change that clears the finding.", examples=["set tp_size to 1, 2, 4 or 8"]
    )


class FileFindings(_Response):
    path: str = Field(description="The file checked; `<request>` for a request body.", examples=["<request>"])
    findings: list[FindingOut] = Field(description="Findings in file order (line, column).")


class ValidateSummary(_Response):
    files: int = Field(description="Documents checked.", examples=[1])
    errors: int = Field(description="Findings with severity `error`.", examples=[1])
    warnings: int = Field(description="Findings with severity `warning`.", examples=[0])


class ValidateRequest(_Request):
    """A config to check, as JSON. The same endpoint also takes the raw YAML as `text/plain`."""

    yaml: str = Field(
        description="The YAML config document (DESIGN.md config format).",
        max_length=1 << 20,
        examples=["distributed:\n  tp_size: 3\nhardware:\n  gpu_type: h100\n  gpus_per_node: 8\n"],
    )
    gpus: Optional[int] = Field(
        default=None,
        ge=1,
        le=MAX_GPUS_PER_NODE,
        description="GPUs per node to check the layout against (overrides the config's `hardware.gpus_per_node`).",
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


class ValidateResponse(_Response):
    """Same shape as `recipe-advisor validate --format json`, with one file."""

    files: list[FileFindings] = Field(description="One entry: the document sent.")
    summary: ValidateSummary


# ---------------------------------------------------------------- index: recipes, models, hardware


class RecipeSummary(_Response):
    """Metadata of one bundled recipe."""

    name: str = Field(description="Recipe name (use it with GET /v1/recipes/{name}).", examples=["llama3_8b_pretrain_8gpu_h100_bf16"])
    kind: str = Field(description="`library`, `benchmark` or `bundled` (runs on the bundled trainer).", examples=["library"])
    family: Optional[str] = Field(default=None, description="Model family.", examples=["llama"])
    model: Optional[str] = Field(default=None, description="Bundled model id the recipe trains.", examples=["llama3-8b"])
    mode: Optional[str] = Field(default=None, description="`pretrain`, `sft` or `peft`.", examples=["pretrain"])
    hardware: Optional[str] = Field(default=None, description="GPU type the recipe is sized for.", examples=["h100"])
    num_gpus: Optional[int] = Field(default=None, description="GPU count the recipe is sized for.", examples=[8])
    source: Optional[str] = Field(
        default=None, description="Where the recipe comes from.", examples=["megatron-bridge@067f987"]
    )
    megatron_recipe: Optional[str] = Field(
        default=None,
        description="Megatron Bridge recipe function name, for `run_recipe.py --recipe`.",
        examples=["llama3_8b_pretrain_8gpu_h100_bf16_config"],
    )
    description: Optional[str] = Field(default=None, description="One line about the recipe.", examples=[None])


class RecipeDetail(RecipeSummary):
    yaml: str = Field(
        description="The recipe file itself. Ask with `Accept: application/yaml` to get only this text.",
        examples=["metadata:\n  name: llama3_8b_pretrain_8gpu_h100_bf16\n..."],
    )


class ModelSummary(_Response):
    id: str = Field(description="Bundled model id.", examples=["llama3-8b"])
    hf_id: Optional[str] = Field(default=None, description="Hugging Face repo id.", examples=["meta-llama/Meta-Llama-3-8B"])
    aliases: list[str] = Field(description="Other names that resolve to this card.", examples=[["llama3_8b"]])
    family: Optional[str] = Field(default=None, description="Model family.", examples=["llama"])
    architecture: str = Field(description="dense, moe, mla-moe, hybrid or hybrid-moe.", examples=["dense"])
    num_hidden_layers: int = Field(description="Decoder layers.", examples=[32])
    hidden_size: int = Field(description="Hidden size.", examples=[4096])
    num_experts: int = Field(description="Routed experts (0 = dense).", examples=[0])
    published_total_params: Optional[str] = Field(default=None, description="Published parameter count.", examples=["8B"])


class ModelDetail(ModelSummary):
    """The whole normalised model card (Hugging Face `config.json` terms)."""

    model_config = ConfigDict(extra="allow", protected_namespaces=())

    model_type: Optional[str] = Field(default=None, description="HF `model_type`.", examples=["llama"])
    num_attention_heads: int = Field(description="Attention heads.", examples=[32])
    num_key_value_heads: int = Field(description="KV heads (TP must divide them).", examples=[8])
    head_dim: int = Field(description="Per-head dimension.", examples=[128])
    intermediate_size: int = Field(description="Dense FFN size.", examples=[14336])
    vocab_size: int = Field(description="Vocabulary size.", examples=[128256])
    max_position_embeddings: Optional[int] = Field(default=None, description="Context length.", examples=[8192])


class HardwareOut(_Response):
    name: str = Field(description="GPU type name used in requests.", examples=["h100"])
    aliases: list[str] = Field(description="Other accepted names.", examples=[["h100-sxm"]])
    description: str = Field(description="What the card is.", examples=["NVIDIA H100 SXM 80 GB"])
    arch: str = Field(description="ampere, ada, hopper, blackwell or cpu.", examples=["hopper"])
    memory_gib: float = Field(description="Memory per GPU, GiB.", examples=[80.0])
    bf16_tflops: float = Field(description="Dense BF16 peak, TFLOP/s.", examples=[989.0])
    fp8_tflops: Optional[float] = Field(default=None, description="Dense FP8 peak (null: no FP8 units).", examples=[1979.0])
    fp4_tflops: Optional[float] = Field(default=None, description="Dense FP4 peak (null: no FP4 units).", examples=[None])
    hbm_tbps: float = Field(description="Memory bandwidth, TB/s.", examples=[3.35])
    nvlink_domain: int = Field(description="GPUs in one NVLink domain.", examples=[8])
    gpus_per_node: int = Field(description="GPUs in one node.", examples=[8])
    intra_node_gbps: float = Field(description="GB/s per GPU inside the NVLink domain.", examples=[450.0])
    inter_node_gbps: float = Field(description="GB/s per GPU across nodes.", examples=[50.0])
