"""Rules about who runs the config: the bundled trainer's capabilities, and a
whole model that cannot fit its weights on one GPU."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator, Optional

from service.estimate.memory_shape import model_shape
from service.facts import Facts
from service.validate.rules.registry import Violation, config_rule, layout_rule
from service.validate.rules.sizes import bundled
from trainer.contract.capabilities import CAPABILITIES, supports_precision

if TYPE_CHECKING:  # pragma: no cover
    from service.validate.view import ConfigView

GIB = 1024**3


@config_rule("RA-E004", "error", "optimizer", "the bundled trainer's step can call the optimizer and loss",
             "trainer/contract/section_checks.py step_callable_problems (the pre-flight refuses the same)")
def step_callables(view: "ConfigView") -> Iterator[Violation]:
    from trainer.contract.section_checks import (
        step_callable_problems,  # torch-free; the trainer's own check, not a copy
    )

    for key, why, fix in step_callable_problems(view.config) if _runs_bundled(view) else ():
        yield Violation(f"{key}: {why}", fix, key=key)


@config_rule("RA-E005", "error", "", "the bundled trainer is told what to build",
             "trainer/contract/section_checks.py section_problems (the pre-flight refuses the same)")
def trainer_sections(view: "ConfigView") -> Iterator[Violation]:
    from trainer.contract.section_checks import section_problems  # torch-free; the trainer's own check, not a copy

    problems = section_problems(view.config) if _runs_bundled(view) else []
    fragment = any(p.missing and p.key.startswith("model.") for p in problems)
    for p in problems:
        if p.warning:  # the trainer runs it as the message says (a converted Megatron coefficient)
            yield Violation(f"{p.key}: {p.why}", p.fix, severity="warning", key=p.key)
        elif not p.missing:
            yield Violation(f"{p.key}: {p.why}", p.fix or "see the message", key=p.key)
        elif _written_as_null(view.doc.data, p.key):  # `_target_: null`: written wrong, not left out
            yield Violation(f"{p.key}: null; the bundled trainer refuses the config without it", p.fix, key=p.key)
        elif p.key.startswith("model."):  # a fragment (a layout to check, a snippet): one warning for it
            yield Violation(f"{p.key}: missing: the bundled trainer cannot run a config that names no model (nor, "
                            "unless written, its dataset and optimizer)", p.fix, severity="warning", key=p.key)
        elif not fragment:  # a section left out of a config that names its model
            yield Violation(f"{p.key}: missing; the bundled trainer refuses the config without it", p.fix,
                            severity="warning", key=p.key)


@config_rule("RA-E009", "error", "", "the bundled trainer's pre-flight accepts the config",
             "trainer/contract/preflight_checks.py CONFIG_CHECKS (the list the pre-flight runs)")
def preflight_refusals(view: "ConfigView") -> Iterator[Violation]:
    """Each refusal of the pre-flight's config checks, under its key, but for the checks another rule reports in
    full (RA-E004, RA-E005); validate_document keeps only those whose key no other finding names (a rule that says
    more about it, such as RA-E008)."""
    from trainer.contract.preflight_checks import CONFIG_CHECKS, config_refusals, refusal_key  # torch-free

    if not _runs_bundled(view) or view.facts is None:
        return
    checks = tuple(check for check in CONFIG_CHECKS if check.reported_by is None)
    for _, refusal in config_refusals(view.config, view.facts.world_size, _declared(view), checks):
        key = refusal_key(refusal)
        why, _, fix = str(refusal).partition(": ")[2].rpartition("; ")
        yield Violation(f"{key}: {why or fix}", fix if why else "see the message", key=key)


def _declared(view: "ConfigView"):
    """What the pre-flight's checks read of the model, from the model validate resolved (no file read here)."""
    from trainer.contract.preflight_checks import Declared

    name = view.config.model.pretrained_model_name_or_path or ""
    card = view.facts.model
    if card is None or view.config.model.target is not None:
        return Declared(name=name)
    return Declared(name=name, model_type=card.model_type, layers=card.num_hidden_layers,
                    positions=card.max_position_embeddings, experts=card.num_experts)


def _runs_bundled(view: "ConfigView") -> bool:
    """A config the bundled trainer runs (fsdp2/ddp): the ones its own pre-flight checks apply to."""
    return view.config is not None and view.config.distributed.strategy != "megatron"


def _written_as_null(data: dict, key: str) -> bool:
    section, _, leaf = key.partition(".")
    node = data.get(section)
    return isinstance(node, dict) and leaf in node and node[leaf] is None


@layout_rule("RA-E006", "error", "distributed.strategy", "Megatron runs on CUDA GPUs",
             "Megatron Bridge needs Transformer Engine and NCCL; hardware.yaml's cpu card is the bundled trainer's")
