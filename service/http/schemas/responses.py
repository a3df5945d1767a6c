"""Response bodies of the HTTP API (see ``service.http.schemas``): they mirror the CLI's JSON output,
so one parser serves both.
"""

from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

SEVERITY = Literal["error", "warning", "info"]
LAYER = Literal["convergence", "execution", "benchmark-only"]


class _Response(BaseModel):
    # Responses are built from trusted objects; protected_namespaces=() lets a field be called `model`.
    model_config = ConfigDict(protected_namespaces=(), populate_by_name=True)


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
    line: Optional[int] = Field(
        default=None, description="For unusable YAML: the 1-based line where reading stopped.", examples=[3]
    )
    column: Optional[int] = Field(default=None, description="For unusable YAML: the 1-based column.", examples=[5])


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


class ValidateResponse(_Response):
    """Same shape as `recipe-advisor validate --format json`, with one file."""

    files: list[FileFindings] = Field(description="One entry: the document sent.")
    summary: ValidateSummary = Field(description="Counts over all files; CI fails on `errors` > 0.")


# ---------------------------------------------------------------- index: recipes, models, hardware


class RecipeSummary(_Response):
    """Metadata of one bundled recipe."""

    name: str = Field(description="Recipe name (use it with GET /v1/recipes/{name}).",
                      examples=["llama3_8b_pretrain_8gpu_h100_bf16"])
    kind: str = Field(description="`library`, `benchmark` or `bundled` (runs on the bundled trainer).",
                      examples=["library"])
    family: Optional[str] = Field(default=None, description="Model family.", examples=["llama"])
    model: Optional[str] = Field(default=None, description="Bundled model id the recipe trains.",
                                 examples=["llama3-8b"])
    mode: Optional[str] = Field(default=None, description="`pretrain`, `sft` or `peft`.", examples=["pretrain"])
    hardware: Optional[str] = Field(default=None, description="GPU type the recipe is sized for.", examples=["h100"])
    num_gpus: Optional[int] = Field(default=None, description="GPU count the recipe is sized for.", examples=[8])
    megatron_recipe: Optional[str] = Field(
        default=None,
        description="Megatron Bridge recipe function name, for `run_recipe.py --recipe`.",
        examples=["llama3_8b_pretrain_8gpu_h100_bf16_config"],
    )
    megatron_aliases: list[str] = Field(
        default_factory=list,
        description="Legacy Megatron Bridge names of the same recipe.",
        examples=[["llama3_8b_pretrain_config"]],
    )
    precision: Optional[str] = Field(default=None, description="Training precision.", examples=["bf16"])
    precision_recipe: Optional[str] = Field(
        default=None, description="Megatron Bridge's precision token of the recipe (fp8cs, fp8mx, ...: the FP8 "
        "scaling it trains with); what `--precision` takes to start from it.", examples=["fp8cs"])
    seq_length: Optional[int] = Field(default=None, description="Sequence length.", examples=[8192])
    description: Optional[str] = Field(default=None, description="One line about the recipe.", examples=[None])

    @classmethod
    def from_entry(cls, entry: Any) -> "RecipeSummary":
        return cls.model_validate({name: getattr(entry, name, None) for name in cls.model_fields if name != "yaml"})


class RecipeDetail(RecipeSummary):
    yaml: str = Field(
        description="The recipe file itself. Ask with `Accept: application/yaml` to get only this text.",
        examples=["metadata:\n  name: llama3_8b_pretrain_8gpu_h100_bf16\n..."],
    )


class ModelSummary(_Response):
    id: str = Field(description="Bundled model id.", examples=["llama3-8b"])
    hf_id: Optional[str] = Field(default=None, description="Hugging Face repo id.",
                                 examples=["meta-llama/Meta-Llama-3-8B"])
    aliases: list[str] = Field(description="Other names that resolve to this card.", examples=[["llama3_8b"]])
    family: Optional[str] = Field(default=None, description="Model family.", examples=["llama"])
    architecture: str = Field(description="dense, moe, mla-moe, hybrid or hybrid-moe.", examples=["dense"])
    num_hidden_layers: int = Field(description="Decoder layers.", examples=[32])
    hidden_size: int = Field(description="Hidden size.", examples=[4096])
    num_attention_heads: int = Field(description="Attention heads.", examples=[32])
    num_key_value_heads: int = Field(description="KV heads (TP must divide them).", examples=[8])
    num_experts: int = Field(description="Routed experts (0 = dense).", examples=[0])
    published_total_params: Optional[str] = Field(default=None, description="Published parameter count.",
                                                  examples=["8B"])

    @classmethod
    def from_card(cls, card: Any) -> "ModelSummary":
        return cls.model_validate(card.model_dump())


