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

import re
from dataclasses import dataclass, field, replace
from typing import Optional, Union

import yaml

from recipe_index import find_bundled_model, get_hardware, resolve_model
from recipe_index.cards import ModelCard
from recipe_index.recipes import RecipeEntry
from service import constants as C
from service.changes import Change, diff, json_safe
from service.facts import Finding
from service.bridge_command import bridge_command, bridge_recipe_name, gaps_note
from service.launch_commands import render_commands
from service.planner import Plan, PlanError, PlannedLayout, make_request, plan, refuse_fp8_recipe_for_bundled
from service.recipe_choice import choose_recipe
from service.recommend_config import base_config, build_config
from service.request_overrides import request_fields
from service.rules.precision import fp8_recipe_of, token_runs_on
from service.sizing import gpus_option, gpus_that_fit, memory_only
from service.validate import validate_text
from service.yamlio import OverrideError, apply_overrides
from trainer.capabilities import CAPABILITIES, supports_precision
from trainer.dotted import get_dotted as _get

# Half precisions a CPU without native units (AVX512-BF16/AMX) emulates, slower than fp32: the trainer
# warns about them (trainer/fused/runtime.py cpu_precision_warning), so recommend does not advise them.
CPU_EMULATED = ("bf16", "fp16")


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
            "layout": self.best.to_dict(self.plan.usable_gib),
            "config": json_safe(self.config),  # .nan/.inf as "nan"/"inf", as diff's JSON writes them
            "config_yaml": self.config_yaml,
            "changes": [c.to_dict() for c in self.changes],
            "findings": [f.to_dict() for f in self.findings],
            "commands": self.commands,
        }


def contract_source(card: ModelCard, goal: str, engine: str, recipe: Optional[RecipeEntry], hardware: str,
                    world: int, seq: Optional[int], notes: list[str], precision: Optional[str] = None, *,
                    base: Optional[dict] = None) -> dict:
    """The config whose convergence contract (batch, sequence, precision) the request keeps.

    The base recipe's own (``base``: its config, when the caller has loaded it), except on the bundled
    engine with a stand-in recipe of another model: then the model's Megatron library recipe, when the
    index has one, sets the contract; for a model the index does not bundle (a local config.json, a Hub
    repo) on GPUs, the library recipe of the closest size that the Megatron engine starts from, rather than
    the stand-in's CPU smoke-test contract (fp32, 64-token sequences), which the cpu card keeps.
    """
    base = base_config(recipe) if base is None else base
    if engine != "bundled" or (recipe is not None and recipe.model == card.id):
        return base
    library, _ = choose_recipe(card, goal, "megatron", hardware, world, seq, precision)
    smoke_test = find_bundled_model(card.id) is not None or get_hardware(hardware).arch == "cpu"
    if library is None or (library.model != card.id and smoke_test):
        return base
    whose = f"{card.id}'s library recipe" if library.model == card.id else \
        f"the library recipe of the closest size in the index ({library.model})"
    notes.append(f"convergence contract (global batch, sequence length, precision) from {library.name}, {whose}")
    if library.mode != goal:  # the index has no library recipe of this goal for the model
        notes.append(f"{library.name} is a {library.mode} recipe (the index has no {goal} recipe for {card.id}): "
                     f"its LR, steps, warmup and global batch are {library.mode} values; check them for {goal} "
                     "(override --optimizer.lr, --step_scheduler.max_steps, --global-batch-size)")
    return base_config(library)


def _recipe_and_contract(card: ModelCard, goal: str, engine: str, hardware: str, world: int, seq: Optional[int],
                         precision: Optional[str], notes: list[str]) -> tuple[Optional[RecipeEntry], dict, dict]:
    """The base recipe (seed decision tree), its config (read once here, passed on to whatever else needs
    it) and the config whose convergence contract the request keeps."""
    recipe, found = choose_recipe(card, goal, engine, hardware, world, seq, precision)
    notes += found
    base = base_config(recipe)
    return recipe, base, contract_source(card, goal, engine, recipe, hardware, world, seq, notes, precision, base=base)