def megatron_needs_gpus(f: Facts) -> Optional[Violation]:
    if f.strategy != "megatron" or f.hardware is None or f.hardware.arch != "cpu":
        return None
    return Violation("strategy: megatron on the cpu card: Megatron Bridge trains on CUDA GPUs (Transformer Engine, "
                     "NCCL); the cpu card is for the bundled trainer's gloo smoke tests",
                     "set hardware.gpu_type to a GPU (this is a Megatron Bridge config), or write a bundled-trainer "
                     "config for the cpu card (recipe-advisor recommend --model MODEL --gpus N --gpu-type cpu "
                     "--engine bundled)")


@layout_rule("RA-E001", "error", "distributed.strategy", "the bundled trainer runs only what it declares",
             "trainer/contract/capabilities.py")
def bundled_trainer_dimensions(f: Facts) -> Optional[Violation]:
    if not bundled(f):
        return None
    lay = f.layout
    missing = [name for name, size, cap in (
        ("pp_size", lay.pp, "pipeline_parallel"),
        ("vp_size", lay.vp_or_1, "virtual_pipeline"),
        ("cp_size", lay.cp, "context_parallel"),
        ("ep_size", lay.ep, "expert_parallel"),
    ) if size > 1 and not CAPABILITIES.get(cap)]
    if not lay.tp == 1 and not CAPABILITIES.get("tensor_parallel"):
        missing.append("tp_size")
    if not missing and lay.tp > 1 and f.strategy == "ddp" and not CAPABILITIES.get("tp_with_ddp", False):
        return Violation(f"strategy ddp does not run tensor parallel (tp_size {lay.tp}): the bundled trainer "
                         "shards TP with DTensor on a (dp, tp) mesh under FSDP2 only",
                         "set distributed.strategy: fsdp2, or distributed.tp_size: 1", key="distributed.tp_size")
    if not missing:
        return None
    return Violation(f"strategy {f.strategy} (the bundled trainer) does not support {', '.join(missing)} > 1",
                     "set those sizes to 1, or use strategy: megatron and run the config with Megatron Bridge",
                     key=f"distributed.{missing[0]}")


@layout_rule("RA-E008", "error", "distributed.pp_size", "what the bundled pipeline combines with",
             "trainer/contract/capabilities.py pp_with_*; trainer/contract/layout_checks.py check_pipeline")
def bundled_pipeline_combinations(f: Facts) -> Optional[Violation]:
    if not bundled(f) or f.layout.pp == 1 or not CAPABILITIES.get("pipeline_parallel"):
        return None
    lay = f.layout
    refused = [what for what, on, cap in (
        ("strategy ddp", f.strategy == "ddp", "pp_with_ddp"),
        (f"tp_size {lay.tp}", lay.tp > 1, "pp_with_tp"),
        (f"cp_size {lay.cp}", lay.cp > 1, "pp_with_cp"),
        ("LoRA (peft)", f.peft, "pp_with_lora"),
        ("tied embeddings", f.model is not None and f.model.tie_word_embeddings, "pp_with_tied_embeddings"),
    ) if on and not CAPABILITIES.get(cap)]
    if not refused:
        return None
    return Violation(f"pp_size {lay.pp} in the bundled trainer does not combine with {', '.join(refused)}",
                     "set distributed.pp_size: 1 (FSDP2, TP or CP instead), or drop what it does not combine with",
                     key="distributed.pp_size")


@layout_rule("RA-E002", "error", "model.pretrained_model_name_or_path", "the bundled trainer's model families",
             "trainer/contract/capabilities.py model_types / moe")
def bundled_trainer_models(f: Facts) -> Optional[Violation]:
    if not bundled(f) or f.model is None:
        return None
    # Megatron trains on CUDA GPUs only (RA-E006): on the cpu card the fix names a GPU type too.
    gpu = " and a GPU type (hardware.gpu_type)" if f.hardware is not None and f.hardware.arch == "cpu" else ""
    model_type = f.model.model_type
    if f.model.is_moe and model_type not in CAPABILITIES.get("moe_model_types", []):
        built = ", ".join(CAPABILITIES.get("moe_model_types", [])) or "none"
        return Violation(f"{f.model.id} is an MoE model of type {model_type!r}; the bundled trainer builds the MoE "
                         f"families {built} only", f"use strategy: megatron (Megatron Bridge){gpu} for this model")
    if model_type and model_type not in CAPABILITIES["model_types"]:
        return Violation(f"model_type {model_type!r} of {f.model.id} is not one the bundled trainer builds "
                         f"({', '.join(CAPABILITIES['model_types'])})", f"use strategy: megatron{gpu} for this model")
    return None


@layout_rule("RA-E007", "error", "distributed.ep_size", "the bundled trainer's expert layouts",
             "trainer/contract/expert_checks.py check_expert_combinations (the pre-flight refuses the same)")
