"""A ready config for a model, hardware and goal, with the layout, estimates, findings and commands.

The decision tree of seeds/mbridge-recipe-recommender.md, in one pass:

1. goal -> a pretrain / SFT / PEFT recipe of the model from the index (library recipes for
   ``--engine megatron``, bundled ones for ``--engine bundled``); PEFT without a PEFT recipe falls
   back to the model's SFT (then pretrain) recipe with LoRA added; no recipe for the model ->
   the closest size of the same family; long context (> 8K) prefers the long-context variants;
2. the planner's best layout for the request (one GPU -> PEFT only when nothing else fits);
3. the recipe's convergence contract (global batch, LR and schedule, sequence length,
   precision, data) is kept unless the user overrides it; every change from the base recipe is
   listed with its layer (service.changes);
4. the config is validated by the same rules as ``recipe-advisor validate`` and the launch
   commands are rendered from templates/launch/*.j2.
"""

from __future__ import annotations

import math
import shlex
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Optional, Union

import yaml
from jinja2 import Environment, FileSystemLoader, StrictUndefined

from recipe_index import get_hardware, list_recipes, load_recipe_text, param_counts, resolve_model
from recipe_index.cards import ModelCard
from recipe_index.models import find_bundled_model
from recipe_index.recipes import RecipeEntry
from service import constants as C
from service.changes import Change, diff
from service.facts import Finding
from service.planner import (Plan, PlanError, PlannedLayout, explicit_layouts, gpus_needed, make_request,
                             needs_explicit_layout, plan)
from service.validate import validate_text
from service.yamlio import apply_overrides, load_yaml
from trainer.capabilities import CAPABILITIES, supports_precision
from trainer.dotted import get_dotted as _get, set_dotted
from trainer.fast_paths import default_fast_paths

TEMPLATES = Path(__file__).resolve().parents[1] / "templates" / "launch"
RENDEZVOUS_PORT = 29500
# Megatron Bridge's default dataset presets by goal (seed, "First Answer Checklist").
DATASET_PRESET = {"pretrain": "mock", "sft": "squad", "peft": "squad"}
# LoRA defaults added when a PEFT request falls back to a non-PEFT recipe.
LORA = {"megatron": {"method": "lora", "rank": 32, "alpha": 32.0},
        "bundled": {"method": "lora", "rank": 8, "alpha": 16.0}}
# Our config keys -> Megatron Bridge ConfigContainer overrides for run_recipe.py.
BRIDGE_KEYS = {
    "distributed.tp_size": "model.tensor_model_parallel_size",
    "distributed.pp_size": "model.pipeline_model_parallel_size",
    "distributed.vp_size": "model.virtual_pipeline_model_parallel_size",
    "distributed.cp_size": "model.context_parallel_size",
    "distributed.ep_size": "model.expert_model_parallel_size",
    "distributed.etp_size": "model.expert_tensor_parallel_size",
    "distributed.sequence_parallel": "model.sequence_parallel",
    "distributed.activation_checkpointing": "model.recompute_granularity",
    "distributed.use_distributed_optimizer": "ddp.use_distributed_optimizer",
    "distributed.use_megatron_fsdp": "ddp.use_megatron_fsdp",
    "step_scheduler.local_batch_size": "train.micro_batch_size",
    "step_scheduler.global_batch_size": "train.global_batch_size",
    "step_scheduler.max_steps": "train.train_iters",
    "dataset.seq_length": "dataset.seq_length",
    "optimizer.lr": "optimizer.lr",
}


class Impossible(PlanError):
    """A request no layout on the given GPUs can serve; says what would."""

    def __init__(self, message: str, *, gpus_needed: Optional[int] = None, **kwargs):
        self.gpus_needed = gpus_needed
        super().__init__(message, **kwargs)