class ModelDetail(ModelSummary):
    """The whole normalised model card (Hugging Face `config.json` terms)."""

    model_config = ConfigDict(extra="allow", protected_namespaces=())

    model_type: Optional[str] = Field(default=None, description="HF `model_type`.", examples=["llama"])
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
    fp8_tflops: Optional[float] = Field(default=None, description="Dense FP8 peak (null: no FP8 units).",
                                        examples=[1979.0])
    fp4_tflops: Optional[float] = Field(default=None, description="Dense FP4 peak (null: no FP4 units).",
                                        examples=[None])
    hbm_tbps: float = Field(description="Memory bandwidth, TB/s.", examples=[3.35])
    nvlink_domain: int = Field(description="GPUs in one NVLink domain.", examples=[8])
    gpus_per_node: int = Field(description="GPUs in one node.", examples=[8])
    intra_node_gbps: float = Field(description="GB/s per GPU inside the NVLink domain.", examples=[450.0])
    inter_node_gbps: float = Field(description="GB/s per GPU across nodes.", examples=[50.0])


# ---------------------------------------------------------------- plan


class MemoryBreakdown(_Response):
    """Estimated memory per GPU, GiB."""

    weights: float = Field(description="Parameters held by one GPU.", examples=[3.74])
    grads: float = Field(description="Gradients held by one GPU.", examples=[7.48])
    optimizer: float = Field(description="Optimizer state (master weights, Adam moments) on one GPU.", examples=[11.2])
    activations: float = Field(description="Activations kept for the backward pass.", examples=[18.1])
    other: float = Field(description="Workspace, communication buffers, fragmentation.", examples=[4.0])
    total: float = Field(description="Sum of the above.", examples=[44.5])


class LayoutOut(_Response):
    """One parallel layout with its estimates (the JSON of `plan`, docs/cli.md)."""

    tp: int = Field(description="Tensor parallel size.", examples=[2])
    pp: int = Field(description="Pipeline parallel size.", examples=[1])
    vp: Optional[int] = Field(description="Virtual pipeline stages per rank (null: off).", examples=[None])
    cp: int = Field(description="Context parallel size.", examples=[1])
    ep: int = Field(description="Expert parallel size.", examples=[1])
    etp: int = Field(description="Expert tensor parallel size.", examples=[1])
    dp: int = Field(description="Data parallel size (derived: world / (TP x PP x CP)).", examples=[4])
    sp: bool = Field(description="Sequence parallel.", examples=[True])
    micro_batch_size: int = Field(description="Sequences per micro batch.", examples=[1])
    grad_accumulation_steps: int = Field(description="Micro batches per optimizer step per replica.", examples=[16])
    recompute: str = Field(description="Activation recompute: none, selective or full.", examples=["selective"])
    sharding: str = Field(
        description="How data parallelism shards the training state: none (DDP), optimizer, full (FSDP).",
        examples=["optimizer"],
    )
    memory_gib: MemoryBreakdown = Field(description="Estimated memory per GPU by kind, GiB.")
    memory_stage: str = Field(
        description="The pipeline stage memory_gib describes, the one that needs the most: first, middle, last, "
                    "or only (no pipeline).", examples=["only"])
    fits: bool = Field(description="Whether the total fits the GPU with headroom.", examples=[True])
    step_time_s: float = Field(description="Estimated seconds per optimizer step.", examples=[2.31])
    tokens_per_s_per_gpu: float = Field(description="Estimated training tokens per second per GPU.", examples=[7100.0])
    mfu: float = Field(description="Model FLOPs utilisation, 0-1.", examples=[0.42])
    needs_pipeline_layout_string: bool = Field(
        description="True when Megatron Bridge's library recipe cannot place this (PP, VP) itself (its layout "
                    "table lacks the pair, RA-L019): `run_recipe.py --recipe` needs "
                    "model.pipeline_model_parallel_layout written by hand. Always false on the bundled engine.",
        examples=[False])
    used_by: list[RecipeUse] = Field(
        default_factory=list, description="Index recipes of this model on this GPU type that run this layout (TP, PP, "
        "VP, CP, EP, ETP, micro batch), at any GPU count.")
    measured: Optional[MeasuredThroughput] = Field(
        default=None, description="What was measured of this layout for this model, goal, GPU type and count, "
        "sequence length and precision: the newest published measurement at the top level (its fields null when "
        "none was published) and `yours`, your runs store's measurements (null when it holds none). Null when "
        "neither exists. A row you measured ranks by your measurement; the published one does not change the "
        "ranking.",
        examples=[{"tokens_per_s_per_gpu": 9058.0, "global_batch_size": 1024, "release": "26.02.01",
                   "source": "NVIDIA-NeMo/Megatron-Bridge:docs/performance-summary.md@df0289c",
                   "sharding": "not full", "yours": None}])
    calibrated_tokens_per_s_per_gpu: Optional[float] = Field(
        default=None, description="The estimate calibrated on your runs of this cluster, engine, release and dense or "
        "MoE kind, or of this model family when it has enough of them (at least 5; the answer's `calibration` says "
        "which): unmeasured rows rank by it. Null when no calibration applies.", examples=[8800.0])