def contract_defaults(model: Union[str, ModelCard], gpus: int, gpu_type: str, *, nodes: Optional[int] = None,
                      goal: str = "pretrain", engine: str = "megatron",
                      seq_length: Optional[int] = None, precision: Optional[str] = None,
                      ) -> tuple[Optional[int], Optional[int], Optional[str], Optional[str], bool]:
    """(sequence length, global batch, precision, gradient reduce dtype, offline packing) of the recipe
    `recommend` would start from, for `plan` requests that leave them out; None (and no packing) when the
    index has no recipe, except the precision: the one `recommend` would plan, the asked one, else the
    recipe's (None without either), and under Megatron a plain fp8 as the FP8 recipe the base recipe runs."""
    hardware = get_hardware(gpu_type)
    card = resolve_model(model) if isinstance(model, str) else model
    world = make_request(card, gpus, hardware.name, nodes=nodes, goal=goal, engine=engine).world_size
    recipe, base, contract = _recipe_and_contract(card, goal, engine, hardware.name, world, seq_length, precision, [])
    seq = _contract_seq(card, contract)
    recipe_precision = contract.get("precision")
    if engine == "megatron":
        recipe_precision = _megatron_precision(precision, contract, base)
    elif recipe_precision and not precision:  # as recommend decides it (fp8 kept where the trainer runs it)
        recipe_precision = _bundled_precision(recipe_precision, hardware, [])
    else:
        recipe_precision = precision or recipe_precision
    return (seq, _get(contract, "step_scheduler.global_batch_size"), recipe_precision,
            _get(contract, "distributed.grad_reduce_dtype"), packs_offline(recipe, [], base=base))


# ---------------------------------------------------------------- the whole flow


def _megatron_precision(asked: Optional[str], contract: dict, base: dict) -> Optional[str]:
    """The user's precision, else the contract's; a plain fp8 as the FP8 recipe the base recipe runs (its
    metadata.precision_recipe, else its name's token: the label the written config keeps), so that the plan
    ranks the scaling the config trains in (per tensor or per block: service.ranking)."""
    precision = asked or contract.get("precision")
    if precision != "fp8":
        return precision
    return fp8_recipe_of(base) or precision


def _given(value: Optional[int], default: Optional[int]) -> Optional[int]:
    """The user's value when given (0 too, so that make_request rejects it), else the recipe's."""
    return default if value is None else value


def _bundled_precision(precision: str, hardware, notes: list[str], *, asked: bool = False) -> str:
    """The precision the bundled trainer trains in on this hardware, saying why when it differs from the
    recipe's; a precision the user asked for (``asked``) is refused instead, as the planner refuses it."""
    on_cpu = hardware.arch == "cpu"
    if not supports_precision(precision, hardware.arch):
        why = (f"its fp8 (torchao) needs a GPU of {', '.join(CAPABILITIES['fp8']['archs'])}" if precision == "fp8"
               else f"it has no {precision} kernels")
        if asked:
            other = "fp32" if on_cpu else "bf16"
            megatron = ", or --engine megatron" if token_runs_on(precision, hardware) and not on_cpu else ""
            raise PlanError(f"the bundled trainer does not train in {precision} on {hardware.name}: {why}",
                            field="precision", fix=f"use --precision {other}{megatron}")
        fallback = "fp32" if on_cpu else "bf16"
        notes.append(f"the bundled trainer does not train in {precision} on {hardware.name}: {why}; precision "
                     f"{precision} -> {fallback} (a convergence change)")
        return fallback
    if on_cpu and precision in CPU_EMULATED and not asked:
        notes.append(f"precision {precision} -> fp32 on {hardware.name} (a convergence change): a CPU without native "
                     f"{precision} units (AVX512-BF16/AMX) emulates it, slower than fp32; --precision {precision} "
                     "keeps it")
        return "fp32"
    if precision == "fp8":
        notes.append(f"fp8 in the bundled trainer: {CAPABILITIES['fp8']['via']} linears, data parallel only; "
                     f"install the extra: pip install 'recipe-advisor[{CAPABILITIES['fp8']['extra']}]'")
    return precision