@dataclass
class Recommendation:
    model: ModelCard
    goal: str
    engine: str
    recipe: Optional[RecipeEntry]
    plan: Plan
    best: PlannedLayout
    config: dict
    config_yaml: str
    changes: list[Change]
    findings: list[Finding]
    commands: dict[str, str]
    notes: list[str] = field(default_factory=list)

    @property
    def errors(self) -> int:
        return sum(f.severity == "error" for f in self.findings)

    def to_dict(self) -> dict:
        req, hw = self.plan.request, self.plan.request.hardware
        return {
            "model": self.model.id,
            "hardware": {"gpu_type": hw.name, "gpus_per_node": req.gpus_per_node, "num_nodes": req.num_nodes,
                         "world_size": req.world_size, "memory_gib": hw.memory_gib},
            "goal": self.goal,
            "engine": self.engine,
            "recipe": None if self.recipe is None else {
                "name": self.recipe.name, "kind": self.recipe.kind, "megatron_recipe": self.recipe.megatron_recipe},
            "notes": self.notes,
            "layout": self.best.to_dict(),
            "config": self.config,
            "config_yaml": self.config_yaml,
            "changes": [c.to_dict() for c in self.changes],
            "findings": [f.to_dict() for f in self.findings],
            "commands": self.commands,
        }


# ---------------------------------------------------------------- recipe choice


def _size(card: ModelCard) -> float:
    return float(param_counts(card).total)


def _pick(entries: list[RecipeEntry], hardware: str, world: int, seq: Optional[int]) -> RecipeEntry:
    """The entry for this allocation: long-context variants only for > 8K, same hardware, closest GPU count."""
    def key(e: RecipeEntry) -> tuple:
        entry_seq = e.seq_length or 0
        long_wanted = seq is not None and seq > C.LONG_CONTEXT
        seq_miss = (entry_seq < seq) if long_wanted else (entry_seq > C.LONG_CONTEXT)
        return (seq_miss, e.hardware != hardware, abs(math.log2((e.num_gpus or 1) / world)), len(e.name), e.name)
    return min(entries, key=key)


def choose_recipe(card: ModelCard, goal: str, engine: str, hardware: str, world: int,
                  seq: Optional[int]) -> tuple[Optional[RecipeEntry], list[str]]:
    """The base recipe and the notes on how it was found (seed decision tree)."""
    kind = "bundled" if engine == "bundled" else "library"
    notes: list[str] = []
    goals = {"pretrain": ("pretrain",), "sft": ("sft", "pretrain"), "peft": ("peft", "sft", "pretrain")}[goal]
    for wanted in goals:
        own = [e for e in list_recipes(kind=kind, mode=wanted) if e.model == card.id]
        if own:
            chosen = _pick(own, hardware, world, seq)
            if wanted != goal:
                notes.append(f"no {goal.upper()} recipe for {card.id}; fell back to {chosen.name} ({wanted}) and "
                             f"{'added LoRA (peft section)' if goal == 'peft' else 'switched it to ' + goal}")
            return chosen, notes
    pool = [e for e in list_recipes(kind=kind, mode=goal) if e.model]
    if not pool and engine == "bundled":
        pool = list_recipes(kind="bundled")
    sized = []
    for entry in pool:
        other = find_bundled_model(entry.model)
        if other is not None and other.is_moe == card.is_moe:
            sized.append((entry, other))
    if not sized:
        return None, [f"no {kind} recipe to start from; the config is built from the schema defaults"]
    family = [(e, m) for e, m in sized if card.family and m.family == card.family] or sized
    target = _size(card)
    best_model = min({m.id: m for _, m in family}.values(), key=lambda m: abs(math.log(_size(m) / target)))
    entries = [e for e, m in family if m.id == best_model.id]
    chosen = _pick(entries, hardware, world, seq)
    where = f"the {card.family} family" if family is not sized else "the index"
    notes.append(f"no {kind} recipe for {card.id}; started from {chosen.name}, the closest size in {where} "
                 f"({best_model.id}), with the model swapped and the layout re-planned")
    return chosen, notes


# ---------------------------------------------------------------- config


def _set(data: dict, dotted: str, value) -> None:
    """Set a dotted key; None removes it, so the engine's default applies."""
    set_dotted(data, dotted, value, none_removes=True)