class MeasuredYours(_Response):
    """This layout's runs of this request in the service's runs store (your own cluster's measurements)."""

    count: int = Field(description="Completed runs of this layout for this request.", examples=[3])
    newest: Optional[str] = Field(description="When the newest was recorded (ISO 8601).",
                                  examples=["2026-05-01T10:00:00+00:00"])
    tokens_per_s_per_gpu: float = Field(description="Median measured tokens/s per GPU.", examples=[9120.0])
    step_time_s: float = Field(description="Median measured step time.", examples=[1.41])
    spread: float = Field(description="(max - min) / median of the runs' tokens/s per GPU.", examples=[0.02])
    run_ids: list[int] = Field(description="The runs (the newest ten).", examples=[[4, 9, 12]])
    clusters: list[str] = Field(description="Their cluster labels (the GPU type where none).", examples=[["eos"]])


class VariantOut(_Response):
    """Another variant of a shown layout's shape (micro batch, VP, recompute), folded under it."""

    vp: Optional[int] = Field(description="Virtual pipeline stages per rank (null: off).", examples=[None])
    micro_batch_size: int = Field(description="Sequences per micro batch.", examples=[2])
    grad_accumulation_steps: int = Field(description="Micro batches per optimizer step per replica.", examples=[8])
    recompute: str = Field(description="Activation recompute: none, selective or full.", examples=["selective"])
    sharding: str = Field(description="How data parallelism shards the training state.", examples=["optimizer"])
    fits: bool = Field(description="Whether it fits the GPU with headroom.", examples=[True])
    memory_gib: float = Field(description="Estimated memory per GPU, GiB (total).", examples=[61.2])
    tokens_per_s_per_gpu: Optional[float] = Field(description="Estimated tokens/s per GPU; null when it does not fit.",
                                                  examples=[7050.0])


class ShownLayoutOut(LayoutOut):
    """A row of a plan: one distinct parallel shape, its best variant, where it comes from and the other variants."""

    layout_source: str = Field(
        default="estimate", description="Where the row comes from (the order in which sources win, docs/planner.md): "
        "tuned (the benchmark recipe for exactly this request), library (the library recipe sized for it), "
        "transferred (this model's recipe on other hardware or GPU counts, adapted), or estimate (the planner's "
        "ranking). Marked rows come first.", examples=["transferred"])
    source_recipe: Optional[str] = Field(default=None, description="The recipe a marked row comes from.",
                                         examples=["qwen3_30b_a3b_pretrain_16gpu_gb200_bf16_dev"])
    source_note: Optional[str] = Field(
        default=None, description="How a transferred layout was adapted to this request.",
        examples=["tuned on gb200 at 16 GPUs (qwen3_30b_a3b_pretrain_16gpu_gb200_bf16_dev), adapted to 16: EP 16 -> 8"])
    estimate_rank: Optional[int] = Field(
        default=None, description="The shape's place in the estimate's ranking of distinct shapes (1: the "
        "estimate's first); null for a marked layout whose shape the planner's search does not hold.", examples=[32])
    variants: list[VariantOut] = Field(default_factory=list, description="The shape's other variants, best first.")


class AlternativeOut(LayoutOut):
    """Another layout beside the recommended one, with its estimated gain."""

    estimated_gain: float = Field(description="Estimated tokens/s per GPU over the recommended layout's, minus 1 "
                                  "(0.05: estimated 5 % faster). An estimate, with the estimates' error band.",
                                  examples=[0.05])


