"""The runs store beside every plan: each row's own measurements (``measured.yours``), the ranking by measurement
where a layout was measured, and the estimate calibrated on the user's runs where a group holds enough of them.

``with_runs(plan, store)`` returns a new Plan (a cached plan is never changed) carrying a ``RunsView``; the
answers read it through ``service.plan.provenance``. With no store (none configured and no default file yet)
a plan is returned as it is, at no cost.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import sqlalchemy as sa

from service.plan.types import Plan, PlannedLayout, PlanRequest
from service.runs.calibration import features, predict
from service.runs.groups import Calibration, calibration_for
from service.runs.keys import request_key
from service.runs.store import RunsStore, resolve_url, runs_table

# The planner's first rows that are re-estimated with a calibration (a breakdown each); the rest keep their estimate
# and their place after them: a calibration corrects terms by tens of percent, not the planner's order of thousands.
MAX_CALIBRATED_ROWS = 64
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


def plan_request_key(request: PlanRequest) -> str:
    return request_key(request.model.id, request.hardware.name, request.world_size, request.goal,
                       request.seq_length, request.global_batch_size, request.fp8_recipe or request.precision,
                       request.engine)


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def measured_summary(ids: list[int], labels: list[str], steps: list[float], speeds: list[float],
                     newest: Optional[str]) -> dict:
    """count, newest, median tokens/s/GPU and step time, spread ((max - min) / median), the runs' ids and clusters,
    of one layout's runs (``ids``, their cluster ``labels``, step times and tokens/s/GPU; when the newest was
    recorded)."""
    median = _median(speeds)
    return {"count": len(ids), "newest": newest, "tokens_per_s_per_gpu": round(median, 6),
            "step_time_s": round(_median(steps), 6), "spread": round((max(speeds) - min(speeds)) / median, 4),
            "run_ids": sorted(ids)[-10:], "clusters": sorted(set(labels))}


@dataclass
class RunsView:
    """What the store adds to one plan."""

    measured: dict[tuple, dict] = field(default_factory=dict)  # row key -> measured_summary
    calibration: Optional[Calibration] = None
    calibrated: dict[tuple, float] = field(default_factory=dict)  # row key -> calibrated tokens/s/GPU
    reranked: bool = False

    def yours(self, row: PlannedLayout) -> Optional[dict]:
        """The row's measurements in the store (a row's ``measured.yours``), None when it holds none."""
        return self.measured.get(row_key(row))

    def calibrated_speed(self, row: PlannedLayout) -> Optional[float]:
        """The row's calibrated tokens/s/GPU as published (6 significant digits), None when not calibrated."""
        speed = self.calibrated.get(row_key(row))
        return None if speed is None else float(f"{speed:.6g}")

    def describe(self) -> Optional[str]:
        parts = []
        if self.measured:
            parts.append(f"{len(self.measured)} layout(s) measured in your runs store rank by their measurement")
        if self.calibration is not None:
            parts.append(self.calibration.describe())
        return "; ".join(parts) or None


# Statements plan runs on every call, built once (building an expression costs more than running it on SQLite).
_c = runs_table.c
MEASURED = (sa.select(_c.layout_key, sa.func.aggregate_strings(sa.cast(_c.id, sa.String), ","),
                      sa.func.aggregate_strings(sa.func.coalesce(_c.cluster, _c.gpu_type), "\x1f"),
                      sa.func.aggregate_strings(sa.cast(_c.step_time_s, sa.String), ","),
                      sa.func.aggregate_strings(sa.cast(_c.tokens_per_s_per_gpu, sa.String), ","),
                      sa.func.max(_c.recorded_at))
            .where(_c.request_key == sa.bindparam("request_key"), _c.outcome == "completed", _c.source == "yours",
                   _c.tokens_per_s_per_gpu.is_not(None))
            .group_by(_c.layout_key))


def _measured_rows(conn: sa.Connection, result: Plan) -> dict[tuple, dict]:
    """The request's completed runs of your own, by layout: aggregated in the database (one row per layout), from
    the columns plan needs (no record parsed; the covering index ix_runs_measured holds them all)."""
    measured = {}
    for layout_key, ids, labels, steps, speeds, newest in conn.execute(
            MEASURED, {"request_key": plan_request_key(result.request)}).all():
        measured[_layout_key_tuple(layout_key)] = measured_summary(
            [int(i) for i in ids.split(",")], labels.split("\x1f"), [float(t) for t in steps.split(",")],
            [float(v) for v in speeds.split(",")], newest.isoformat() if newest else None)
    return measured


def _layout_key_tuple(text: str) -> tuple:
    """The runs table's layout_key as plan's row_key: (tp, pp, vp, cp, ep, etp, micro batch, sharding)."""
    *sizes, sharding = text.split(",")
    return (*map(int, sizes), sharding)


def _calibrated_speed(row: PlannedLayout, calibration: Calibration) -> Optional[float]:
    if not row.fits:
        return None
    step = predict(calibration.report.theta, features(row.components, row.grad_accumulation_steps))
    return row.estimators.time.tokens_per_s_per_gpu(step) if step > 0 else None


def _reranked(fitting: list[PlannedLayout], view: RunsView) -> list[PlannedLayout]:
    """Fitting rows by what they rank by: their measurement, else their calibrated estimate, else (no calibration
    applies) their estimate; a row past MAX_CALIBRATED_ROWS of a calibrated plan keeps its place after them."""
    ranked, after = [], []
    for row in fitting:
        key = row_key(row)
        own = view.measured.get(key)
        speed = (own["tokens_per_s_per_gpu"] if own is not None else view.calibrated.get(key) if view.calibrated
                 else row.tokens_per_s or 0.0)
        if speed is None:
            after.append(row)
        else:
            ranked.append((speed, row))
    ranked.sort(key=lambda pair: -pair[0])  # stable: ties keep the planner's order
    return [row for _, row in ranked] + after


def with_runs(result: Plan, store: Optional[RunsStore]) -> Plan:
    """``result`` with the store's measurements and calibration; measured rows rank by their measurement and
    unmeasured ones by the calibrated estimate (the planner's first MAX_CALIBRATED_ROWS; the order among the
    other fitting rows is kept)."""
    if store is None or not result.layouts:
        return result
    with store.engine.connect() as conn:  # one connection, one read transaction for everything plan reads
        view = RunsView(measured=_measured_rows(conn, result), calibration=calibration_for(store, result.request, conn))
    if view.calibration is not None and view.calibration.applies:
        for row in result.layouts[:MAX_CALIBRATED_ROWS]:
            speed = _calibrated_speed(row, view.calibration)
            if speed is not None:
                view.calibrated[row_key(row)] = speed
    layouts = result.layouts
    if view.measured or view.calibrated:
        fitting = [row for row in layouts if row.fits]
        ordered = _reranked(fitting, view)
        view.reranked = ordered != fitting
        layouts = ordered + [row for row in layouts if not row.fits]
    why = result.why_first
    if view.reranked:
        first = layouts[0]
        why = ("measured fastest in your runs store" if row_key(first) in view.measured
               else "the fastest calibrated estimate" if view.calibrated else why)
    return dataclasses.replace(result, layouts=layouts, why_first=why, runs=view)
