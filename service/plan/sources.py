"""Where the advised layout comes from: the candidate sources, and the order in which they win.

``SOURCE_ORDER`` is that order, in one place; ``choose`` applies it for `recommend` and for `plan`'s first row:

1. **measured**: a layout the user measured on this request ranks by its measurement (the runs store adds these
   rows; until it does, no row has this source).
2. **tuned**: an index benchmark recipe of this model, goal, GPU type and count (NVIDIA tuned its layout with real
   runs), when the request keeps its sequence length, global batch and precision or leaves them unset; applied
   unless a rule rejects it or it does not fit.
3. **library**: the base library recipe's own layout when it is sized for this GPU type and count; kept unless the
   planner's best is estimated faster by more than the family's error band (``service.estimate.bands``).
4. **transferred** (MoE): the nearest layout of this model's own recipes on other hardware or GPU counts, adapted
   (``service.plan.transfer``); kept unless the planner's best is estimated faster by more than the band. For dense
   models the estimate's ranking stays first and the transferred layouts join the shown rows.
5. **estimate**: the planner's first row.

The estimates rank layouts well for dense models (their median error is ~10 %) and poorly for MoE ones (~25 %,
56 % for DeepSeek-V3), while an expert's layout for the same model elsewhere carries over: hence the order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from recipe_index.layouts import RecipeLayout, recipe_layout, recipes_on
from recipe_index.recipes import RecipeEntry, list_recipes
from service.estimate.bands import ErrorBand, error_band
from service.facts import Layout
from service.plan.provenance import precision_token
from service.plan.transfer import Transfer, transfers
from service.plan.types import Plan, PlannedLayout

MEASURED, TUNED, LIBRARY, TRANSFERRED, ESTIMATE = "measured", "tuned", "library", "transferred", "estimate"
SOURCE_ORDER = (MEASURED, TUNED, LIBRARY, TRANSFERRED, ESTIMATE)
# The answer's case (layout_source.case): which source won, or that a recipe layout was weighed and replaced.
MEASURED_CASE, TUNED_CASE, LIBRARY_KEPT, TRANSFERRED_CASE, REPLANNED, PLANNED = (
    "measured", "tuned", "library_kept", "transferred", "replanned", "planned")
SHOWN_TRANSFERS = 2  # transferred layouts `plan` shows among its first rows, marked
# The fields whose value a tuned recipe must match when the request sets them.
CONTRACT_FIELDS = frozenset({"seq_length", "global_batch_size", "precision"})


@dataclass(frozen=True)
class LayoutSource:
    case: str  # tuned | library_kept | transferred | replanned | planned
    recipe: Optional[str]  # the recipe whose layout was applied or weighed
    summary: str  # the sentence the answer shows
    band: Optional[float] = None  # the error band a recipe layout is kept within
    estimated_gain: Optional[float] = None  # planner's best over the recipe's layout, estimated (0.12: 12 % faster)
    band_basis: Optional[str] = None  # which band applied, in words

    @property
    def source(self) -> str:
        """The row source of the chosen layout (SOURCE_ORDER)."""
        return {MEASURED_CASE: MEASURED, TUNED_CASE: TUNED, LIBRARY_KEPT: LIBRARY,
                TRANSFERRED_CASE: TRANSFERRED}.get(self.case, ESTIMATE)

    def to_dict(self) -> dict:
        return {"case": self.case, "recipe": self.recipe, "summary": self.summary, "band": self.band,
                "band_basis": self.band_basis,
                "estimated_gain": None if self.estimated_gain is None else round(self.estimated_gain, 4)}


@dataclass
class Choice:
    row: PlannedLayout  # the layout the policy applies
    source: LayoutSource
    transfers: list[Transfer] = field(default_factory=list)  # fitting transferred layouts, nearest first
    note: Optional[str] = None  # the chosen row's own source note (a transfer's adaptation)


def as_layout(recipe: RecipeLayout) -> Layout:
    return Layout(tp=recipe.tp, pp=recipe.pp, vp=recipe.vp, cp=recipe.cp, ep=recipe.ep, etp=recipe.etp,
                  sp=recipe.sp, micro_batch_size=recipe.micro_batch_size, recompute=recipe.recompute)


def band_for(result: Plan) -> ErrorBand:
    card = result.request.model
    return error_band(card.family, card.is_moe)


def tuned_recipe(result: Plan, given: frozenset[str], exclude: frozenset[str] = frozenset()
                 ) -> Optional[tuple[RecipeEntry, RecipeLayout]]:
    """The benchmark recipe for exactly this request: model, goal, GPU type and count, and the sequence length,
    global batch and precision the request gives (those it leaves unset do not count); the one closest to the
    request's own values, then the plainest name (variants such as `_large_scale` or `_dev` come after)."""
    req = result.request
    candidates = []
    for entry, layout in recipes_on(req.model.id, req.hardware.name):
        if (entry.kind != "benchmark" or entry.num_gpus != req.world_size or entry.mode != req.goal
                or entry.name in exclude):
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