def apply_layout(config: dict, row: PlannedLayout, request, engine: str) -> None:
    lay, req = row.layout, request
    dist = {"strategy": row.strategy, "tp_size": lay.tp, "pp_size": lay.pp, "vp_size": lay.vp, "cp_size": lay.cp,
            "ep_size": lay.ep, "etp_size": lay.etp if (lay.ep > 1 or lay.etp != lay.tp) else None,
            "sequence_parallel": lay.sp, "activation_checkpointing": lay.recompute}
    if engine == "megatron":
        explicit = needs_explicit_layout(req, lay) and explicit_layouts(req.model.id)
        dist["pipeline_layout"] = "explicit" if explicit else None  # the recipe's layout builder places layers
        dist["use_distributed_optimizer"] = row.sharding in ("optimizer", "full")
        dist["use_megatron_fsdp"] = True if row.sharding == "full" else None
    else:
        dist["use_distributed_optimizer"] = dist["use_megatron_fsdp"] = None
    defaults = {"pp_size": 1, "vp_size": None, "cp_size": 1, "ep_size": 1, "etp_size": None}
    for key, value in dist.items():
        if _get(config, f"distributed.{key}") is None and defaults.get(key, object()) == value:
            continue  # leave schema defaults out rather than list them as changes
        _set(config, f"distributed.{key}", value)
    _set(config, "step_scheduler.local_batch_size", lay.micro_batch_size)
    _set(config, "step_scheduler.global_batch_size", req.global_batch_size)
    _set(config, "dataset.seq_length", req.seq_length)
    if _get(config, "model.seq_length") is not None:
        _set(config, "model.seq_length", req.seq_length)
    if _get(config, "validation_dataset.seq_length") is not None:
        _set(config, "validation_dataset.seq_length", req.seq_length)
    _set(config, "precision", req.precision)
    config["hardware"] = {"gpu_type": req.hardware.name, "gpus_per_node": req.gpus_per_node,
                          "num_nodes": req.num_nodes}


def _metadata(config: dict, card: ModelCard, goal: str, engine: str, request, base: Optional[RecipeEntry]) -> str:
    name = f"{card.id}_{goal}_{request.world_size}gpu_{request.hardware.name}_{request.precision}".replace("-", "_")
    meta = {"name": name, "kind": "bundled" if engine == "bundled" else "library", "family": card.family,
            "model": card.id, "mode": goal, "hardware": request.hardware.name, "num_gpus": request.world_size,
            "source": f"recipe-advisor recommend from {base.name}" if base else "recipe-advisor recommend"}
    if base is not None and base.megatron_recipe:
        meta["megatron_recipe"] = base.megatron_recipe
    config["metadata"] = {k: v for k, v in meta.items() if v is not None}
    return name


def contract_source(card: ModelCard, goal: str, engine: str, recipe: Optional[RecipeEntry], hardware: str,
                    world: int, seq: Optional[int], notes: list[str]) -> dict:
    """The config whose convergence contract (batch, sequence, precision) the request keeps.

    The base recipe's own, except on the bundled engine with a stand-in recipe of another model:
    then the model's Megatron library recipe, when the index has one, sets the contract.
    """
    base = _base_config(recipe)
    if engine != "bundled" or (recipe is not None and recipe.model == card.id):
        return base
    library, _ = choose_recipe(card, goal, "megatron", hardware, world, seq)
    if library is None or library.model != card.id:
        return base
    notes.append(f"convergence contract (global batch, sequence length, precision) from {library.name}, "
                 f"{card.id}'s library recipe")
    return _base_config(library)


