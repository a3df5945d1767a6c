"""The rows a plan shows: distinct parallel shapes, the candidate sources' choice first.

A shape is (TP, PP, VP or not, CP, EP, ETP, sharding). Each row carries its shape's best variant (micro batch, VP,
recompute) and folds the others under it (``variants``), so the first rows are distinct layouts rather than one
layout five times; ``--top K`` counts shapes. The first rows are the policy's choice when a recipe layout won
(``service.plan.sources``: tuned, library or transferred, marked, with its own estimate and its place in the
estimate's ranking), then the nearest SHOWN_TRANSFERS transferred layouts, marked; then the estimate's ranking.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from service.estimate import constants as C
from service.plan.ranking import why_first
from service.plan.sources import ESTIMATE, SHOWN_TRANSFERS, TRANSFERRED, Choice, plan_choice, speed
from service.plan.types import Plan, PlannedLayout


def shape_key(row: PlannedLayout) -> tuple:
    lay = row.structure
    return (lay.tp, lay.pp, lay.vp_or_1 > 1, lay.cp, lay.ep, lay.etp, row.sharding)


@dataclass
class ShownRow:
    row: PlannedLayout
    source: str = ESTIMATE  # service.plan.sources.SOURCE_ORDER
    recipe: Optional[str] = None  # the recipe a marked row comes from
    note: Optional[str] = None  # e.g. "tuned for gb200 at 256 GPUs (...), adapted to 1024: DP 4 -> 16"
    estimate_rank: Optional[int] = None  # the shape's place in the estimate's ranking of shapes
    variants: list[PlannedLayout] = field(default_factory=list)


def shapes(result: Plan) -> list[list[PlannedLayout]]:
    """The plan's rows grouped by shape, in ranking order (each group's first row is its best)."""
    groups: dict[tuple, list[PlannedLayout]] = {}
    for row in result.layouts:
        groups.setdefault(shape_key(row), []).append(row)
    return list(groups.values())


def _pinned(choice: Optional[Choice]) -> list[ShownRow]:
    """The choice's row (a recipe's layout, marked, or the estimate's first), then the nearest transferred layouts,
    one per shape."""
    if choice is None:
        return []
    marked = choice.source.source != ESTIMATE
    pinned = [ShownRow(choice.row, choice.source.source, choice.source.recipe if marked else None,
                       choice.note if marked else None)]
    for transfer in choice.transfers:
        if sum(p.source == TRANSFERRED for p in pinned) >= SHOWN_TRANSFERS:
            break
        if all(shape_key(p.row) != shape_key(transfer.row) for p in pinned):
            pinned.append(ShownRow(transfer.row, TRANSFERRED, transfer.entry.name, transfer.note))
    return pinned


def shown_rows(result: Plan, top: Optional[int] = None) -> list[ShownRow]:
    """The rows as the answers show them (module docstring); ``top`` shapes of them, None: all."""
    groups = shapes(result)
    rank_of = {shape_key(group[0]): i for i, group in enumerate(groups, 1)}
    by_shape = {shape_key(group[0]): group for group in groups}
    pinned = _pinned(plan_choice(result))
    for shown in pinned:
        key = shape_key(shown.row)
        shown.estimate_rank = rank_of.get(key)
        shown.variants = [r for r in by_shape.get(key, []) if r.key != shown.row.key]
    taken = {shape_key(p.row) for p in pinned}
    rows = pinned + [ShownRow(group[0], estimate_rank=i, variants=group[1:])
                     for i, group in enumerate(groups, 1) if shape_key(group[0]) not in taken]
    return rows if top is None else rows[:top]


def why_first_shown(result: Plan, rows: list[ShownRow], numbered: bool = True) -> Optional[str]:
    """Why row 1 is first although a faster row is shown, about the rows shown only: the candidate source that put
    it there, or the estimates' tie band and the preference that decided. ``numbered``: name the faster row by its
    number (`plan`); `recommend` names it by its layout alone."""
    if not rows or not rows[0].row.fits:
        return None
    first = rows[0]
    runs = result.runs
    if getattr(runs, "reranked", False) and result.layouts and first.row is result.layouts[0]:
        return result.why_first  # the runs store put it first (service.runs.advice.with_runs says why)
    fitting = [(i, r.row) for i, r in enumerate(rows, 1) if r.row.fits]
    number, fastest = max(fitting, key=lambda pair: speed(pair[1]))
    if speed(fastest) <= speed(first.row):
        return None
    if first.source != ESTIMATE:
        choice = result.choice
        gain = speed(fastest) / speed(first.row) - 1
        band = f"{choice.source.band:.0%}" if choice is not None and choice.source.band is not None else "its"
        return (f"the {first.source} layout ({first.recipe}), first although row {number} is estimated {gain:.1%} "
                f"faster ({speed(fastest):,.0f} vs {speed(first.row):,.0f} tokens/s/GPU): the estimates' error "
                f"band for this model ({band}) is wider than the gain, and a layout tuned or sized by hand wins "
                "within it")
    request = result.request
    sentence = why_first([r.row for r in rows], request.seq_length > C.LONG_CONTEXT,
                         request.hardware.memory_gib * C.MEMORY_COMFORT_FRACTION,
                         layers=rows[0].row.estimators.memory.shape.layers,
                         unlaunchable=rows[0].row.estimators.needs_layout_string, fsdp_last=request.fsdp_last)
    if sentence is None or not numbered:
        return sentence
    return sentence.replace("first although ", f"first although row {number}, ", 1)