def sized_library(result: Plan, exclude: frozenset[str] = frozenset()) -> Optional[RecipeEntry]:
    """The library recipe of this model and goal sized for this GPU type and count (the one `recommend` starts
    from when the request names no other): the same sequence length first, then the plainest name."""
    req = result.request
    found = [e for e in list_recipes(hardware=req.hardware.name, num_gpus=req.world_size, kind="library", mode=req.goal)
             if e.model == req.model.id and e.name not in exclude]
    return min(found, key=lambda e: (e.seq_length != req.seq_length, len(e.name), e.name), default=None)


def _row_or_reason(result: Plan, layout: Layout) -> tuple[Optional[PlannedLayout], str]:
    """The layout's row when it is valid and fits, else why not (the rule, or the memory shortfall)."""
    from service.plan.planner import plan_one  # the planner's module imports the plan types this module uses

    row, errors = plan_one(result, layout)
    if row is None:
        first = errors[0] if errors else None
        return None, (f"{first.code} ({first.key}): {first.message}" if first else
                      "no strategy of this engine runs it")
    if not row.fits:
        return None, f"it does not fit: {result.why_not_fitting(row)}"
    return row, ""


def speed(row: PlannedLayout) -> float:
    return row.tokens_per_s or row.time.tokens_per_s_per_gpu


def _versus(best: PlannedLayout, row: PlannedLayout, gain: float, band: ErrorBand) -> str:
    """The planner's best against a kept layout, in words, with both estimates and the band that applied."""
    if gain <= 0:
        return f"estimated {speed(row):,.0f} tokens/s/GPU; no layout is estimated faster"
    return (f"estimated {speed(row):,.0f} tokens/s/GPU; the planner's best ({describe(best)}) is estimated "
            f"{gain:.0%} faster ({speed(best):,.0f}), within {band.basis}, {band.value:.0%}")


def describe(row: PlannedLayout) -> str:
    lay = row.layout
    vp = f" VP{lay.vp}" if (lay.vp or 1) > 1 else ""
    etp = f" ETP{lay.etp}" if lay.etp > 1 else ""
    return f"TP{lay.tp} PP{lay.pp}{vp} CP{lay.cp} EP{lay.ep}{etp} MBS{lay.micro_batch_size}"


def _weighed(result: Plan, row: PlannedLayout, kept_case: str, what: str, shape: str, recipe: str,
             band: ErrorBand) -> tuple[PlannedLayout, LayoutSource]:
    """A recipe's layout against the planner's best: kept within the band, else replaced, saying by how much."""
    best = result.best
    gain = speed(best) / speed(row) - 1
    if gain <= band.value:
        return row, LayoutSource(kept_case, recipe, f"{what} ({shape}); {_versus(best, row, gain, band)}", band.value,
                                 gain, band.basis)
    return best, LayoutSource(REPLANNED, recipe, f"re-planned: the planner's best ({describe(best)}, "
                              f"{speed(best):,.0f} tokens/s/GPU) is estimated {gain:.0%} faster than {what} "
                              f"({shape}, {speed(row):,.0f}), beyond {band.basis}, {band.value:.0%}", band.value, gain,
                              band.basis)