def contract_defaults(model: Union[str, ModelCard], gpus: int, gpu_type: str, *, nodes: Optional[int] = None,
                      goal: str = "pretrain", engine: str = "megatron",
                      seq_length: Optional[int] = None) -> tuple[Optional[int], Optional[int], Optional[str]]:
    """(sequence length, global batch, precision) of the recipe `recommend` would start from, for
    `plan` requests that leave them out; (None, None, None) when the index has no recipe."""
    hardware = get_hardware(gpu_type)
    card = resolve_model(model) if isinstance(model, str) else model
    world = make_request(card, gpus, hardware.name, nodes=nodes, goal=goal, engine=engine).world_size
    recipe, notes = choose_recipe(card, goal, engine, hardware.name, world, seq_length)
    contract = contract_source(card, goal, engine, recipe, hardware.name, world, seq_length, notes)
    seq = _get(contract, "dataset.seq_length") or _get(contract, "model.seq_length")
    precision = contract.get("precision")
    if engine == "bundled" and precision not in ("bf16", "fp16", "fp32"):
        precision = "bf16" if precision else None
    return seq, _get(contract, "step_scheduler.global_batch_size"), precision


def _base_config(recipe: Optional[RecipeEntry]) -> dict:
    if recipe is None:
        return {}
    text = load_recipe_text(recipe.name)
    return load_yaml(text, str(recipe.path)).data


def build_config(card: ModelCard, goal: str, engine: str, recipe: Optional[RecipeEntry], row: PlannedLayout,
                 request, overrides: list[str]) -> tuple[dict, dict]:
    """(base config, advised config)."""
    base = _base_config(recipe)
    config = yaml.safe_load(yaml.safe_dump(base))  # a deep, plain copy
    config.pop("metadata", None)
    model_name = card.hf_id if engine == "megatron" and card.hf_id else card.id
    named = _get(config, "model.pretrained_model_name_or_path")
    if named is None or (named != model_name and (recipe is None or recipe.model != card.id)):
        _set(config, "model.pretrained_model_name_or_path", model_name)
    if goal == "peft" and not config.get("peft"):
        config["peft"] = dict(LORA[engine])
    if goal != "peft":
        config.pop("peft", None)
    apply_layout(config, row, request, engine)
    name = _metadata(config, card, goal, engine, request, recipe)
    if engine == "bundled":
        _set(config, "checkpoint.checkpoint_dir", f"checkpoints/{name}")
        # The trainer's fast paths for this hardware (execution settings), where the recipe is silent.
        hw = request.hardware
        for key, value in default_fast_paths(hw.name, hw.arch, _get(config, "optimizer._target_"),
                                             _get(config, "loss_fn._target_"),
                                             _get(config, "step_scheduler.max_steps")).items():
            if _get(config, key) is None:
                _set(config, key, value)
    if overrides:
        config = apply_overrides(config, overrides)
    return base, config


# ---------------------------------------------------------------- commands


def _environment() -> Environment:
    env = Environment(loader=FileSystemLoader(str(TEMPLATES)), undefined=StrictUndefined, autoescape=False,
                      keep_trailing_newline=True, trim_blocks=False)
    return env


def bridge_overrides(base: dict, config: dict) -> list[str]:
    """`key=value` overrides of run_recipe.py for every mapped key that differs from the recipe."""
    out = []
    for ours, theirs in BRIDGE_KEYS.items():
        old, new = _get(base, ours), _get(config, ours)
        if new is None or old == new:
            continue
        if ours == "distributed.activation_checkpointing":
            if new == "none":
                out.append(f"{theirs}=null")
                continue
            if new == "full":
                out += ["model.recompute_method=uniform", "model.recompute_num_layers=1"]
        if ours == "distributed.use_megatron_fsdp" and new:
            out.append("checkpoint.ckpt_format=fsdp_dtensor")  # Megatron-FSDP needs it (mbridge_rules 3d)
        value = str(new) if not isinstance(new, bool) else ("True" if new else "False")
        out.append(f"{theirs}={value}")
        if ours == "dataset.seq_length":
            out.append(f"model.seq_length={value}")
    return [shlex.quote(o) for o in out]


