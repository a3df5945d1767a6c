"""Which layout `recommend` applies: measured and tuned beat estimated.

In this order:

1. **Tuned for exactly this.** A benchmark recipe of the index (NVIDIA tuned its layout for throughput with real
   runs) of this model, goal, GPU type and count, when the request keeps its sequence length, global batch
   and precision or leaves them unset: its layout, unless a rule rejects it or it does not fit.
2. **Library layout kept.** The base library recipe's own layout when that recipe is sized for this GPU type and
   count (sized to run, not tuned for speed): kept unless the planner's best is estimated faster by more than
   the estimates' own error band (``constants.LAYOUT_KEEP_BAND``), and then the answer says by how much.
3. **Planned.** The planner's best.

The convergence contract (global batch, schedule, sequence, precision) is the base recipe's whatever the case:
only the execution layer comes from here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from recipe_index.layouts import RecipeLayout, recipe_layout, recipes_on
from recipe_index.recipes import RecipeEntry
from service.estimate import constants as C
from service.facts import Layout
from service.plan.planner import plan_one
from service.plan.provenance import row_dict
from service.plan.types import Plan, PlannedLayout

TUNED, LIBRARY_KEPT, REPLANNED, PLANNED = "tuned", "library_kept", "replanned", "planned"


@dataclass(frozen=True)
class LayoutSource:
    case: str  # tuned | library_kept | replanned | planned
    recipe: Optional[str]  # the recipe whose layout was applied or weighed
    summary: str  # the sentence the answer shows
    band: Optional[float] = None  # the error band a library layout is kept within
    estimated_gain: Optional[float] = None  # planner's best over the recipe's layout, estimated (0.12: 12 % faster)

    def to_dict(self) -> dict:
        return {"case": self.case, "recipe": self.recipe, "summary": self.summary, "band": self.band,
                "estimated_gain": None if self.estimated_gain is None else round(self.estimated_gain, 4)}


def keep_band(result: Plan) -> float:
    """The estimates' measured error band for this kind of model (benchmarks/step_time_cv.py)."""
    return C.LAYOUT_KEEP_BAND["moe" if result.request.model.is_moe else "dense"]


def as_layout(recipe: RecipeLayout) -> Layout:
    return Layout(tp=recipe.tp, pp=recipe.pp, vp=recipe.vp, cp=recipe.cp, ep=recipe.ep, etp=recipe.etp,
                  sp=recipe.sp, micro_batch_size=recipe.micro_batch_size, recompute=recipe.recompute)


def tuned_recipe(result: Plan, given: frozenset[str]) -> Optional[tuple[RecipeEntry, RecipeLayout]]:
    """The benchmark recipe for exactly this request: model, goal, GPU type and count, and the sequence length,
    global batch and precision the request gives (those it leaves unset do not count); the one closest to the
    request's own values, then the plainest name (variants such as `_large_scale` or `_dev` come after)."""
    req = result.request
    candidates = []
    for entry, layout in recipes_on(req.model.id, req.hardware.name):
        if entry.kind != "benchmark" or entry.num_gpus != req.world_size or entry.mode != req.goal:
            continue
        same_seq = entry.seq_length == req.seq_length
        same_batch = layout.global_batch_size == req.global_batch_size
        same_precision = entry.precision == req.precision and (
            req.precision != "fp8" or req.fp8_recipe in (None, entry.precision_recipe))
        if ("seq_length" in given and not same_seq) or ("global_batch_size" in given and not same_batch) or (
                "precision" in given and not same_precision):
            continue
        candidates.append(((not same_seq, not same_batch, not same_precision, len(entry.name), entry.name),
                           entry, layout))
    if not candidates:
        return None
    _, entry, layout = min(candidates, key=lambda c: c[0])
    return entry, layout


def _row_or_reason(result: Plan, recipe: RecipeLayout) -> tuple[Optional[PlannedLayout], str]:
    """The recipe layout's row when it is valid and fits, else why not (the rule, or the memory shortfall)."""
    row, errors = plan_one(result, as_layout(recipe))
    if row is None:
        first = errors[0] if errors else None
        return None, (f"{first.code} ({first.key}): {first.message}" if first else
                      "no strategy of this engine runs it")
    if not row.fits:
        return None, f"it does not fit: {result.why_not_fitting(row)}"
    return row, ""


def _speed(row: PlannedLayout) -> float:
    return row.tokens_per_s or row.time.tokens_per_s_per_gpu


def choose_layout(result: Plan, recipe: Optional[RecipeEntry], given: frozenset[str]) -> tuple[
        PlannedLayout, LayoutSource]:
    """The layout recommend applies and why (module docstring). ``result.best`` must exist (a fitting row);
    ``recipe`` is the base recipe, ``given`` the request fields the user set."""
    best = result.best
    req = result.request
    moved = []
    tuned = tuned_recipe(result, given) if req.engine == "megatron" else None
    if tuned is not None:
        entry, layout = tuned
        row, reason = _row_or_reason(result, layout)
        if row is not None:
            return row, LayoutSource(TUNED, entry.name, f"tuned for exactly this: the layout of {entry.name} "
                                     f"({layout.describe()}), which NVIDIA tuned for throughput on "
                                     f"{entry.num_gpus} x {entry.hardware}")
        moved.append(f"the tuned layout of {entry.name} ({layout.describe()}) does not apply: {reason}")
    sized = (recipe is not None and recipe.kind == "library" and recipe.model == req.model.id
             and recipe.hardware == req.hardware.name and recipe.num_gpus == req.world_size)
    layout = recipe_layout(recipe) if sized else None
    if layout is not None:
        row, reason = _row_or_reason(result, layout)
        if row is not None:
            band, gain = keep_band(result), _speed(best) / _speed(row) - 1
            if gain <= band:
                versus = (f"the planner's best is estimated {gain:.0%} faster, within the estimates' {band:.0%} error "
                          "band" if gain > 0 else "no layout is estimated faster")
                return row, LayoutSource(LIBRARY_KEPT, recipe.name, f"library layout kept: {recipe.name}'s own layout "
                                         f"({layout.describe()}); {versus}", band, gain)
            return best, LayoutSource(REPLANNED, recipe.name, f"re-planned: the planner's best is estimated {gain:.0%} "
                                      f"faster than {recipe.name}'s own layout ({layout.describe()}), beyond the "
                                      f"estimates' {band:.0%} error band", band, gain)
        moved.append(f"{recipe.name}'s own layout ({layout.describe()}) does not apply: {reason}")
    if moved:
        return best, LayoutSource(REPLANNED, None, "re-planned: " + "; ".join(moved))
    return best, LayoutSource(PLANNED, None, "planned: no index recipe is sized for this model on "
                              f"{req.world_size} x {req.hardware.name}; the planner's estimates rank the layouts")


def alternatives(result: Plan, chosen: PlannedLayout, count: int = 3) -> list[dict]:
    """The planner's best other layouts, and those the index runs at other GPU counts on this GPU type, with
    their estimated gain over the chosen one (estimates, never measurements)."""
    base = _speed(chosen)
    picked = [row for row in result.fitting if row is not chosen][:count]
    keys = {row.key for row in picked} | {chosen.key}
    elsewhere = {layout.key for entry, layout in recipes_on(result.request.model.id, result.request.hardware.name)}
    picked += [row for row in result.fitting if row.key in elsewhere and row.key not in keys][:count]
    return [{**row_dict(result, row), "estimated_gain": round(_speed(row) / base - 1, 4)} for row in picked]