class LayoutSourceOut(_Response):
    """Where the recommended layout comes from: measured and tuned beat estimated."""

    case: str = Field(description="tuned (a benchmark recipe tuned for exactly this request), library_kept (the base "
                      "library recipe's own layout, within the error band of the planner's best), transferred (MoE: "
                      "this model's nearest recipe on other hardware or GPU counts, adapted, within the band), "
                      "replanned (a recipe layout was weighed and replaced; summary says why) or planned (no recipe "
                      "sized for this).",
                      examples=["tuned"])
    recipe: Optional[str] = Field(description="The recipe whose layout was applied or weighed.",
                                  examples=["qwen3_30b_a3b_pretrain_16gpu_h100_fp8cs"])
    summary: str = Field(description="The case in words, with the estimated gain when a layout was replaced.",
                         examples=["tuned for exactly this: the layout of ... which NVIDIA tuned for throughput"])
    band: Optional[float] = Field(description="The estimates' error band a recipe's layout is kept within (0.27: "
                                  "27 %): the model family's out-of-sample error, else the median.", examples=[0.27])
    band_basis: Optional[str] = Field(
        default=None, description="Which band applied, in words.",
        examples=["the Qwen3 MoE family's out-of-sample error (26 published setups)"])
    estimated_gain: Optional[float] = Field(description="The planner's best over the library layout, estimated.",
                                            examples=[0.04])


class RecipeUse(_Response):
    """An index recipe that runs a layout."""

    recipe: str = Field(description="Index name of the recipe.", examples=["deepseek_v3_pretrain_1024gpu_h100_bf16"])
    kind: str = Field(description="benchmark (NVIDIA tuned it for throughput), library (sized to run) or bundled.",
                      examples=["library"])
    num_gpus: Optional[int] = Field(description="The GPU count the recipe is sized for (it may be another count "
                                    "than the request's).", examples=[1024])


class MeasuredThroughput(_Response):
    """What was measured of a layout, beside its estimate: the newest published measurement (or this trainer's
    own), and your runs store's measurements as `yours`."""

    tokens_per_s_per_gpu: Optional[float] = Field(
        description="Measured training tokens per second per GPU, as published; null when only your runs measured "
        "this layout.", examples=[630.0])
    global_batch_size: Optional[int] = Field(description="The global batch it was measured with (published).",
                                             examples=[8192])
    release: Optional[str] = Field(description="The software release measured (the newest one that published this "
                                   "setup); null when the source names none.", examples=["25.09"])
    source: Optional[str] = Field(description="Where it was published: repository:path@commit.",
                                  examples=["NVIDIA-NeMo/Megatron-Bridge:docs/performance-summary.md@df0289c"])
    sharding: Optional[str] = Field(description="full when measured with Megatron-FSDP (or FSDP2), else not full.",
                                    examples=["not full"])
    yours: Optional[MeasuredYours] = Field(
        default=None, description="Your runs store's measurements of this layout for this request (docs/runs.md); "
        "null when the store holds none.")


class PlanHardware(_Response):
    gpu_type: str = Field(description="Hardware card used.", examples=["h100"])
    gpus_per_node: int = Field(description="GPUs per node.", examples=[8])
    num_nodes: int = Field(description="Nodes.", examples=[1])
    world_size: int = Field(description="GPUs in all.", examples=[8])
    memory_gib: float = Field(description="Memory per GPU.", examples=[80.0])
    usable_gib: float = Field(description="Memory per GPU the plan may use (after headroom).", examples=[72.0])


class Rejection(_Response):
    """A rule that rejected enumerated layouts (one example finding per rule)."""

    code: str = Field(description="Rule code.", examples=["RA-E002"])
    count: int = Field(description="Layouts it rejected.", examples=[3])
    message: str = Field(description="The rule's message for one of them.",
                         examples=["tiny-moe is an MoE model; the bundled trainer runs dense decoders only"])
    fix: Optional[str] = Field(default=None, description="How to fix it.",
                               examples=["use strategy: megatron (Megatron Bridge) for MoE models"])


WHY_FIRST_DESCRIPTION = ("Why the first layout is first although a fitting layout with a faster estimate is listed: "
                         "the tie band and the preference that decided; null when the first is the fastest.")