def render_commands(config_path: str, config: dict, base: dict, request, engine: str,
                    recipe: Optional[RecipeEntry]) -> dict[str, str]:
    """Launch commands from templates/launch: single-node torchrun, multi-node torchrun (c10d),
    a Slurm sbatch script, and Megatron Bridge's run_recipe.py with key=value overrides."""
    env = _environment()
    req = request
    common = {"nproc_per_node": req.gpus_per_node, "num_nodes": req.num_nodes, "port": RENDEZVOUS_PORT,
              "job_name": shlex.quote(str(_get(config, "metadata.name") or "recipe-advisor")),
              "config": shlex.quote(config_path)}
    bridge_recipe = (recipe.megatron_recipe if recipe is not None else None) or _get(base, "metadata.megatron_recipe")
    bridge = None
    if bridge_recipe:
        dataset = shlex.quote(str(_get(config, "dataset.preset") or DATASET_PRESET[req.goal]))
        overrides = bridge_overrides(base, config)
        bridge = (shlex.quote(bridge_recipe), dataset, overrides)
    if engine == "bundled":
        program = f"-m trainer {shlex.quote(config_path)}"
    elif bridge is not None:
        recipe_name, dataset, overrides = bridge
        program = " ".join(["scripts/training/run_recipe.py", "--recipe", recipe_name, "--dataset", dataset, *overrides])
    else:
        program = None
    commands: dict[str, str] = {}
    if program is not None:
        if req.num_nodes == 1:
            commands["torchrun"] = env.get_template("torchrun.sh.j2").render(
                bundled=engine == "bundled", program=program, **common)
        else:
            commands["torchrun_multinode"] = env.get_template("torchrun_multinode.sh.j2").render(
                program=program, **common)
        commands["sbatch"] = env.get_template("sbatch.sh.j2").render(
            program=program, time_limit="04:00:00", script_name="train.sbatch", **common)
    if bridge is not None:
        commands["megatron_bridge"] = env.get_template("megatron_bridge.sh.j2").render(
            recipe=bridge[0], dataset=bridge[1], overrides=bridge[2], **common)
    return commands


# ---------------------------------------------------------------- the whole flow


def recommend(model: Union[str, ModelCard], gpus: int, gpu_type: str, *, nodes: Optional[int] = None,
              goal: str = "pretrain", seq_length: Optional[int] = None, global_batch_size: Optional[int] = None,
              precision: Optional[str] = None, engine: str = "megatron", overrides: Optional[list[str]] = None,
              config_path: str = "config.yaml") -> Recommendation:
    """The seed's decision tree end to end (see module docstring). Raises UnknownModelError /
    UnknownHardwareError for unknown names, PlanError for unusable values and Impossible when no
    layout on the given GPUs serves the request."""
    hardware = get_hardware(gpu_type)
    card = resolve_model(model) if isinstance(model, str) else model
    probe = make_request(card, gpus, hardware.name, nodes=nodes, goal=goal, engine=engine)
    recipe, notes = choose_recipe(card, goal, engine, hardware.name, probe.world_size, seq_length)
    contract = contract_source(card, goal, engine, recipe, hardware.name, probe.world_size, seq_length, notes)
    seq = seq_length or _get(contract, "dataset.seq_length") or _get(contract, "model.seq_length")
    gbs = global_batch_size or _get(contract, "step_scheduler.global_batch_size")
    prec = precision or contract.get("precision") or "bf16"
    if engine == "bundled" and not supports_precision(prec, hardware.arch):
        why = (f"its fp8 (torchao) needs a GPU of {', '.join(CAPABILITIES['fp8']['archs'])}" if prec == "fp8"
               else f"it has no {prec} kernels")
        notes.append(f"the bundled trainer does not train in {prec} on {hardware.name}: {why}; precision {prec} -> "
                     "bf16 (a convergence change)")
        prec = "bf16"
    elif engine == "bundled" and prec == "fp8":
        notes.append(f"fp8 in the bundled trainer: {CAPABILITIES['fp8']['via']} linears, data parallel only; "
                     f"install the extra: pip install 'recipe-advisor[{CAPABILITIES['fp8']['extra']}]'")
    if seq and seq > C.LONG_CONTEXT:
        notes.append(f"long context ({seq} tokens): context parallelism is considered"
                     + ("" if engine == "megatron" else ", but the bundled trainer has none; activations grow with it"))
    request = make_request(card, gpus, hardware.name, nodes=nodes, goal=goal, seq_length=seq,
                           global_batch_size=gbs, precision=prec, engine=engine)
    result = plan(request)
    if result.best is None and request.world_size == 1 and goal != "peft":
        peft_request = replace(request, goal="peft")
        peft_plan = plan(peft_request)
        if peft_plan.best is not None:
            notes.append(f"1 GPU: {goal} does not fit, only PEFT does (seed decision tree); switched to LoRA")
            goal, request, result = "peft", peft_request, peft_plan
            recipe, more = choose_recipe(card, goal, engine, hardware.name, 1, seq_length)
            notes += more
    if result.best is None:
        raise _impossible(result, request)
    best = _choose(result)
    base, config = build_config(card, goal, engine, recipe, best, request, overrides or [])
    text = _dump(config, recipe, notes)
    report = validate_text(text, config_path)
    # Index metadata is not training: the change list covers what the trainer reads.
    changes = [c for c in diff(base, config) if not c.key.startswith("metadata.")] if base else []
    commands = render_commands(config_path, config, base, request, engine, recipe)
    return Recommendation(model=card, goal=goal, engine=engine, recipe=recipe, plan=result, best=best,
                          config=config, config_yaml=text, changes=changes, findings=report.findings,
                          commands=commands, notes=notes)