def choose(result: Plan, library: Optional[RecipeEntry], given: frozenset[str],
           exclude: frozenset[str] = frozenset()) -> Choice:
    """The layout the sources give (module docstring) and why. ``result.best`` must exist (a fitting row);
    ``library`` is the base recipe (used when it is a library recipe sized for this request), ``given`` the request
    fields the user set, ``exclude`` recipes to leave out (the benchmark's held-out one)."""
    req = result.request
    band = band_for(result)
    found = transfers(result, precision_token(req), exclude) if req.engine == "megatron" else []
    measured = _measured_first(result)
    if measured is not None:
        return Choice(result.best, measured, found)
    moved = []
    tuned = tuned_recipe(result, given, exclude) if req.engine == "megatron" else None
    if tuned is not None:
        entry, layout = tuned
        row, reason = _row_or_reason(result, as_layout(layout))
        if row is not None:
            return Choice(row, LayoutSource(TUNED_CASE, entry.name, f"tuned for exactly this: the layout of "
                                            f"{entry.name} ({layout.describe()}), which NVIDIA tuned for throughput "
                                            f"on {entry.num_gpus} x {entry.hardware}, estimated {speed(row):,.0f} "
                                            "tokens/s/GPU"), found)
        moved.append(f"the tuned layout of {entry.name} ({layout.describe()}) does not apply: {reason}")
    sized = (library is not None and library.kind == "library" and library.model == req.model.id
             and library.hardware == req.hardware.name and library.num_gpus == req.world_size
             and library.name not in exclude)
    layout = recipe_layout(library) if sized else None
    if layout is not None:
        row, reason = _row_or_reason(result, as_layout(layout))
        if row is not None:
            chosen, source = _weighed(result, row, LIBRARY_KEPT, f"{library.name}'s own layout", layout.describe(),
                                      library.name, band)
            if source.case == LIBRARY_KEPT:
                source = LayoutSource(LIBRARY_KEPT, library.name, "library layout kept: " + source.summary,
                                      source.band, source.estimated_gain, source.band_basis)
            return Choice(chosen, source, found)
        moved.append(f"{library.name}'s own layout ({layout.describe()}) does not apply: {reason}")
    if req.model.is_moe and found:
        nearest = found[0]
        chosen, source = _weighed(result, nearest.row, TRANSFERRED_CASE, f"the layout {nearest.note}",
                                  describe(nearest.row), nearest.entry.name, band)
        if source.case == TRANSFERRED_CASE:
            summary = "; ".join([*moved, "no layout was tuned for exactly this: " + source.summary])
            return Choice(chosen, LayoutSource(TRANSFERRED_CASE, nearest.entry.name, summary, source.band,
                                               source.estimated_gain, source.band_basis), found, nearest.note)
        moved.append(source.summary.removeprefix("re-planned: "))
        return Choice(chosen, LayoutSource(REPLANNED, nearest.entry.name, "re-planned: " + "; ".join(moved),
                                           source.band, source.estimated_gain, source.band_basis), found)
    if moved:
        return Choice(result.best, LayoutSource(REPLANNED, None, "re-planned: " + "; ".join(moved)), found)
    return Choice(result.best, LayoutSource(PLANNED, None, _planned_summary(result, library, found)), found)


def _measured_first(result: Plan) -> Optional[LayoutSource]:
    """The runs store's source (SOURCE_ORDER's first): the first row when the user measured it on this request
    (service.runs.advice ranks measured rows by their measurement)."""
    runs = result.runs
    if runs is None or not getattr(runs, "measured", None) or result.best is None:
        return None
    from service.runs.advice import row_key  # the runs store sits above the planner

    if row_key(result.best) not in runs.measured:
        return None
    return LayoutSource(MEASURED_CASE, None, f"measured fastest in your runs store: {describe(result.best)}")


def _planned_summary(result: Plan, recipe: Optional[RecipeEntry], found: list[Transfer]) -> str:
    req = result.request
    where = f"{req.world_size} x {req.hardware.name}"
    if recipe is not None and recipe.model == req.model.id and (recipe.hardware, recipe.num_gpus) == (
            req.hardware.name, req.world_size):
        why = (f"{recipe.name} is sized for {where}, but it is a {recipe.kind} recipe: only the layouts NVIDIA tuned "
               "(benchmark) or sized (library) are weighed against the estimates")
    else:
        why = f"no tuned or library recipe is sized for this model on {where}"
    ranks = "the planner's estimates rank the layouts"
    if found and not req.model.is_moe:
        ranks += " (first for a dense model; `plan` shows this model's layouts from other hardware and sizes beside)"
    return f"planned: {why}; {ranks}"


def plan_choice(result: Plan) -> Optional[Choice]:
    """The policy's choice for a plan as `plan` shows it (its first row), computed once per plan: the library recipe
    sized for the request as the base, the request's sequence, batch and precision as given."""
    if result.best is None:
        return None
    if result.choice is None:
        result.choice = choose(result, sized_library(result), CONTRACT_FIELDS & result.request.given)
    return result.choice
