"""The config schema shared by the trainer, the validator and the planner.

Pure pydantic: this module must never import torch, so that validating and
serving stay fast and torch-free. A config is plain data (YAML, AutoModel
style). A mapping with ``_target_`` names a callable and its other keys are
keyword arguments; such sections accept any keys here (the validator checks
them against the callable's signature for registered targets: trainer/contract/target_registry.py).

The sections are listed in README.md (Config format).
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any, Literal, Optional

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    ValidatorFunctionWrapHandler,
    WithJsonSchema,
    WrapValidator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from trainer.contract.model_settings import ALL_LINEAR, DTYPES, KERNEL_SETTINGS, LOAD_BALANCING_TYPES

STRATEGIES = ("fsdp2", "ddp", "megatron")
PRECISIONS = ("bf16", "fp16", "fp32", "fp8", "nvfp4")
RECOMPUTE = ("none", "selective", "full")
MODES = ("pretrain", "sft", "peft")
# A causal LM learns to predict the next token: a sequence holds at least one input and one label.
MIN_SEQ_LENGTH = 2


# Integer settings are strict (Field(strict=True)): `tp_size: true` or `2.0` is a typo, not 1 or 2.


class _Plain(BaseModel):
    """A section of plain data: unknown keys are rejected (and reported with a did-you-mean)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class _Target(BaseModel):
    """A section that may name a callable in ``_target_``; other keys are its kwargs."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)
    target: Optional[str] = Field(default=None, alias="_target_")

    def kwargs(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class RecipeSection(_Target):
    """Which recipe class runs the config (``trainer.recipes.TrainFinetuneRecipe``)."""


def _bridge_version(value: Any) -> Any:
    from trainer.contract.bridge_version import parse_bridge_version

    return parse_bridge_version(value).text if value is not None else value


class MetadataSection(_Plain):
    """Index metadata of a bundled recipe. Not read by the trainer."""

    name: Optional[str] = None
    kind: Literal["library", "benchmark", "bundled"] = "library"
    family: Optional[str] = None
    model: Optional[str] = None
    mode: Literal["pretrain", "sft", "peft"] = "pretrain"
    hardware: Optional[str] = None
    num_gpus: Optional[int] = Field(strict=True, default=None, ge=1)
    source: Optional[str] = None
    megatron_recipe: Optional[str] = None
    megatron_aliases: list[str] = Field(default_factory=list)
    # Megatron Bridge's precision-recipe token (its recipe names' spelling): a variant such as `mxfp8` would
    # slip past the precision rules that key off it.
    precision_recipe: Optional[Literal["bf16", "fp16", "fp32", "fp8cs", "fp8ds", "fp8mx", "fp8sc", "nvfp4"]] = None
    description: Optional[str] = None
    # Rule codes of inconsistencies the upstream recipe ships with, kept as shipped so the index mirrors
    # Bridge; validate reports them as warnings marked "known upstream issue" where the reviewed table
    # (recipe_index/known_issues.py) records them for that recipe.
    known_issues: list[str] = Field(default_factory=list)
    # The Megatron Bridge release (or checkout date) whose defaults the config assumes
    # (trainer/contract/bridge_version.py): an unset etp_size means TP before v0.6.0, 1 from it.
    bridge_version: Optional[Annotated[str, BeforeValidator(_bridge_version)]] = None


def _module_names_or_all_linear(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    # "all-linear" passes as the string; anything else is validated as list[str], so that a bad
    # element is reported at its own index (peft.target_modules[1]) rather than once per union member.
    if value == ALL_LINEAR:
        return value
    if isinstance(value, str):
        raise PydanticCustomError("target_modules", "Input should be a list of module names (q_proj, v_proj, ...) "
                                  f"or '{ALL_LINEAR}'")
    return handler(value)


def _module_names_as_written(value: Any) -> Any:
    # Dumped as validated: "all-linear" stays the string (as list[str] it dumped with a
    # PydanticSerializationUnexpectedValue warning at every checkpoint save and resume).
    return value if isinstance(value, str) else list(value)


TargetModules = Annotated[list[str], WrapValidator(_module_names_or_all_linear),
                          PlainSerializer(_module_names_as_written),
                          WithJsonSchema({"oneOf": [{"const": ALL_LINEAR},
                                                    {"type": "array", "items": {"type": "string"}}]})]


def _without_torch_prefix(value: Any) -> Any:
    # `torch.bfloat16` names the same dtype as `bfloat16` (trainer.contract.model_checks.dtype_name strips it too).
    return value.removeprefix("torch.") if isinstance(value, str) else value


class ModelSection(_Target):
    pretrained_model_name_or_path: Optional[str] = None
    # Megatron keeps a model-side sequence length; the runner syncs it to dataset.seq_length.
    seq_length: Optional[int] = Field(strict=True, default=None, ge=MIN_SEQ_LENGTH)
    # The settings the trainer itself reads before any builder runs, typed so that validate refuses
    # what its workers would (trainer/contract/model_settings.py; None: absent, the default applies). Keys a
    # builder reads (attn_implementation, load_weights) stay its kwargs: a custom `_target_` may differ.
    kernels: Optional[Literal[KERNEL_SETTINGS]] = None
    dtype: Annotated[Optional[Literal[tuple(DTYPES)]], BeforeValidator(_without_torch_prefix)] = None
    # MoE load balancing in Megatron's names (trainer/contract/balancing_checks.py; None: the family's own, as
    # its config.json says): the loss type, its coefficient, DeepSeek-V3's aux-loss-free bias update and its rate.
    moe_router_load_balancing_type: Optional[Literal[LOAD_BALANCING_TYPES]] = None
    moe_aux_loss_coeff: Optional[float] = Field(strict=True, default=None, ge=0, allow_inf_nan=False)
    moe_router_enable_expert_bias: Optional[bool] = Field(strict=True, default=None)
    moe_router_bias_update_rate: Optional[float] = Field(strict=True, default=None, ge=0, allow_inf_nan=False)

    def kwargs(self) -> dict[str, Any]:
        typed = {name: getattr(self, name) for name in ("kernels", "dtype") if name in self.model_fields_set}
        return {**typed, **super().kwargs()}


class StepSchedulerSection(_Plain):
    global_batch_size: int = Field(strict=True, default=32, ge=1)
    local_batch_size: int = Field(strict=True, default=1, ge=1)
    max_steps: Optional[int] = Field(strict=True, default=None, ge=1)
    num_epochs: int = Field(strict=True, default=1, ge=1)
    val_check_interval: Optional[int] = Field(strict=True, default=None, ge=1)
    checkpoint_interval: Optional[int] = Field(strict=True, default=None, ge=1)
    log_interval: int = Field(strict=True, default=1, ge=1)


class DistributedSection(_Plain):
    strategy: Literal["fsdp2", "ddp", "megatron"] = "fsdp2"
    tp_size: int = Field(strict=True, default=1, ge=1)
    pp_size: int = Field(strict=True, default=1, ge=1)
    vp_size: Optional[int] = Field(strict=True, default=None, ge=1)
    cp_size: int = Field(strict=True, default=1, ge=1)
    ep_size: int = Field(strict=True, default=1, ge=1)
    etp_size: Optional[int] = Field(strict=True, default=None, ge=1)
    sequence_parallel: bool = False
    activation_checkpointing: Literal["none", "selective", "full"] = "none"
    # Process-group backend: auto picks nccl with CUDA, gloo otherwise.
    backend: Literal["auto", "nccl", "gloo"] = "auto"
    # Megatron: shard optimizer states over DP (distributed optimizer). FSDP2 always shards.
    use_distributed_optimizer: Optional[bool] = None
    # Megatron-FSDP (ZeRO-3): parameters, gradients and optimizer states sharded over DP.
    use_megatron_fsdp: Optional[bool] = None
    # Megatron's explicit pipeline_model_parallel_layout ("explicit" when the recipe sets one):
    # layers are then placed by the layout, not split evenly.
    pipeline_layout: Optional[str] = None
    # Dtype gradients are reduced (and, under Megatron, buffered) in: Megatron's grad_reduce_in_fp32,
    # FSDP2's MixedPrecisionPolicy.reduce_dtype. Megatron Bridge's performance recipes use bf16.
    grad_reduce_dtype: Literal["fp32", "bf16"] = "fp32"


class DatasetSection(_Target):
    seq_length: Optional[int] = Field(strict=True, default=None, ge=MIN_SEQ_LENGTH)


class DataloaderSection(_Plain):
    num_workers: int = Field(strict=True, default=0, ge=0)
    pin_memory: bool = False
    shuffle: bool = True
    drop_last: bool = True


def _not_a_bool(value: Any) -> Any:
    # pydantic reads `true` as 1.0 for a float; an optimizer setting of `true` is a typo, not 1.0.
    if isinstance(value, bool):
        raise ValueError("expected a number, not true/false")
    return value


_Number = Annotated[float, BeforeValidator(_not_a_bool), Field(allow_inf_nan=False)]
_Positive = Annotated[_Number, Field(gt=0.0)]
_NonNegative = Annotated[_Number, Field(ge=0.0)]


def _real(x: Any) -> bool:
    """A finite int or float, and not a bool (which Python counts as an int)."""
    return not isinstance(x, bool) and isinstance(x, (int, float)) and math.isfinite(x)


def _eps_value(value: Any) -> Any:
    # A number >= 0 (Adam family, RMSprop, Adagrad), or Adafactor's pair (None or a number, a number).
    def number(x: Any) -> bool:
        return _real(x) and x >= 0

    if number(value) or (isinstance(value, (list, tuple)) and len(value) == 2
                         and (value[0] is None or number(value[0])) and number(value[1])):
        return tuple(value) if isinstance(value, list) else value
    raise ValueError(f"expected a finite number >= 0 (or Adafactor's pair such as [null, 0.001]), got {value!r}")


def _beta_pair(value: Any) -> Any:
    # Checked as one value so a finding names `betas`, not an element the validator then drops.
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise ValueError("expected two numbers such as [0.9, 0.999]")
    for beta in value:
        if not (_real(beta) and 0.0 <= beta < 1.0):
            raise ValueError(f"each beta must be a number in [0, 1), got {beta!r}")
    return tuple(float(beta) for beta in value)


class OptimizerSection(_Target):
    """``torch.optim``-style kwargs. The hyper-parameters every optimizer shares are typed here, so a
    bad value (``lr: abc``, ``lr: -1``) is a schema error at validate time, not a crash inside
    ``torch.optim`` on every rank. Ranges are the torch optimizers' own argument checks (AdamW's; eps
    may also be Adafactor's pair), except that lr must be above 0 (a zero lr trains nothing) and finite.

    The defaults are None only so that an absent key stays absent (the optimizer's own default
    applies); an explicit ``null`` is refused, as torch would refuse it.
    """

    lr: _Positive = None
    weight_decay: _NonNegative = None
    eps: Annotated[Any, BeforeValidator(_eps_value)] = None
    betas: Annotated[tuple[float, float], BeforeValidator(_beta_pair)] = None
    momentum: _NonNegative = None
    # torch's implementation switches: booleans (`fused: abc` was passed on as truthy).
    fused: Optional[bool] = Field(default=None, strict=True)
    foreach: Optional[bool] = Field(default=None, strict=True)

    def kwargs(self) -> dict[str, Any]:
        typed = {name: getattr(self, name) for name in self.model_fields_set if name != "target"}
        return {**typed, **super().kwargs()}


class LRSchedulerSection(_Plain):
    schedule: Literal["cosine", "linear", "constant"] = "cosine"
    warmup_steps: int = Field(strict=True, default=0, ge=0)
    min_lr: float = Field(default=0.0, ge=0.0)
    decay_steps: Optional[int] = Field(strict=True, default=None, ge=1)


class LossSection(_Target):
    pass


class ClipGradSection(_Plain):
    max_norm: Optional[float] = Field(default=1.0, gt=0.0)


class CompileSection(_Plain):
    enabled: bool = False
    mode: Optional[str] = None
    backend: str = "inductor"
    dynamic: bool = False


class PeftSection(_Plain):
    method: Literal["lora"] = "lora"
    rank: int = Field(strict=True, default=8, ge=1)
    alpha: float = Field(default=16.0, gt=0.0)
    dropout: float = Field(default=0.0, ge=0.0, lt=1.0)
    # Module-name suffixes, or "all-linear" (every linear but the LM head), as Hugging Face PEFT spells it.
    target_modules: TargetModules = Field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    )
    merge_on_save: bool = False


def _a_folder(value: str) -> str:
    if not value.strip():  # Path("") is the working folder: a run would save, resume and prune there
        raise PydanticCustomError("empty_folder", "an empty folder name (an unset $VARIABLE?) would put checkpoints "
                                                  "in the working folder; name a folder, such as checkpoints")
    return value


class CheckpointSection(_Plain):
    enabled: bool = True
    checkpoint_dir: Annotated[str, AfterValidator(_a_folder)] = "checkpoints"
    keep_last: Optional[int] = Field(strict=True, default=None, ge=1)
    save_consolidated: bool = True
    allow_config_change: bool = Field(
        default=False,
        description="Resume a checkpoint even when this config changes a convergence key of the config it was "
                    "saved under (optimizer, LR schedule, global batch, data, model, seed, precision, PEFT): a "
                    "warning lists the changes and training follows this config from the checkpoint's step. "
                    "False refuses such a resume with the changed keys (trainer/contract/resume_checks.py).")


class RestoreSection(_Plain):
    path: Optional[str] = None


class RngSection(_Plain):
    seed: int = Field(default=1234, strict=True)


class HardwareSection(_Plain):
    gpu_type: str = "h100"
    gpus_per_node: int = Field(strict=True, default=8, ge=1)
    num_nodes: int = Field(strict=True, default=1, ge=1)

    @property
    def world_size(self) -> int:
        return self.gpus_per_node * self.num_nodes


class RecipeConfig(_Plain):
    """The whole config. Sections absent from the YAML take their defaults."""

    metadata: Optional[MetadataSection] = None
    recipe: RecipeSection = Field(default_factory=RecipeSection)
    model: ModelSection = Field(default_factory=ModelSection)
    step_scheduler: StepSchedulerSection = Field(default_factory=StepSchedulerSection)
    distributed: DistributedSection = Field(default_factory=DistributedSection)
    dataset: DatasetSection = Field(default_factory=DatasetSection)
    validation_dataset: Optional[DatasetSection] = None
    dataloader: DataloaderSection = Field(default_factory=DataloaderSection)
    optimizer: OptimizerSection = Field(default_factory=OptimizerSection)
    lr_scheduler: LRSchedulerSection = Field(default_factory=LRSchedulerSection)
    loss_fn: LossSection = Field(default_factory=LossSection)
    clip_grad_norm: ClipGradSection = Field(default_factory=ClipGradSection)
    compile: CompileSection = Field(default_factory=CompileSection)
    peft: Optional[PeftSection] = None
    checkpoint: CheckpointSection = Field(default_factory=CheckpointSection)
    restore_from: Optional[RestoreSection] = None
    rng: RngSection = Field(default_factory=RngSection)
    hardware: HardwareSection = Field(default_factory=HardwareSection)
    precision: Literal["bf16", "fp16", "fp32", "fp8", "nvfp4"] = "bf16"

    @model_validator(mode="after")
    def _etp_default(self) -> "RecipeConfig":
        # Bridge's finalize(): ETP unset becomes 1 when EP > 1, else TP (Megatron Bridge, 3a).
        d = self.distributed
        if d.etp_size is None:
            d.etp_size = 1 if d.ep_size > 1 else d.tp_size
        return self

    @property
    def seq_length(self) -> Optional[int]:
        return self.dataset.seq_length or self.model.seq_length


# Sections whose mapping may carry `_target_` and free keyword arguments.
TARGET_SECTIONS = ("recipe", "model", "dataset", "validation_dataset", "optimizer", "loss_fn")
# What a `_target_` may name is the registry of trainer/contract/target_registry.py, per section. The length
# bound keeps a shown path short and any lookup cheap.
MAX_TARGET_CHARS = 256
_PUBLIC_DOTTED = re.compile(r"^[A-Za-z][A-Za-z0-9_]*(\.[A-Za-z][A-Za-z0-9_]*)+$")


def is_public_dotted_path(target: Any) -> bool:
    """``torch.optim.AdamW`` yes; ``trainer.data._check``, ``os``, 300 characters or a non-string no."""
    return isinstance(target, str) and len(target) <= MAX_TARGET_CHARS and bool(_PUBLIC_DOTTED.match(target))


def section_fields(section: str) -> set[str]:
    """Known keys of a section (aliases included), for unknown-key findings."""
    field = RecipeConfig.model_fields.get(section)
    if field is None:
        return set()
    model_type = section_type(section)
    if model_type is None:
        return set()
    names = set()
    for name, f in model_type.model_fields.items():
        names.add(f.alias or name)
    return names


def section_type(section: str) -> Optional[type[BaseModel]]:
    """The model class of a top-level config key that is a section (a mapping); None for a value such as
    ``precision``."""
    field = RecipeConfig.model_fields[section]
    ann = field.annotation
    for candidate in getattr(ann, "__args__", (ann,)):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def top_level_keys() -> set[str]:
    return set(RecipeConfig.model_fields)


def parse_config(data: dict[str, Any]) -> RecipeConfig:
    """Validate a plain mapping into a RecipeConfig (raises pydantic.ValidationError)."""
    return RecipeConfig.model_validate(data)
