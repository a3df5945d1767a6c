"""Which layouts `tune` measures, in the order it measures them.

1. The layout `recommend` applies (the index's tuned or library layout when one is sized for the request, else
   the planner's best): the estimate's first choice, which every measurement is compared with.
2. The planner's ranking, one row per distinct parallel shape (TP, PP, VP, CP, EP, ETP, SP) first: the shape
   moves the speed most, so the grid is covered broadly before it is refined.
3. Variants of those shapes, best estimate first: the plan's other micro batch sizes, the other recompute
   settings and data-parallel strategies the memory model fits and the rules accept, and (bundled engine) the
   compile fast path toggled.

Layouts the memory model says do not fit (beyond the card's memory less ``MEMORY_HEADROOM_FRACTION``, the
margin the planner keeps) or that a rule refuses are not run; each is listed with its reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from service.estimate import constants as C
from service.estimate.steptime import StepTimeModel
from service.facts import Layout
from service.plan.planner import facts_for
from service.plan.search_space import recomputes, shardings
from service.plan.types import Estimators, Plan, PlannedLayout, with_micro_batch
from service.validate.checks import check_layout

RECOMMENDED, SHAPE, MICRO_BATCH, RECOMPUTE, STRATEGY, FAST_PATH = (
    "recommended", "shape", "micro batch", "recompute", "strategy", "fast path")
COMPILE_KEY = "compile.enabled"


@dataclass(frozen=True)
class Candidate:
    """One layout to measure: a planned row (its estimates) and the config keys it sets beyond the layout."""

    row: PlannedLayout
    kind: str  # RECOMMENDED | SHAPE | MICRO_BATCH | RECOMPUTE | STRATEGY | FAST_PATH
    why: str
    fast_paths: tuple[tuple[str, Any], ...] = ()
    estimate: Optional[float] = None  # tokens/s/GPU where it differs from the row's (a fast-path variant)

    @property
    def estimated_tokens_per_s_per_gpu(self) -> float:
        return self.estimate if self.estimate is not None else (self.row.tokens_per_s or
                                                                self.row.time.tokens_per_s_per_gpu)

    @property
    def key(self) -> tuple:
        row = self.row
        return (*row.key, row.recompute, row.strategy, self.fast_paths)

    @property
    def label(self) -> str:
        return layout_label(self.row, self.fast_paths)


@dataclass(frozen=True)
class Skipped:
    label: str
    reason: str

    def to_dict(self) -> dict:
        return {"layout": self.label, "reason": self.reason}


@dataclass
class Candidates:
    trials: list[Candidate]
    skipped: list[Skipped] = field(default_factory=list)

    @property
    def first_choice(self) -> Candidate:
        return self.trials[0]


def layout_label(row: PlannedLayout, fast_paths: tuple = ()) -> str:
    s = row.structure
    parts = [f"TP{s.tp}", f"PP{s.pp}"] + ([f"VP{s.vp}"] if s.vp else []) + [f"CP{s.cp}", f"EP{s.ep}"]
    if s.etp != s.tp and s.ep > 1:
        parts.append(f"ETP{s.etp}")
    parts += [f"mbs{row.micro_batch_size}", f"rc:{row.recompute}", row.strategy]
    parts += [f"{key.split('.')[0]}:{'on' if value is True else 'off' if value is False else value}"
              for key, value in fast_paths]
    return " ".join(parts)


def shape_of(row: PlannedLayout) -> tuple:
    s = row.structure
    return (s.tp, s.pp, s.vp_or_1, s.cp, s.ep, s.etp, s.sp)


def variant_row(plan: Plan, row: PlannedLayout, *, recompute: Optional[str] = None,
                strategy: Optional[tuple[str, str]] = None) -> tuple[Optional[PlannedLayout], str]:
    """``row`` with another recompute or (sharding, strategy), estimated as the planner estimates its rows; or
    None and why it is not run (a rule refuses it, or the memory model says it does not fit)."""
    request, est = plan.request, row.estimators
    sharding, strategy_name = strategy or (row.sharding, row.strategy)
    layout = with_micro_batch(row.structure, row.micro_batch_size, recompute or row.recompute)
    errors = [f for f in check_layout(facts_for(request, layout, strategy_name)) if f.severity == "error"]
    if errors:
        return None, f"{errors[0].code}: {errors[0].message}"
    memory = est.memory.estimate(layout, sharding, row.grad_accumulation_steps)
    if memory.total > plan.usable_gib:
        return None, (f"needs {memory.total:.1f} GiB per GPU; {request.hardware.name} offers {plan.usable_gib:.1f} "
                      f"GiB after {C.MEMORY_HEADROOM_FRACTION:.0%} headroom")
    time = est.time.estimate(layout, sharding)
    return PlannedLayout(row.structure, row.micro_batch_size, layout.recompute, sharding, strategy_name, row.dp,
                         row.grad_accumulation_steps, True, row.findings, memory.total, time.tokens_per_s_per_gpu,
                         est), ""


def _compile_estimate(plan: Plan, row: PlannedLayout, compiled: bool) -> float:
    """Tokens/s/GPU of ``row`` with the bundled trainer's blocks compiled or not."""
    req, est = plan.request, row.estimators
    model = StepTimeModel(est.time.shape, req.hardware, world_size=req.world_size, seq_length=req.seq_length,
                          global_batch_size=req.global_batch_size, precision=req.precision, engine=req.engine,
                          grad_reduce_dtype=req.grad_reduce_dtype, peft=req.peft, compiled=compiled,
                          model_id=req.model.id)
    return model.estimate(row.layout, row.sharding).tokens_per_s_per_gpu