def _impossible(result: Plan, request) -> PlanError:
    """What to say when nothing on these GPUs serves the request: how many GPUs would, else why not."""
    hw = request.hardware
    needed = gpus_needed(request)
    rejections = "; ".join(f"{f.code}: {f.message}" for f, _ in result.rejections.values())
    if needed is None and not result.layouts:
        fixes = "; ".join(sorted({f.fix for f, _ in result.rejections.values() if f.fix}))
        return PlanError(f"no valid layout of {request.model.id} on {request.world_size} x {hw.name} "
                         f"({request.engine} engine): {rejections or 'no layout obeys the rules'}",
                         field="gpus", fix=fixes or None)
    if result.layouts:
        leanest = min(result.layouts, key=lambda r: r.memory_total_gib)
        why = (f"the leanest layout needs {leanest.memory.total:.1f} GiB per GPU, {hw.name} offers "
               f"{result.usable_gib:.1f} GiB after headroom")
    else:
        why = rejections
    need = (f"It needs at least {needed} {hw.name} GPUs" if needed else
            f"No count of {hw.name} GPUs up to 65536 fits it")
    return Impossible(f"{request.model.id} ({request.goal}, seq {request.seq_length}, global batch "
                      f"{request.global_batch_size}) does not fit on {request.world_size} x {hw.name} at any layout: "
                      f"{why}. {need} ({request.engine} engine).", gpus_needed=needed, field="gpus",
                      fix=f"request --gpus {needed}" if needed else "use a GPU type with more memory")


def _choose(result: Plan) -> PlannedLayout:
    """The best layout, or a near-equal one (within the tie tolerance) that clears the memory warning."""
    best = result.best
    capacity = result.request.hardware.memory_gib * C.MEMORY_WARNING_FRACTION
    floor = best.tokens_per_s * (1 - C.ESTIMATE_TIE_TOLERANCE)
    for row in result.fitting:
        if row.tokens_per_s < floor:
            break
        if row.memory_total_gib <= capacity:
            return row
    return best


def _dump(config: dict, recipe: Optional[RecipeEntry], notes: list[str]) -> str:
    header = ["# Generated by `recipe-advisor recommend`"
              + (f" from {recipe.name}" if recipe else "") + "."]
    header += [f"# note: {n}" for n in notes]
    order = ["metadata", "recipe", "model", "step_scheduler", "distributed", "dataset", "validation_dataset",
             "dataloader", "optimizer", "lr_scheduler", "loss_fn", "clip_grad_norm", "compile", "peft",
             "checkpoint", "restore_from", "rng", "precision", "hardware"]
    ordered = {k: config[k] for k in order if k in config}
    ordered.update({k: v for k, v in config.items() if k not in ordered})
    return "\n".join(header) + "\n" + yaml.safe_dump(ordered, sort_keys=False, default_flow_style=False)