WHY_FIRST_EXAMPLE = ("first although TP 1 PP 1 CP 2 EP 8 ETP 1 (micro batch 1, recompute none, optimizer sharding) "
                     "is estimated 0.9% faster (9,265 vs 9,181 tokens/s/GPU): estimates within 10% of the fastest "
                     "are a tie (the estimates' own error), and the tie goes to less context parallelism, which is "
                     "for sequences over 8,192 tokens (CP 1 vs 2)")


CALIBRATION_DESCRIPTION = ("Where the step-time estimates' efficiencies come from: the published runs they were "
                           "fitted on (Megatron's for --engine megatron; torchtitan's and NeMo AutoModel's FSDP2 runs "
                           "and this trainer's own GPU runs for --engine bundled), and a measurement of this trainer "
                           "when one exists for the model and GPU. What your runs store applied comes first, named as "
                           "yours: 'calibrated on 14 of your runs on h100 (megatron): median error 6 % ...', or 'of "
                           "your runs of the Llama 3 family' where that family has its own fit (docs/runs.md).")
CALIBRATION_EXAMPLE = ("FSDP2 published runs: automodel, torchtitan (9 rows), and this trainer's own GPU runs (2)")


class PlanResponse(_Response):
    """Ranked layouts: those that fit first (fastest first), then the rest by memory."""

    model: str = Field(description="Resolved model id.", examples=["llama3-8b"])
    hardware: PlanHardware = Field(description="The allocation planned for.")
    goal: str = Field(description="Goal planned for.", examples=["pretrain"])
    engine: str = Field(description="Engine planned for.", examples=["megatron"])
    precision: str = Field(description="Precision planned for.", examples=["bf16"])
    fp8_recipe: Optional[str] = Field(
        default=None, description="The FP8 recipe planned for (fp8cs, fp8ds, fp8mx, fp8sc; precision is then fp8): the "
        "one the request named, or the base recipe's; null for other precisions and a plain fp8 without one. Under "
        "fp8mx (and precision nvfp4) a Megatron-FSDP layout ranks after the others of its tie band.",
        examples=["fp8mx"])
    grad_reduce_dtype: str = Field(description="Gradient reduce dtype planned for.", examples=["fp32"])
    seq_length: int = Field(description="Sequence length planned for.", examples=[4096])
    global_batch_size: int = Field(description="Global batch planned for.", examples=[32])
    layouts: list[ShownLayoutOut] = Field(
        description="Distinct parallel shapes (TP, PP, VP or not, CP, EP, ETP, sharding), each with its best variant: "
        "the candidate sources' choice first (marked when a recipe's layout won), the nearest transferred layouts "
        "(marked), then the estimate's ranking; `top` counts shapes. Empty when no layout obeys the rules.")
    layout_source: Optional[LayoutSourceOut] = Field(
        default=None, description="The layout `recommend` would apply for this request and why (null when nothing "
        "fits).")
    why_first: Optional[str] = Field(default=None, description=WHY_FIRST_DESCRIPTION,
                                     examples=[WHY_FIRST_EXAMPLE])
    rejections: list[Rejection] = Field(
        default_factory=list, description="Rules that rejected layouts, with how many; why `layouts` is empty."
    )
    gpus_that_fit: list[int] = Field(
        default_factory=list,
        description="When no layout fits: GPU counts of the same type that would (the nearest below and "
        "above when the rules reject this count, else the fewest found above it); empty otherwise.",
        examples=[[]],
    )
    notes: list[str] = Field(default_factory=list, description="What the estimates carry beyond the model's "
                             "own terms, e.g. the measured MoE step factor.")
    calibration: Optional[str] = Field(default=None, description=CALIBRATION_DESCRIPTION,
                                       examples=[CALIBRATION_EXAMPLE])


# ---------------------------------------------------------------- recommend


class RecipeRef(_Response):
    name: str = Field(description="Index name of the base recipe.", examples=["llama3_8b_pretrain_2gpu_h100_bf16"])
    kind: str = Field(description="library, benchmark or bundled.", examples=["library"])
    megatron_recipe: Optional[str] = Field(
        default=None, description="Megatron Bridge recipe function.",
        examples=["llama3_8b_pretrain_2gpu_h100_bf16_config"]
    )


class RecommendHardware(_Response):
    gpu_type: str = Field(description="Hardware card used.", examples=["h100"])
    gpus_per_node: int = Field(description="GPUs per node.", examples=[8])
    num_nodes: int = Field(description="Nodes.", examples=[1])
    world_size: int = Field(description="GPUs in all.", examples=[8])
    memory_gib: float = Field(description="Memory per GPU.", examples=[80.0])


