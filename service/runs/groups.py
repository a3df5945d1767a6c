"""Which calibration a plan uses: the group of the user's newest run on the request's GPU type and engine (cluster
label, else GPU type; engine; software release), its runs of the request's kind (dense or MoE), and within them
the runs of the request's model family when the family has enough of them.

A family (the model card's ``family``: Llama 3, Qwen3 MoE, ...) with at least MIN_RUNS completed runs in the group,
over at least two layouts, gets a fit of its own, and the plan of any of its models uses it; otherwise the plan
uses the fit of every run of its kind in the group. Both fits are kept in the store and refitted only when the
group's runs change. The answer's ``calibration`` names the one that applied.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import sqlalchemy as sa

from recipe_index.models import bundled_models
from service.estimate.memory import model_shape
from service.plan.types import PlanRequest
from service.runs.calibration import MIN_RUNS, Report, evaluate, samples
from service.runs.keys import PLANNER_ENGINE, group_key
from service.runs.schema import RunRecord
from service.runs.store import RunsStore, record_from_row, runs_table

MAX_FIT_RUNS = 400  # the newest runs a calibration is fitted on (older ones weigh little anyway)


def _percent(share: float) -> str:
    return f"{share * 100:.0f} %"


def _applies(report: Report) -> bool:
    return report.theta is not None and report.runs >= MIN_RUNS


@dataclass
class Calibration:
    group: str
    label: str  # the cluster label, else the GPU type
    engine: str
    release: Optional[str]
    report: Report  # the fit that applies: the family's own when it has enough runs, else the dense / MoE group's
    kind: str = "dense"  # dense or MoE
    family: Optional[str] = None  # the request's model family
    family_report: Optional[Report] = None  # the family's own fit (None without a family)

    @property
    def applies(self) -> bool:
        return _applies(self.report)

    @property
    def by_family(self) -> bool:
        return self.family_report is not None and self.report is self.family_report

    def describe(self) -> str:
        r = self.report
        where = f"{self.label} ({self.engine}{', ' + self.release if self.release else ''})"
        if not self.applies:
            why = (f"fewer than the {MIN_RUNS} a calibration needs" if r.runs < MIN_RUNS
                   else "all of one layout, and a calibration needs two")
            return f"your runs: {r.runs} completed run(s) on {where}, {why}: the estimates stand uncalibrated"
        whose = f"of your runs of the {self.family} family" if self.by_family else "of your runs"
        text = f"calibrated on {r.runs} {whose} on {where}"
        if r.loo_error is not None:
            text += (f": median error {_percent(r.loo_error)} leaving each layout out (uncalibrated "
                     f"{_percent(r.uncalibrated_error)})")
        if r.pair_order is not None:
            text += f", {_percent(r.pair_order)} of {r.pairs} layout pairs ordered as measured"
        if not self.by_family and self.family_report is not None:
            text += f"; fitted on all your {self.kind} runs: {self._family_shortfall()}"
        return text

    def _family_shortfall(self) -> str:
        runs = self.family_report.runs
        if runs < MIN_RUNS:
            return f"the {self.family} family has {runs} of the {MIN_RUNS} runs a fit of its own needs"
        return f"the {self.family} family's {runs} runs are all of one layout, and a fit of its own needs two"


def _engines(engine: str) -> list[str]:
    return [name for name, planner in PLANNER_ENGINE.items() if planner == engine]


def _models(moe: bool, family: Optional[str] = None) -> list[str]:
    """The bundled models of a kind (dense or MoE), of one family when given: the runs a fit reads."""
    return [card.id for card in bundled_models()
            if bool(card.num_experts) == moe and (family is None or card.family == family)]


# Statements plan runs on every call, built once (building an expression costs more than running it on SQLite).
_c = runs_table.c
_MINE = (_c.gpu_type == sa.bindparam("gpu_type"), _c.engine.in_(sa.bindparam("engines", expanding=True)),
         _c.outcome == "completed", _c.source == "yours")


def _in_group(no_cluster: bool, no_release: bool) -> tuple:
    """Your completed runs of one group; SQL's = never matches NULL, hence a statement per (no cluster, no release)."""
    return (*_MINE, _c.cluster.is_(None) if no_cluster else _c.cluster == sa.bindparam("cluster"),
            _c.release.is_(None) if no_release else _c.release == sa.bindparam("release"))


# Each group of your runs on a GPU type and engine, the newest first: its cluster, release, runs and newest id (one
# pass over the covering index ix_runs_groups).
NEWEST_GROUP = (sa.select(_c.cluster, _c.release, sa.func.count(), sa.func.max(_c.id)).where(*_MINE)
                .group_by(_c.cluster, _c.release).order_by(sa.func.max(_c.id).desc()).limit(1))
FIT_RUNS = {(no_cluster, no_release): sa.select(_c.id, _c.record).where(
    *_in_group(no_cluster, no_release), _c.model.in_(sa.bindparam("models", expanding=True)))
    .order_by(_c.id.desc()).limit(MAX_FIT_RUNS) for no_cluster in (False, True) for no_release in (False, True)}


def _newest_group(conn: sa.Connection, request: PlanRequest) -> Optional[tuple]:
    """(cluster, release, runs, newest id) of the group of your newest completed run on this GPU type and engine."""
    found = conn.execute(NEWEST_GROUP, {"gpu_type": request.hardware.name, "engines": _engines(request.engine)}).first()
    return None if found is None else tuple(found)


def _fit_runs(conn: sa.Connection, request: PlanRequest, cluster: Optional[str], release: Optional[str],
              models: list[str]) -> list[RunRecord]:
    """The group's newest MAX_FIT_RUNS completed runs of your own of these models, oldest first."""
    found = conn.execute(FIT_RUNS[(cluster is None, release is None)], {
        "gpu_type": request.hardware.name, "engines": _engines(request.engine), "cluster": cluster,
        "release": release, "models": models}).all()
    return [record_from_row(row) for row in reversed(found)]


def calibration_for(store: RunsStore, request: PlanRequest, conn: Optional[sa.Connection] = None
                    ) -> Optional[Calibration]:
    """The calibration of the group of your newest run on the request's GPU type and engine, for the request's
    kind (dense or MoE), or its model family's own where that has enough runs; fitted once per change of the
    group's runs (one read of the kept fits otherwise)."""
    if conn is None:
        with store.engine.connect() as own:
            return calibration_for(store, request, own)
    found = _newest_group(conn, request)
    if found is None:
        return None
    cluster, release, count, newest = found
    moe = model_shape(request.model).is_moe
    kind_key = group_key(cluster, request.hardware.name, request.engine, release, moe)
    family = request.model.family
    fits = {kind_key: None}  # group key -> the family its fit reads (None: every model of the kind)
    family_key = f"{kind_key}|{family}" if family else None
    if family_key:
        fits[family_key] = family
    kept = store.cached_calibrations(list(fits), count, newest, conn)
    for key, of_family in fits.items():
        if key not in kept:
            runs = _fit_runs(conn, request, cluster, release, _models(moe, of_family))
            kept[key] = evaluate(samples(runs)).to_dict()
            store.keep_calibration(key, count, newest, kept[key])
    kind_report = Report.from_dict(kept[kind_key])
    family_report = Report.from_dict(kept[family_key]) if family_key else None
    applied = family_report if family_report is not None and _applies(family_report) else kind_report
    return Calibration(family_key if applied is family_report else kind_key, cluster or request.hardware.name,
                       request.engine, release, applied, "MoE" if moe else "dense", family, family_report)
