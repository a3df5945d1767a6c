"""The runs store beside every plan: each row's own measurements (``measured_yours``), the ranking by measurement
where a layout was measured, and the estimate calibrated on the user's runs where a group holds enough of them.

``with_runs(plan, store)`` returns a new Plan (a cached plan is never changed) carrying a ``RunsView``; the
answers read it through ``service.plan.provenance``. With no store (none configured and no default file yet)
a plan is returned as it is, at no cost.
"""

from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import sqlalchemy as sa

from service.estimate.memory import model_shape
from service.plan.types import Plan, PlannedLayout, PlanRequest
from service.runs.calibration import MIN_RUNS, Report, evaluate, features, predict, samples
from service.runs.keys import PLANNER_ENGINE, group_key, request_key
from service.runs.schema import RunRecord
from service.runs.store import RunsStore, resolve_url, runs_table

MAX_FIT_RUNS = 400  # the newest runs of a group a calibration is fitted on (older ones weigh little anyway)
_open_stores: dict[str, RunsStore] = {}


def reading_store(url: Optional[str] = None) -> Optional[RunsStore]:
    """The store plan and recommend read: the one named (``--db`` / RECIPE_ADVISOR_DB) or the default file, or None
    when that is a SQLite file not yet created (planning creates nothing). One open store per URL per process."""
    resolved = resolve_url(url)
    if resolved.startswith("sqlite"):
        path = sa.engine.make_url(resolved).database
        if not path or not Path(path).is_file():
            return None
    if resolved not in _open_stores:
        _open_stores[resolved] = RunsStore(resolved)
    return _open_stores[resolved]


def writing_store(url: Optional[str] = None) -> RunsStore:
    """The store the service records into (created on first use)."""
    resolved = resolve_url(url)
    if resolved not in _open_stores:
        _open_stores[resolved] = RunsStore(resolved)
    return _open_stores[resolved]


def store_version(url: Optional[str] = None) -> Optional[tuple]:
    """(runs, newest id) of the store plan reads, None without one: part of a cached answer's key, so a new run
    shows in the next answer."""
    store = reading_store(url)
    return None if store is None else store.count_and_newest()


def row_key(row: PlannedLayout) -> tuple:
    lay = row.structure
    return (lay.tp, lay.pp, lay.vp_or_1, lay.cp, lay.ep, lay.etp, row.micro_batch_size, row.sharding)


def _engines(engine: str) -> list[str]:
    return [name for name, planner in PLANNER_ENGINE.items() if planner == engine]


def plan_request_key(request: PlanRequest) -> str:
    return request_key(request.model.id, request.hardware.name, request.world_size, request.goal,
                       request.seq_length, request.global_batch_size, request.fp8_recipe or request.precision,
                       request.engine)


def measured_summary(runs: list[RunRecord]) -> dict:
    """count, newest, median tokens/s/GPU and step time, spread ((max - min) / median), the runs' ids."""
    speeds = [r.measured_tokens_per_s_per_gpu for r in runs]
    steps = [r.measurement.step_time_s for r in runs]
    median = statistics.median(speeds)
    newest = max(runs, key=lambda r: r.id or 0)
    return {"count": len(runs), "newest": newest.recorded_at.isoformat() if newest.recorded_at else None,
            "tokens_per_s_per_gpu": round(median, 6), "step_time_s": round(statistics.median(steps), 6),
            "spread": round((max(speeds) - min(speeds)) / median, 4), "run_ids": sorted(r.id for r in runs)[-10:],
            "clusters": sorted({r.provenance.cluster or r.request.gpu_type for r in runs})}


@dataclass
class Calibration:
    group: str
    label: str  # the cluster label, else the GPU type
    engine: str
    release: Optional[str]
    report: Report

    @property
    def applies(self) -> bool:
        return self.report.theta is not None and self.report.runs >= MIN_RUNS

    def describe(self) -> str:
        r = self.report
        where = f"{self.label} ({self.engine}{', ' + self.release if self.release else ''})"
        if not self.applies:
            return (f"your runs: {r.runs} completed run(s) on {where}, fewer than the {MIN_RUNS} a calibration "
                    "needs: the estimates stand uncalibrated")
        text = f"calibrated on {r.runs} of your runs on {where}"
        if r.loo_error is not None:
            text += (f": median error {r.loo_error:.0%} leaving each layout out (uncalibrated "
                     f"{r.uncalibrated_error:.0%})")
        if r.pair_order is not None:
            text += f", {r.pair_order:.0%} of {r.pairs} layout pairs ordered as measured"
        return text