def bundled_expert_layout(f: Facts) -> Optional[Violation]:
    if not bundled(f) or f.model is None or f.model.model_type not in CAPABILITIES.get("moe_model_types", []):
        return None  # dense, or an MoE family the trainer does not build (RA-E002)
    from trainer.contract.attention_checks import check_latent_attention_layout  # torch-free; the trainer's own
    from trainer.contract.expert_checks import check_expert_combinations
    from trainer.contract.overrides import ConfigError

    lay = f.layout
    # In the pre-flight's order: DeepSeek-V3's latent attention (contract/attention_checks.py), then the experts.
    try:
        check_latent_attention_layout(f.model.model_type, tp_size=lay.tp, cp_size=lay.cp)
        check_expert_combinations(moe=True, ep_size=lay.ep, etp_size=lay.etp, tp_size=lay.tp, strategy=f.strategy,
                                  activation_checkpointing=lay.recompute, cp_size=lay.cp, pp_size=lay.pp)
    except ConfigError as exc:
        key, _, rest = str(exc).partition(": ")
        why, _, fix = rest.rpartition("; ")
        return Violation(why, fix, key=key)
    return None


@layout_rule("RA-E003", "error", "precision", "the bundled trainer's precisions",
             "trainer/contract/capabilities.py precisions, fp8 (supports_precision)")
def bundled_trainer_precision(f: Facts) -> Optional[Violation]:
    arch = f.hardware.arch if f.hardware is not None else None
    lay = f.layout
    if not bundled(f) or supports_precision(f.precision, arch, lay.tp, pp_size=lay.pp, cp_size=lay.cp):
        return None
    fp8 = CAPABILITIES["fp8"]
    if f.precision == "fp8" and arch in fp8["archs"]:
        key, size = next((k, v) for k, v in (("tp_size", lay.tp), ("pp_size", lay.pp), ("cp_size", lay.cp)) if v > 1)
        return Violation(f"fp8 in the bundled trainer ({fp8['via']}) runs with data parallel only, not with "
                         f"{key} {size}", f"set distributed.{key}: 1, or use precision: bf16",
                         key=f"distributed.{key}")
    if f.precision == "fp8":
        where = f"{f.hardware.name} ({arch})" if f.hardware is not None else "unknown hardware"
        return Violation(f"fp8 in the bundled trainer needs a GPU of {', '.join(fp8['archs'])}; {where} is not one",
                         "use precision: bf16, or set hardware.gpu_type to an fp8-capable GPU")
    return Violation(f"precision {f.precision} is not supported by the bundled trainer "
                     f"({', '.join(CAPABILITIES['precisions'])}, and fp8 on {', '.join(fp8['archs'])})",
                     "use precision: bf16")


def _weight_bytes(f: Facts, expert_shards: int = 1) -> float:
    """The model's weights on one GPU when only EP x ETP (``expert_shards``) splits them: every dense
    weight, and that share of the routed experts (the memory model's parameter split)."""
    shape = model_shape(f.model)
    routed = shape.layer_expert_params
    bytes_per = 4 if f.precision == "fp32" and not f.peft else 2
    return (shape.total_params - routed + routed / expert_shards) * bytes_per


def _weights_shard_over_dp(f: Facts) -> bool:
    """FSDP2, and Megatron-FSDP: as the config sets it (validate), or as the planner may choose it for
    this layout (not for PEFT: Bridge's PEFT recipes keep the frozen base replicated)."""
    if f.dp <= 1:
        return False
    if f.strategy == "fsdp2":
        return True
    return f.strategy == "megatron" and (f.extra.get("sharding") == "full" or (f.extra.get("planner", False)
                                                                              and not f.peft))


@layout_rule("RA-M001", "error", "distributed.tp_size", "a whole model on one GPU must fit its weights",
             "weights alone: params x bytes per param must be below the GPU's memory")
def whole_model_fits_weights(f: Facts) -> Optional[Violation]:
    lay, hw = f.layout, f.hardware
    if f.model is None or hw is None:
        return None
    # CP splits the sequence, not the weights; EP splits only the routed experts
    if lay.tp * lay.pp > 1 or _weights_shard_over_dp(f):
        return None
    expert_shards = lay.ep * lay.etp if lay.ep > 1 else 1
    weights = _weight_bytes(f, expert_shards)
    if weights <= hw.memory_gib * GIB:
        return None
    need = int(-(-_weight_bytes(f) // (hw.memory_gib * GIB * 0.6)))
    kept = ("a whole copy" if expert_shards == 1 else
            f"every dense weight and 1/{expert_shards} of the routed experts (EP x ETP = {expert_shards})")
    return Violation(f"{f.model.id} needs {weights / GIB:.1f} GiB for its weights alone on each GPU, more than "
                     f"the {hw.memory_gib:g} GiB of one {hw.name}: this layout keeps {kept} per GPU",
                     f"shard it over at least ~{need} GPUs: " + (
                         "raise distributed.tp_size / pp_size (or ep_size for an MoE model), or turn on "
                         "use_megatron_fsdp" if f.strategy == "megatron" else
                         "strategy fsdp2 over more GPUs (raise hardware.gpus_per_node / num_nodes), with "
                         "tp_size within the node"))