def _contract_seq(card: ModelCard, contract: dict) -> Optional[int]:
    """The contract's sequence length, capped at the model's context when the recipe is another
    model's (a stand-in): its length says nothing about this model's positions."""
    seq = _get(contract, "dataset.seq_length") or _get(contract, "model.seq_length")
    stand_in = _get(contract, "metadata.model") not in (None, card.id)
    if seq and stand_in and card.max_position_embeddings:
        return min(seq, card.max_position_embeddings)
    return seq


def packs_offline(recipe: Optional[RecipeEntry], overrides: list[str], *, base: Optional[dict] = None) -> bool:
    """Whether the advised config will pack its data offline (``dataset.packed_sequence: true``, the
    index's _sft_common/_peft_common recipes), the overrides applied: Bridge then takes micro batch 1 only.
    ``base``: the recipe's config, when the caller has loaded it. The plan needs this before build_config
    applies the overrides to the planned config, so they are applied here to the recipe's."""
    config = base_config(recipe) if base is None else base
    try:
        config = apply_overrides(config, overrides)
    except OverrideError:
        pass  # build_config applies them again and reports the error
    return _get(config, "dataset.packed_sequence") is True


def _contract_request(card: ModelCard, gpus: int, hardware, goal: str, engine: str, contract: dict, base: dict,
                      notes: list[str], *, nodes: Optional[int], seq_length: Optional[int],
                      global_batch_size: Optional[int], precision: Optional[str],
                      grad_reduce_dtype: Optional[str] = None, packed_sequence: bool = False):
    """The plan request: what the user gave, the contract's values for the rest."""
    refuse_fp8_recipe_for_bundled(precision, engine, hardware)  # before the bundled check calls it unknown
    if engine == "megatron":
        prec = _megatron_precision(precision, contract, base)
    else:  # as contract_defaults decides it for `plan`
        prec = precision or contract.get("precision")
        prec = _bundled_precision(prec, hardware, notes, asked=precision is not None) if prec else prec
    prec = prec or "bf16"  # no recipe (schema defaults): make_request's default, as `plan` uses it
    return make_request(card, gpus, hardware.name, nodes=nodes, goal=goal, engine=engine, precision=prec,
                        seq_length=_given(seq_length, _contract_seq(card, contract)),
                        global_batch_size=_given(global_batch_size, _get(contract, "step_scheduler.global_batch_size")),
                        grad_reduce_dtype=grad_reduce_dtype or _get(contract, "distributed.grad_reduce_dtype") or "fp32",
                        packed_sequence=packed_sequence)


