"""The one list of the bundled trainer's config checks: the pre-flight of ``recipe-advisor train`` and of every
trainer process runs them (trainer/contract/preflight.py), and ``validate`` runs the same list (RA-E009,
service/validate/rules/engine.py), so whatever the pre-flight refuses in a config, validate names by its key.

Each check takes the parsed config, the world size and what the model declares (``Declared``), and raises a
ConfigError that starts with the key. None reads a file: the pre-flight reads the model's config.json or
bundled card into ``Declared``; validate fills it from the model it resolved (over HTTP, never a local path).
What the pre-flight also checks on the machine it runs on (the data and tokenizer files, the checkpoint to
restore or resume, whether the model's files can be found) is outside this list: those are facts of the
machine, not of the config.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, NamedTuple, Optional

from trainer.contract.attention_checks import check_latent_attention_layout
from trainer.contract.builders import check_target, dataset_call
from trainer.contract.expert_checks import MOE_MODEL_TYPES, check_expert_layout
from trainer.contract.layout_checks import check_layout
from trainer.contract.model_checks import check_model_keys, check_seq_lengths
from trainer.contract.overrides import ConfigError
from trainer.contract.section_checks import section_problems, step_callable_problems
from trainer.contract.step_scheduler import derive_grad_acc_steps


@dataclass(frozen=True)
class Declared:
    """What the model declares, as far as it is known before it is built (None: not known)."""

    name: str = ""
    model_type: Optional[str] = None
    layers: Optional[int] = None
    positions: Optional[int] = None  # max_position_embeddings
    experts: Optional[int] = None  # 0: a dense model


class ConfigCheck(NamedTuple):
    name: str
    run: Callable[[Any, int, Declared], None]
    # The validate rule that reports every problem of this check (the pre-flight refuses with the first), and
    # a fragment's missing sections as warnings; None: RA-E009 reports the refusal itself.
    reported_by: Optional[str] = None


def check_latent_attention(cfg: Any, world_size: int, model: Declared) -> None:
    check_latent_attention_layout(model.model_type, tp_size=cfg.distributed.tp_size, cp_size=cfg.distributed.cp_size)


def check_moe_family(cfg: Any, world_size: int, model: Declared) -> None:
    """An MoE model of a family the trainer does not build stops before launch, naming the model key."""
    if model.experts and model.model_type not in MOE_MODEL_TYPES:
        raise ConfigError(f"model.pretrained_model_name_or_path: {model.name!r} is an MoE model of type "
                          f"{model.model_type!r}, which the bundled trainer does not build; supported MoE families: "
                          f"{', '.join(MOE_MODEL_TYPES)} (or use strategy: megatron)")


def check_experts(cfg: Any, world_size: int, model: Declared) -> None:
    if model.experts and model.model_type not in MOE_MODEL_TYPES:
        return  # a family the trainer does not build at all: check_moe_family says so
    d = cfg.distributed
    check_expert_layout(num_experts=model.experts, ep_size=d.ep_size, etp_size=d.etp_size or 1, tp_size=d.tp_size,
                        strategy=d.strategy, world_size=world_size,
                        activation_checkpointing=d.activation_checkpointing, cp_size=d.cp_size, pp_size=d.pp_size)


def check_parallel_layout(cfg: Any, world_size: int, model: Declared) -> None:
    check_layout(cfg, world_size, model.layers)


def check_tensor_parallel(cfg: Any, world_size: int, model: Declared) -> None:
    d = cfg.distributed
    if world_size % d.tp_size:
        raise ConfigError(f"distributed.tp_size: {d.tp_size} does not divide the world size {world_size}; "
                          f"use a tp_size that divides {world_size}")
    if d.strategy == "ddp" and d.tp_size > 1:
        raise ConfigError("distributed.tp_size: tensor parallel runs with strategy fsdp2 (a 2-D dp x tp mesh); "
                          "set distributed.strategy: fsdp2 or tp_size: 1")


def check_precision(cfg: Any, world_size: int, model: Declared) -> None:
    if cfg.precision == "nvfp4":
        raise ConfigError("precision: nvfp4 is not supported by the bundled trainer; use bf16, fp16, fp8 or fp32")
    if cfg.precision == "fp8" and cfg.hardware.gpu_type == "cpu":
        raise ConfigError("precision: fp8 runs torchao float8 GEMMs on CUDA GPUs (compute capability 8.9+), and "
                          "hardware.gpu_type is cpu; use bf16 or fp32 on CPU")


def check_batch_split(cfg: Any, world_size: int, model: Declared) -> None:
    d, s = cfg.distributed, cfg.step_scheduler
    model_parallel = d.tp_size * d.cp_size * d.pp_size
    if world_size % model_parallel:
        return  # no data-parallel size: check_parallel_layout and check_tensor_parallel name the sizes
    derive_grad_acc_steps(s.global_batch_size, s.local_batch_size, world_size // model_parallel)


def check_targets(cfg: Any, world_size: int, model: Declared) -> None:
    """The registry of ``_target_`` names (trainer/contract/target_registry.py): a security refusal, before anything
    is built from them."""
    for section_name in ("optimizer", "loss_fn", "recipe", "model"):
        target = getattr(cfg, section_name).target
        if target is not None:
            check_target(target, section_name)


def check_sections(cfg: Any, world_size: int, model: Declared) -> None:
    problems = section_problems(cfg)
    errors = [p for p in problems if not p.warning]
    if errors:
        raise ConfigError(str(errors[0]))



def check_dataset_targets(cfg: Any, world_size: int, model: Declared) -> None:
    for section_name in ("dataset", "validation_dataset"):
        section = getattr(cfg, section_name)
        try:
            call = dataset_call(section, section_name) if section is not None else None
        except ConfigError:
            continue  # a section that names no dataset: check_sections' problem
        if call is not None:
            check_target(call["_target_"], section_name)


def check_recipe_keywords(cfg: Any, world_size: int, model: Declared) -> None:
    if cfg.recipe.kwargs():  # the recipe class is built as recipe_cls(cfg, raw, info): a keyword would be ignored
        raise ConfigError(f"recipe.{next(iter(cfg.recipe.kwargs()))}: the recipe class takes no keyword arguments "
                          "(the trainer would ignore it); remove it")


def check_step_callables(cfg: Any, world_size: int, model: Declared) -> None:
    """Refuse, before any worker starts, what would be a traceback at the first step."""
    for key, why, fix in step_callable_problems(cfg)[:1]:
        raise ConfigError(f"{key}: {why}; {fix}")


def check_model_loader_keys(cfg: Any, world_size: int, model: Declared) -> None:
    check_model_keys(cfg.model)


def check_sequence_lengths(cfg: Any, world_size: int, model: Declared) -> None:
    check_seq_lengths(cfg, model.positions, model.name)


# In the pre-flight's order: the first that refuses is the pre-flight's message. The attention check comes
# first: its message names MLA, which the MoE checks' would not.
REPORTED_BY = {check_sections: "RA-E005", check_step_callables: "RA-E004"}
CONFIG_CHECKS: tuple[ConfigCheck, ...] = tuple(ConfigCheck(check.__name__, check, REPORTED_BY.get(check)) for check in (
    check_latent_attention, check_moe_family, check_experts, check_parallel_layout, check_tensor_parallel,
    check_precision, check_batch_split, check_targets, check_sections, check_dataset_targets, check_recipe_keywords,
    check_step_callables, check_model_loader_keys, check_sequence_lengths,
))


def config_refusals(cfg: Any, world_size: int, model: Declared,
                    checks: tuple[ConfigCheck, ...] = CONFIG_CHECKS) -> list[tuple[str, ConfigError]]:
    """(check name, its refusal) for every check of ``checks`` that refuses the config."""
    refusals = []
    for check in checks:
        try:
            check.run(cfg, world_size, model)
        except ConfigError as exc:
            refusals.append((check.name, exc))
    return refusals


def refusal_key(exc: ConfigError) -> str:
    """The key a refusal names: its message up to the first ": " (the first of ``a x b`` sizes)."""
    return str(exc).partition(": ")[0].split(" x ")[0]
