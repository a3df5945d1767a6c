"""Which layout `recommend` applies: the candidate sources of ``service.plan.sources`` (tuned, library kept,
transferred, estimate), with the base recipe `recommend` chose, and the alternatives it lists beside it.

The convergence contract (global batch, schedule, sequence, precision) is the base recipe's whatever the case:
only the execution layer comes from here.
"""

from __future__ import annotations

from typing import Optional

from recipe_index.layouts import recipes_on
from recipe_index.recipes import RecipeEntry
from service.plan.provenance import row_dict
from service.plan.shown import shape_key
from service.plan.sources import LayoutSource, choose, speed
from service.plan.types import Plan, PlannedLayout


def choose_layout(result: Plan, recipe: Optional[RecipeEntry], given: frozenset[str]) -> tuple[
        PlannedLayout, LayoutSource]:
    """The layout recommend applies and why. ``result.best`` must exist (a fitting row); ``recipe`` is the base
    recipe, ``given`` the request fields the user set. The plan keeps the choice, so the rows the answer shows
    beside it (service.plan.shown) start from the same layout."""
    result.choice = choose(result, recipe, given)
    return result.choice.row, result.choice.source


def alternatives(result: Plan, chosen: PlannedLayout, count: int = 3) -> list[dict]:
    """The planner's best other layouts (distinct shapes), and those the index runs at other GPU counts on this GPU
    type, with their estimated gain over the chosen one (estimates, never measurements)."""
    base = speed(chosen)
    taken = {shape_key(chosen)}
    picked = []
    for row in result.fitting:
        if len(picked) < count and shape_key(row) not in taken:
            picked.append(row)
            taken.add(shape_key(row))
    keys = {row.key for row in picked} | {chosen.key}
    elsewhere = {layout.key for entry, layout in recipes_on(result.request.model.id, result.request.hardware.name)}
    picked += [row for row in result.fitting if row.key in elsewhere and row.key not in keys][:count]
    return [{**row_dict(result, row), "estimated_gain": round(speed(row) / base - 1, 4)} for row in picked]