@dataclass
class RunsView:
    """What the store adds to one plan."""

    measured: dict[tuple, dict] = field(default_factory=dict)  # row key -> measured_summary
    calibration: Optional[Calibration] = None
    calibrated: dict[tuple, float] = field(default_factory=dict)  # row key -> calibrated tokens/s/GPU
    reranked: bool = False

    def row_fields(self, row: PlannedLayout) -> dict:
        """What a published row carries from the store (service.plan.provenance.row_dict)."""
        speed = self.calibrated.get(row_key(row))
        return {"measured_yours": self.measured.get(row_key(row)),
                "calibrated_tokens_per_s_per_gpu": None if speed is None else float(f"{speed:.6g}")}

    def describe(self) -> Optional[str]:
        parts = []
        if self.measured:
            parts.append(f"{len(self.measured)} layout(s) measured in your runs store rank by their measurement")
        if self.calibration is not None:
            parts.append(self.calibration.describe())
        return "; ".join(parts) or None


def _groups(store: RunsStore, request: PlanRequest) -> list[tuple]:
    """(cluster, release, engine, count, newest id) of the completed runs of your own on this GPU type."""
    c = runs_table.c
    stmt = (sa.select(c.cluster, c.release, c.engine, sa.func.count(), sa.func.max(c.id))
            .where(c.gpu_type == request.hardware.name, c.outcome == "completed", c.source == "yours",
                   c.engine.in_(_engines(request.engine)))
            .group_by(c.cluster, c.release, c.engine))
    with store.engine.connect() as conn:
        return [tuple(row) for row in conn.execute(stmt)]


def calibration_for(store: RunsStore, request: PlanRequest) -> Optional[Calibration]:
    """The calibration of the newest group (cluster label or GPU type, engine, release) of the request's GPU type
    and engine that holds runs of its kind (dense or MoE); fitted once per change of the group's runs."""
    groups = _groups(store, request)
    if not groups:
        return None
    cluster, release, _, _, _ = max(groups, key=lambda g: g[4])
    count = sum(g[3] for g in groups if (g[0], g[1]) == (cluster, release))
    newest = max(g[4] for g in groups if (g[0], g[1]) == (cluster, release))
    moe = model_shape(request.model).is_moe
    key = group_key(cluster, request.hardware.name, request.engine, release, moe)
    label = cluster or request.hardware.name
    cached = store.cached_calibration(key, count, newest)
    if cached is None:
        runs = []
        for engine in _engines(request.engine):
            runs += store.query(gpu_type=request.hardware.name, engine=engine, outcome="completed", source="yours",
                                cluster=cluster, release=release, limit=MAX_FIT_RUNS)
        from service.runs.estimate import is_moe

        mine = [r for r in runs if r.provenance.cluster == cluster and is_moe(r) == moe]
        mine = sorted(mine, key=lambda r: r.id or 0)[-MAX_FIT_RUNS:]
        cached = evaluate(samples(mine)).to_dict()
        store.keep_calibration(key, count, newest, cached)
    return Calibration(key, label, request.engine, release, Report.from_dict(cached))


def _measured_rows(store: RunsStore, result: Plan) -> dict[tuple, dict]:
    runs = [r for r in store.query(request_key=plan_request_key(result.request), outcome="completed",
                                   source="yours") if r.measured_tokens_per_s_per_gpu]
    by_key: dict[tuple, list[RunRecord]] = {}
    for run in runs:
        lay = run.layout
        key = (lay.tp, lay.pp, lay.vp or 1, lay.cp, lay.ep, lay.etp or 1, lay.micro_batch_size, lay.sharding)
        by_key.setdefault(key, []).append(run)
    return {key: measured_summary(group) for key, group in by_key.items()}


def _calibrated_speed(row: PlannedLayout, calibration: Calibration) -> Optional[float]:
    if not row.fits:
        return None
    step = predict(calibration.report.theta, features(row.time, row.grad_accumulation_steps))
    return row.estimators.time.tokens_per_s_per_gpu(step) if step > 0 else None


def _rank_speed(row: PlannedLayout, view: RunsView) -> float:
    key = row_key(row)
    if key in view.measured:
        return view.measured[key]["tokens_per_s_per_gpu"]
    return view.calibrated.get(key, row.tokens_per_s or 0.0)


def with_runs(result: Plan, store: Optional[RunsStore]) -> Plan:
    """``result`` with the store's measurements and calibration; measured rows rank by their measurement and
    unmeasured ones by the calibrated estimate (the planner's order among fitting rows is kept otherwise)."""
    if store is None or not result.layouts:
        return result
    view = RunsView(measured=_measured_rows(store, result), calibration=calibration_for(store, result.request))
    if view.calibration is not None and view.calibration.applies:
        for row in result.layouts:
            speed = _calibrated_speed(row, view.calibration)
            if speed is not None:
                view.calibrated[row_key(row)] = speed
    layouts = result.layouts
    if view.measured or view.calibrated:
        fitting = [row for row in layouts if row.fits]
        ordered = sorted(fitting, key=lambda row: -_rank_speed(row, view))
        view.reranked = ordered != fitting
        layouts = ordered + [row for row in layouts if not row.fits]
    why = result.why_first
    if view.reranked:
        first = layouts[0]
        why = ("measured fastest in your runs store" if row_key(first) in view.measured
               else "the fastest calibrated estimate" if view.calibrated else why)
    return dataclasses.replace(result, layouts=layouts, why_first=why, runs=view)