def recommend(model: Union[str, ModelCard], gpus: int, gpu_type: str, *, nodes: Optional[int] = None,
              goal: str = "pretrain", seq_length: Optional[int] = None, global_batch_size: Optional[int] = None,
              precision: Optional[str] = None, engine: str = "megatron", overrides: Optional[list[str]] = None,
              config_path: str = "config.yaml", grad_reduce_dtype: Optional[str] = None) -> Recommendation:
    """The seed's decision tree end to end (see module docstring). Raises UnknownModelError /
    UnknownHardwareError for unknown names, PlanError for unusable values and Impossible when no
    layout on the given GPUs serves the request. Overrides of keys a request field sets (the sequence
    length, global batch, precision, GPU type, model) are that field (service.request_overrides)."""
    card = resolve_model(model) if isinstance(model, str) else model
    lifted = request_fields(overrides or [], {"gpu_type": gpu_type, "seq_length": seq_length, "precision": precision,
                                              "global_batch_size": global_batch_size,
                                              "grad_reduce_dtype": grad_reduce_dtype}, model=card)
    gpu_type, seq_length, precision = lifted["gpu_type"], lifted["seq_length"], lifted["precision"]
    global_batch_size, grad_reduce_dtype = lifted["global_batch_size"], lifted["grad_reduce_dtype"]
    hardware = get_hardware(gpu_type)
    probe = make_request(card, gpus, hardware.name, nodes=nodes, goal=goal, engine=engine)
    given = {"nodes": nodes, "seq_length": seq_length, "global_batch_size": global_batch_size, "precision": precision,
             "grad_reduce_dtype": grad_reduce_dtype}

    def contract_request(wanted: str, world: int, notes: list[str]):
        recipe, base, contract = _recipe_and_contract(card, wanted, engine, hardware.name, world, seq_length,
                                                      precision, notes)
        packed = packs_offline(recipe, overrides or [], base=base)
        return recipe, base, _contract_request(card, gpus, hardware, wanted, engine, contract, base, notes,
                                               packed_sequence=packed, **given), contract

    notes: list[str] = []
    recipe, base, request, contract = contract_request(goal, probe.world_size, notes)
    result = plan(request)
    if result.best is None and request.world_size == 1 and goal != "peft":
        # The PEFT recipe's own contract: only what the user gave carries over from the request.
        peft_notes: list[str] = []
        peft_recipe, peft_base, peft_request, peft_contract = contract_request("peft", 1, peft_notes)
        peft_plan = plan(peft_request)
        if peft_plan.best is not None:
            # The abandoned goal's notes (its recipe, its contract) no longer describe the config.
            notes = [f"1 GPU: {goal} does not fit, only PEFT does (seed decision tree); switched to LoRA"] + peft_notes
            goal, recipe, base, request, result, contract = ("peft", peft_recipe, peft_base, peft_request, peft_plan,
                                                             peft_contract)
    if request.seq_length > C.LONG_CONTEXT:
        notes.append(f"long context ({request.seq_length} tokens): context parallelism is considered"
                     + ("" if engine == "megatron" else ", but the bundled trainer has none; activations grow with it"))
    if result.best is None:
        raise _impossible(result, request)
    best = result.best  # the planner's ranking is the one ranking: plan's #1 is what recommend applies
    base, config = build_config(card, goal, engine, recipe, best, request, overrides or [], notes, contract, base=base)
    text = _dump(config, recipe, notes)
    notes += result.notes  # about the estimates, not the config's header
    report = validate_text(text, config_path)
    # As `diff` lists them: what the trainer reads, and of the index metadata only the labels that are
    # convergence (the Bridge recipe, the FP8 recipe).
    changes = diff(base, config) if base else []
    commands: dict[str, str] = {}
    # With errors the callers refuse the config; commands would read values of the wrong type (an override
    # `decay_steps: abc` is RA-C002, not arithmetic; audit s10b #3).
    if not any(f.severity == "error" for f in report.findings):
        bridge_recipe = bridge_recipe_name(base, recipe)
        bridge_args, gaps = bridge_command(base, config, report.findings) if bridge_recipe else ([], [])
        if gaps:
            notes.append(gaps_note(bridge_recipe, gaps))
        commands = render_commands(config_path, config, base, request, engine, recipe, tuple(gaps), bridge_args)
    return Recommendation(model=card, goal=goal, engine=engine, recipe=recipe, plan=result, best=best,
                          config=config, config_yaml=text, changes=changes, findings=report.findings,
                          commands=commands, notes=notes)


# Request fields (CLI --flag / API field) a rule's key stands for, and the config spellings of their fixes.
_REQUEST_FIELD = {"precision": "precision", "metadata.precision_recipe": "precision", "distributed.strategy": "engine",
                  "model.pretrained_model_name_or_path": "engine"}
_CONFIG_TO_OPTION = ((re.compile(r"\bstrategy: (\w+)"), r"--engine \1 (API: engine \1)"),
                     (re.compile(r"\ba GPU type \(hardware\.gpu_type\)"), "a GPU type (--gpu-type, API: gpu_type)"),
                     (re.compile(r"\bmetadata\.precision_recipe: (\w+)"), r"--precision \1 (API: precision \1)"),
                     (re.compile(r"\bprecision: (\w+)"), r"--precision \1 (API: precision \1)"))


def _rejected_field(rejections: list[Finding]) -> str:
    """The request field behind rule rejections: precision, engine, else the GPU count."""
    fields = {_REQUEST_FIELD.get(f.key or "") or ("engine" if f.code.startswith("RA-E") else None) for f in rejections}
    return next((name for name in ("precision", "engine") if name in fields), "gpus")


def _as_options(fix: str) -> str:
    for pattern, option in _CONFIG_TO_OPTION:
        fix = pattern.sub(option, fix)
    return fix