class ChangeOut(_Response):
    """One key that differs from the base config, with its layer (the JSON of `diff`, docs/cli.md)."""

    key: str = Field(description="Dotted config key.", examples=["distributed.tp_size"])
    old: Any = Field(description="Value in the base (`<absent>` when the key was not there; inf/-inf/nan as strings).",
                     examples=[2])
    new: Any = Field(description="Value in the new config (`<absent>` when removed; inf/-inf/nan as strings).",
                     examples=[1])
    layer: LAYER = Field(
        description="convergence (a new experiment), execution (same training, other mapping) or benchmark-only.",
        examples=["execution"],
    )


class RecommendResponse(_Response):
    """A ready config, as `recipe-advisor recommend --format json` prints it, plus the runner-up layouts."""

    model: str = Field(description="Resolved model id.", examples=["llama3-8b"])
    hardware: RecommendHardware = Field(description="The allocation the config is for.")
    goal: str = Field(description="Goal served (1 GPU may switch sft to peft; see `notes`).", examples=["pretrain"])
    engine: str = Field(description="Engine the config is for.", examples=["megatron"])
    recipe: Optional[RecipeRef] = Field(
        description="Base recipe (null: built from the schema defaults).",
        examples=[{"name": "llama3_8b_pretrain_2gpu_h100_bf16", "kind": "library",
                   "megatron_recipe": "llama3_8b_pretrain_2gpu_h100_bf16_config"}],
    )
    why: list[str] = Field(
        description="Why this base recipe: the recommender's decision tree's steps, in words.",
        examples=[["llama3-8b's own pretrain recipe", "sized for 2 x h100; re-planned for 8 x h100"]],
    )
    notes: list[str] = Field(
        description="Fallbacks and adjustments the recommender made.",
        examples=[["long context (32768 tokens): context parallelism is considered"]],
    )
    layout: LayoutOut = Field(description="The chosen layout with its estimates.")
    calibration: Optional[str] = Field(default=None, description=CALIBRATION_DESCRIPTION,
                                       examples=[CALIBRATION_EXAMPLE])
    layout_source: Optional[LayoutSourceOut] = Field(
        default=None, description="Where the layout comes from.",
        examples=[{"case": "library_kept", "recipe": "qwen3_30b_a3b_pretrain_16gpu_h100_bf16",
                   "summary": "library layout kept: ...", "band": 0.25, "estimated_gain": 0.17}])
    alternatives: list[AlternativeOut] = Field(
        default_factory=list, description="The planner's best other layouts, and those the index runs at other GPU "
        "counts, with their estimated gain over the chosen one.")
    why_first: Optional[str] = Field(default=None, description=WHY_FIRST_DESCRIPTION,
                                     examples=[WHY_FIRST_EXAMPLE])
    other_layouts: list[ShownLayoutOut] = Field(description="The next rows `plan` shows (distinct shapes), best "
                                                "first, each with its variants.")
    config: dict[str, Any] = Field(
        description="The advised config as data (same content as `config_yaml`).",
        examples=[{"distributed": {"strategy": "megatron", "tp_size": 1}}],
    )
    config_yaml: str = Field(description="The advised config file.",
                             examples=["# Generated by `recipe-advisor recommend`..."])
    changes: list[ChangeOut] = Field(description="Every key changed from the base recipe, with its layer.")
    findings: list[FindingOut] = Field(description="What `validate` says about the advised config.")
    commands: dict[str, str] = Field(
        description="Launch commands by name: torchrun or torchrun_multinode, sbatch, megatron_bridge.",
        examples=[{"torchrun": "torchrun --nproc-per-node 8 ..."}],
    )


# ---------------------------------------------------------------- diff


class DiffSummary(_Response):
    convergence: int = Field(description="Changes that make it a new convergence experiment.", examples=[1])
    execution: int = Field(description="Changes of the hardware mapping only.", examples=[1])
    benchmark_only: int = Field(alias="benchmark-only", description="Benchmark-only shortcuts.", examples=[0])


class DiffResponse(_Response):
    """As `recipe-advisor diff --format json` prints it."""

    changes: list[ChangeOut] = Field(description="Every changed key, in key order.")
    summary: DiffSummary = Field(description="Changes per layer.")
    verdict: Optional[str] = Field(
        description="One line: same experiment or not.",
        examples=["new convergence experiment: 1 convergence change(s)"],
    )
