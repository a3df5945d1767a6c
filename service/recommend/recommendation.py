"""A ready config for a model, hardware and goal, with the layout, estimates, findings and commands.

The recipe decision tree, in one pass:

1. goal -> a pretrain / SFT / PEFT recipe of the model from the index (library recipes for
   ``--engine megatron``, bundled ones for ``--engine bundled``); PEFT without a PEFT recipe falls
   back to the model's SFT (then pretrain) recipe with LoRA added; no recipe for the model ->
   the closest size of the same family; long context (> 8K) prefers the long-context variants;
2. the planner's best layout for the request (one GPU -> PEFT only when nothing else fits);
3. the recipe's convergence contract (global batch, LR and schedule, sequence length,
   precision, data) is kept unless the user overrides it; every change from the base recipe is
   listed with its layer (service.configs.changes);
4. the config is validated by the same rules as ``recipe-advisor validate`` and the launch
   commands are rendered from templates/launch/*.j2.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any, Optional, Sequence, Union

import yaml

from recipe_index import get_hardware
from recipe_index.cards import ModelCard
from recipe_index.recipes import RecipeEntry
from service.configs.changes import Change, diff, json_safe
from service.estimate import constants as C
from service.facts import Finding
from service.plan.planner import make_request, plan
from service.plan.provenance import plan_calibration, row_dict
from service.plan.report import DEFAULT_TOP
from service.plan.shown import shown_rows, why_first_shown
from service.plan.sizing import gpus_option, gpus_that_fit, memory_only
from service.plan.sources import ESTIMATE, LayoutSource
from service.plan.types import Plan, PlanError, PlannedLayout
from service.recommend.automodel_emit import as_automodel, no_automodel_layout
from service.recommend.bridge_command import bridge_command, bridge_recipe_name, gaps_note
from service.recommend.config_build import build_config
from service.recommend.contract import recipe_and_request
from service.recommend.launch_commands import render_commands
from service.recommend.layout_source import alternatives, choose_layout
from service.recommend.request_overrides import request_fields
from service.request import MAX_SEQ_LENGTH, AdviceRequest, advice_request
from service.runs.advice import reading_store, with_runs
from service.validate.document import validate_text


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
    layout_source: Optional[LayoutSource] = None
    emit: str = "recipe-advisor"  # or "automodel": config_yaml is a NeMo AutoModel recipe

    @property
    def why_first(self) -> Optional[str]:
        """Why the chosen layout is first although a faster one is among the rows `plan` shows by default: only when
        the estimate chose it (a recipe's layout says why in ``layout_source``, quoting its own estimate)."""
        if self.layout_source is not None and self.layout_source.source != ESTIMATE:
            return None
        shown = shown_rows(self.plan, DEFAULT_TOP)
        if not shown or shown[0].row is not self.best:
            return None
        return why_first_shown(self.plan, shown, numbered=False)

    @property
    def errors(self) -> int:
        return sum(f.severity == "error" for f in self.findings)

    def to_dict(self) -> dict:
        req, hw = self.plan.request, self.plan.request.hardware
        answer = {
            "model": self.model.id,
            "hardware": {"gpu_type": hw.name, "gpus_per_node": req.gpus_per_node, "num_nodes": req.num_nodes,
                         "world_size": req.world_size, "memory_gib": hw.memory_gib},
            "goal": self.goal,
            "engine": self.engine,
            "recipe": None if self.recipe is None else {
                "name": self.recipe.name, "kind": self.recipe.kind, "megatron_recipe": self.recipe.megatron_recipe},
            "notes": self.notes,
            "layout": row_dict(self.plan, self.best),
            "layout_source": None if self.layout_source is None else self.layout_source.to_dict(),
            "alternatives": alternatives(self.plan, self.best),
            "calibration": plan_calibration(self.plan),
            "why_first": self.why_first,
            "config": json_safe(self.config),  # .nan/.inf as "nan"/"inf", as diff's JSON writes them
            "config_yaml": self.config_yaml,
            "changes": [c.to_dict() for c in self.changes],
            "findings": [f.to_dict() for f in self.findings],
            "commands": self.commands,
        }
        if self.emit != "recipe-advisor":  # the default answer keeps its keys
            answer["emit"] = self.emit
        return answer


def recommend(model: Union[str, ModelCard], gpus: int, gpu_type: str, *, overrides: Optional[Sequence[str]] = (),
              config_path: str = "config.yaml", emit: str = "recipe-advisor", **fields: Any) -> Recommendation:
    """``recommend_for`` of plain values: ``model`` a card or a name, ``overrides`` the command line's
    ``--a.b v`` arguments, ``fields`` the other fields of AdviceRequest (nodes, goal, seq_length, ...)."""
    return recommend_for(advice_request(model, gpus, gpu_type, overrides=overrides, **fields), config_path, emit)


@dataclass
class Prepared:
    """A request planned, before a layout is chosen: what ``advise`` turns into a config for any row of the plan."""

    card: ModelCard
    goal: str
    engine: str
    recipe: Optional[RecipeEntry]
    base: dict
    request: Any  # PlanRequest
    result: Plan
    contract: dict
    overrides: tuple
    given: frozenset[str]  # the request fields the user set
    notes: list[str]


def recommend_for(advice: AdviceRequest, config_path: str = "config.yaml", emit: str = "recipe-advisor",
                  runs_db: Optional[str] = None) -> Recommendation:
    """The recipe decision tree end to end (see module docstring), for the request both doors build.
    Raises UnknownHardwareError for an unknown GPU type, OverrideError for unusable overrides, PlanError for
    unusable values and Impossible when no layout on the given GPUs serves the request. Overrides of keys
    a request field sets (the sequence length, global batch, precision, GPU type, model) are that field
    (service.recommend.request_overrides). ``config_path``: the file the launch commands read. ``emit``:
    ``automodel`` writes the config as a NeMo AutoModel recipe (service.recommend.automodel_emit). ``runs_db``:
    the runs store whose measurements rank the layouts (service.runs.advice; default RECIPE_ADVISOR_DB or the
    user's default store, when it exists)."""
    prepared = prepare(advice, runs_db)
    best, source = choose_layout(prepared.result, prepared.recipe, prepared.given)
    return advise(prepared, best, source, config_path, emit)


def prepare(advice: AdviceRequest, runs_db: Optional[str] = None, *, read_runs: bool = True) -> Prepared:
    """Steps 1 and 2 of the decision tree: the recipe, its contract and the plan, ranked with the measurements of
    the runs store unless ``read_runs`` is False (tune: its candidates keep the estimates' order, so a second
    tune asks for the same trials). Raises as ``recommend_for``."""
    card, gpus, nodes, goal, engine = advice.model, advice.gpus, advice.nodes, advice.goal, advice.engine
    given = request_fields(advice.overrides, {"gpu_type": advice.gpu_type, "seq_length": advice.seq_length,
                                              "precision": advice.precision,
                                              "global_batch_size": advice.global_batch_size,
                                              "grad_reduce_dtype": advice.grad_reduce_dtype}, model=card)
    hardware = get_hardware(given.pop("gpu_type"))
    probe = make_request(card, gpus, hardware.name, nodes=nodes, goal=goal, engine=engine)

    def contract_request(wanted: str, world: int, notes: list[str]):
        return recipe_and_request(card, gpus, hardware, wanted, engine, world, advice.overrides, notes, nodes=nodes,
                                  **given)

    notes: list[str] = []
    set_fields = frozenset(name for name, value in given.items() if value is not None)
    recipe, base, request, contract = contract_request(goal, probe.world_size, notes)
    # The plan knows which contract fields the user set, as `plan` does: a tuned recipe must match only those.
    request = replace(request, given=set_fields & request.given)
    result = with_runs(plan(request), reading_store(runs_db)) if read_runs else plan(request)
    if result.best is None and request.world_size == 1 and goal != "peft":
        # The PEFT recipe's own contract: only what the user gave carries over from the request.
        peft_notes: list[str] = []
        peft_recipe, peft_base, peft_request, peft_contract = contract_request("peft", 1, peft_notes)
        peft_plan = plan(peft_request)
        if peft_plan.best is not None:
            # The abandoned goal's notes (its recipe, its contract) no longer describe the config.
            notes = [f"1 GPU: {goal} does not fit, only PEFT does (the recommender's decision tree); "
                     "switched to LoRA"] + peft_notes
            goal, recipe, base, request, result, contract = ("peft", peft_recipe, peft_base, peft_request, peft_plan,
                                                             peft_contract)
    if request.seq_length > C.LONG_CONTEXT:
        notes.append(_long_context_note(request.seq_length, engine, result))
    if result.best is None:
        raise _impossible(result, request)
    return Prepared(card=card, goal=goal, engine=engine, recipe=recipe, base=base, request=request, result=result,
                    contract=contract, overrides=tuple(advice.overrides), given=set_fields, notes=notes)


def advise(prepared: Prepared, best: PlannedLayout, source: Optional[LayoutSource], config_path: str = "config.yaml",
           emit: str = "recipe-advisor") -> Recommendation:
    """Steps 3 and 4 for one row of the prepared plan: the config, its findings and the launch commands."""
    card, goal, engine, recipe, request, result = (prepared.card, prepared.goal, prepared.engine, prepared.recipe,
                                                   prepared.request, prepared.result)
    notes = list(prepared.notes)
    base, config = build_config(card, goal, engine, recipe, best, request, list(prepared.overrides), notes,
                                prepared.contract, base=prepared.base)
    text = _dump(config, recipe, notes)
    # About the layout and the estimates, not the config's header.
    notes += [*([source.summary] if source else []), *result.notes,
              f"estimates calibrated on: {plan_calibration(result)}"]
    report = validate_text(text, config_path)
    # As `diff` lists them: what the trainer reads, and of the index metadata only the labels that are
    # convergence (the Bridge recipe, the FP8 recipe).
    changes = diff(base, config) if base else []
    commands: dict[str, str] = {}
    # With errors the callers refuse the config; commands would read values of the wrong type (an override
    # `decay_steps: abc` is RA-C002, not arithmetic).
    if not any(f.severity == "error" for f in report.findings):
        bridge_recipe = bridge_recipe_name(base, recipe)
        bridge_args, gaps = bridge_command(base, config, report.findings) if bridge_recipe else ([], [])
        if gaps:
            notes.append(gaps_note(bridge_recipe, gaps))
        commands = render_commands(config_path, config, base, request, engine, recipe, tuple(gaps), bridge_args)
    advised = Recommendation(model=card, goal=goal, engine=engine, recipe=recipe, plan=result, best=best,
                             config=config, config_yaml=text, changes=changes, findings=report.findings,
                             commands=commands, notes=notes, layout_source=source)
    if emit == "automodel":
        automodel = as_automodel(advised, config_path, base)
        if automodel is None:
            raise Impossible(no_automodel_layout(advised))
        return automodel
    return advised


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
    if rounded > MAX_SEQ_LENGTH or (request.engine == "bundled" and positions and rounded > positions):
        return None
    result = plan(replace(request, seq_length=rounded))
    if result.best is not None:
        return rounded, None
    counts = gpus_that_fit(result)
    return (rounded, counts[0]) if counts else None


def _long_context_note(seq_length: int, engine: str, result: Plan) -> str:
    """What the planner made of context parallel for a long sequence: chosen, or why not."""
    from trainer.contract.capabilities import CAPABILITIES

    note = f"long context ({seq_length} tokens): context parallelism is considered"
    if engine != "megatron" and not CAPABILITIES.get("context_parallel"):
        return note + ", but the bundled trainer has none; activations grow with it"
    if result.best is None:
        return note
    if result.best.structure.cp > 1:
        return note + f" and chosen: cp_size {result.best.structure.cp} splits each sequence's activations"
    cp_rows = [row for row in result.layouts if row.structure.cp > 1]
    if not cp_rows:
        return note + ", but no CP size fits this world and sequence (2 x CP must divide it, CP the GPUs)"
    return note + f", but CP 1 ranks first (the plan lists {len(cp_rows)} CP layout(s) below it)"


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
    # divide it), and the search (service/plan/sizing.py) probes counts rather than trying them all.
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