# A sequence length every CP (2 x CP chunks) and TP x CP split of the planner divides: CP <= 64, TP <= 16.
SPLITTABLE = 1024


def _splittable_length(request) -> Optional[tuple[int, Optional[int]]]:
    """(the next multiple of SPLITTABLE above the request's sequence length, and None when it fits on the
    request's GPUs, else the fewest GPUs found for it), when the request's length is not such a multiple
    and the rounded one fits somewhere; else None. Costs a plan (and a search) on the failure path only."""
    seq = request.seq_length
    if seq % SPLITTABLE == 0:
        return None
    rounded = -(-seq // SPLITTABLE) * SPLITTABLE
    positions = request.model.max_position_embeddings
    if rounded > C.MAX_SEQ_LENGTH or (request.engine == "bundled" and positions and rounded > positions):
        return None
    result = plan(replace(request, seq_length=rounded))
    if result.best is not None:
        return rounded, None
    counts = gpus_that_fit(result)
    return (rounded, counts[0]) if counts else None


def _impossible(result: Plan, request) -> PlanError:
    """What to say when nothing on these GPUs serves the request: how many GPUs would, else why not."""
    hw = request.hardware
    found = [f for f, _ in result.rejections.values()]
    counts = gpus_that_fit(result)
    if not result.layouts and not memory_only(result.rejections):  # rules reject every layout here, not memory
        rejections = "; ".join(f"{f.code}: {f.message}" for f in found) or "no layout obeys the rules"
        fixes = sorted({_as_options(f.fix) for f in found if f.fix})
        if counts:
            fixes.insert(0, "request " + " or ".join(gpus_option(c, request) for c in counts))
        works = f" {' or '.join(map(str, counts))} {hw.name} GPUs work." if counts else ""
        return PlanError(f"no valid layout of {request.model.id} on {request.world_size} x {hw.name} "
                         f"({request.engine} engine): {rejections}.{works}",
                         field="gpus" if counts else _rejected_field(found), fix="; ".join(fixes) or None)
    needed = counts[0] if counts else None
    if result.layouts:
        leanest = min(result.layouts, key=lambda r: r.memory_total_gib)
        why = (f"the leanest layout needs {leanest.memory.total:.1f} GiB per GPU, {hw.name} offers "
               f"{result.usable_gib:.1f} GiB after headroom")
    else:
        why = "; ".join(f"{f.code}: {f.message}" for f in found)
    # "Found", not "needs at least": fit is not monotonic in the GPU count (EP, PP and the batch must
    # divide it), and the search (service/sizing.py) probes counts rather than trying them all.
    need = (f"The fewest {hw.name} GPUs found to fit it: {needed}" if needed else
            f"No count of {hw.name} GPUs up to 65536 fits it")
    splittable = _splittable_length(request)
    if splittable is not None and (needed is None or splittable[1] is None or splittable[1] < needed):
        rounded, gpus = splittable  # the length, more than the GPU count, is what stands in the way
        where = f"these {request.world_size}" if gpus is None else f"{gpus}"
        return Impossible(f"{request.model.id} ({request.goal}, seq {request.seq_length}, global batch "
                          f"{request.global_batch_size}) does not fit on {request.world_size} x {hw.name} at any "
                          f"layout: {why}. The sequence length stands in the way: {request.seq_length} divides "
                          f"by too little for context parallelism (2 x CP) and sequence parallelism (TP x CP) to "
                          f"split it, and {rounded} tokens fit on {where} {hw.name} GPUs. {need} "
                          f"({request.engine} engine).", gpus_needed=needed, field="seq_length",
                          fix=f"use a sequence length that is a multiple of {SPLITTABLE}, e.g. {rounded}"
                              + ("" if gpus is None else f", with {gpus_option(gpus, request)}"))
    return Impossible(f"{request.model.id} ({request.goal}, seq {request.seq_length}, global batch "
                      f"{request.global_batch_size}) does not fit on {request.world_size} x {hw.name} at any layout: "
                      f"{why}. {need} ({request.engine} engine).", gpus_needed=needed, field="gpus",
                      fix=f"request {gpus_option(needed, request)}" if needed else "use a GPU type with more memory")


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