def _variants(plan: Plan, shape_rows: list[PlannedLayout], compiled: Optional[bool],
              skipped: list[Skipped]) -> list[Candidate]:
    """Micro batch, recompute, strategy and fast-path variants of the shapes' best rows."""
    request = plan.request
    out: list[Candidate] = []
    shapes = {shape_of(row) for row in shape_rows}
    firsts = {id(row) for row in shape_rows}
    for row in plan.fitting:
        if shape_of(row) in shapes and id(row) not in firsts:
            out.append(Candidate(row, MICRO_BATCH, f"micro batch {row.micro_batch_size} of shape "
                                                   f"{layout_label(row).rsplit(' mbs', 1)[0]}"))
    for row in shape_rows:
        for recompute in recomputes(request.engine, row.structure.ep):
            if recompute == row.recompute:
                continue
            varied, reason = variant_row(plan, row, recompute=recompute)
            if varied is None:
                skipped.append(Skipped(layout_label(row).replace(f"rc:{row.recompute}", f"rc:{recompute}"), reason))
            else:
                out.append(Candidate(varied, RECOMPUTE, f"recompute {recompute} instead of {row.recompute}"))
        for sharding, strategy in shardings(request.engine, request.peft):
            if strategy == row.strategy:
                continue
            varied, reason = variant_row(plan, row, strategy=(sharding, strategy))
            if varied is None:
                skipped.append(Skipped(layout_label(row).replace(row.strategy, strategy), reason))
            else:
                out.append(Candidate(varied, STRATEGY, f"{strategy} instead of {row.strategy}"))
    if compiled is not None:
        for row in shape_rows[:1]:
            toggled = not compiled
            out.append(Candidate(row, FAST_PATH, f"blocks {'compiled' if toggled else 'eager'}",
                                 ((COMPILE_KEY, toggled),), _compile_estimate(plan, row, toggled)))
    # Best estimate first; a fast-path variant last (its compile cost falls outside the timed steps).
    return sorted(out, key=lambda c: (c.kind == FAST_PATH, -c.estimated_tokens_per_s_per_gpu))


def _not_run(plan: Plan) -> list[Skipped]:
    """The plan's layouts that do not fit and the rules' rejections, each with its reason."""
    skipped = [Skipped(layout_label(row), plan.why_not_fitting(row)) for row in plan.layouts if not row.fits]
    for code, (finding, count) in sorted(plan.rejections.items()):
        skipped.append(Skipped(f"{count} parallel shape(s)", f"{code}: {finding.message}"))
    return skipped


def select_candidates(plan: Plan, first: PlannedLayout, first_why: str, *,
                      compiled: Optional[bool] = None) -> Candidates:
    """Every layout worth measuring, in the order to measure them (module docstring). ``first``: the layout
    recommend applies; ``compiled``: the config's compile.enabled for the bundled engine (None: no fast-path
    variant)."""
    skipped = _not_run(plan)
    trials = [Candidate(first, RECOMMENDED, first_why)]
    seen_shapes = {shape_of(first)}
    shape_rows = [first]
    for rank, row in enumerate(plan.fitting, 1):
        if shape_of(row) not in seen_shapes:
            seen_shapes.add(shape_of(row))
            shape_rows.append(row)
            trials.append(Candidate(row, SHAPE, f"planner rank {rank}, best of its parallel shape"))
    seen = {c.key for c in trials}
    for candidate in _variants(plan, shape_rows, compiled, skipped):
        if candidate.key not in seen:
            seen.add(candidate.key)
            trials.append(candidate)
    return Candidates(trials, skipped)


def estimators_of(plan: Plan) -> Estimators:
    return plan.layouts[0].estimators


def as_layout(candidate: Candidate) -> Layout:
    return candidate.row.layout
