"""Calibration of the step-time estimate on measured runs: a correction of its terms, not one scale factor.

A run's estimate is a sum of terms (service.estimate.steptime.StepTime): compute, pipeline bubble, the TP / CP /
EP / PP collectives, the data-parallel traffic, the optimizer step. On a given cluster and software each is off by
its own factor, and there are costs the model has no term for: a fixed cost per micro batch (kernel launches,
Python) and per step. The calibrated step time is

    t = θ_compute·compute + θ_bubble·bubble + θ_comm·(tp+cp+ep+pp) + θ_dp·dp + θ_opt·optimizer
        + θ_micro·micro_batches + θ_step

with θ >= 0, fitted by weighted least squares on the relative error (each run counts by its error in percent,
not in seconds), newer runs weighted more (half-life HALF_LIFE_DAYS), and a ridge (RIDGE) towards the
uncalibrated model scaled by the runs' median ratio, so that a few runs cannot throw a term far. Constants here
are chosen a priori, not fitted to any data set.

Reported with it, out of sample: the leave-one-layout-out median absolute error (every run of a layout held out,
the rest fitted, the layout predicted) beside the uncalibrated one, and the pair-order agreement: of the pairs of
layouts of one request whose measurements differ by more than twice the noise floor, the share the
held-out predictions order as measured.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from itertools import combinations
from typing import Iterable, Optional

from service.runs.estimate import run_components
from service.runs.fit import Stats, nonnegative_ridge
from service.runs.keys import layout_key, run_request_key
from service.runs.schema import RunRecord

FEATURES = ("compute", "bubble", "comm", "dp", "optimizer", "per_micro_batch", "per_step")
MIN_RUNS = 5  # completed runs of a group before its calibration applies
HALF_LIFE_DAYS = 90.0
RIDGE = 0.02  # of the runs' total weight, per coefficient, in units of that feature's typical share of a step


def features(components: tuple, micro_batches: int) -> list[float]:
    """The fit's features of a layout's step-time components (StepTimeModel.components)."""
    _, compute, bubble, tp, cp, ep, pp, dp, optimizer, moe_unattributed = components
    return [compute + moe_unattributed, bubble, tp + cp + ep + pp, dp, optimizer, float(micro_batches), 1.0]


def micro_batches(record: RunRecord) -> int:
    lay = record.layout
    return max(record.request.global_batch_size // (lay.micro_batch_size * lay.dp), 1)


@dataclass
class Sample:
    """One measured run as the fit sees it."""

    request: str
    layout: tuple
    x: list[float]
    measured_s: float
    estimate_s: float
    weight: float
    spread: Optional[float]  # (p90 - p10) / median of its own steps, when logged


def _age_weight(record: RunRecord, now: datetime) -> float:
    when = record.started_at or record.recorded_at
    if when is None:
        return 1.0
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return 0.5 ** (max((now - when).total_seconds(), 0.0) / 86400 / HALF_LIFE_DAYS)


def samples(records: Iterable[RunRecord], now: Optional[datetime] = None) -> list[Sample]:
    """The completed runs the planner can estimate, as fit samples."""
    now = now or datetime.now(timezone.utc)
    out = []
    for record in records:
        m = record.measurement
        if record.outcome != "completed" or not m.step_time_s:
            continue
        terms = run_components(record)
        if terms is None:
            continue
        spread = None
        if m.step_time_p10_s is not None and m.step_time_p90_s is not None:
            spread = (m.step_time_p90_s - m.step_time_p10_s) / m.step_time_s
        out.append(Sample(run_request_key(record), layout_key(record), features(terms, micro_batches(record)),
                          m.step_time_s, terms[0], _age_weight(record, now), spread))
    return out


def _relative_stats(group: list[Sample]) -> Stats:
    stats = Stats.zero(len(FEATURES))
    for s in group:
        stats.add_row([v / s.measured_s for v in s.x], 1.0, s.weight)
    return stats


def _prior_and_penalty(all_samples: list[Sample], total: Stats) -> tuple[list[float], list[float]]:
    scale = statistics.median(s.measured_s / s.estimate_s for s in all_samples)
    prior = [scale] * 5 + [0.0, 0.0]
    weight = max(total.weight, 1e-12)
    # a coefficient's penalty in its feature's own units: RIDGE x weight x the feature's mean square
    penalty = [RIDGE * max(total.gram[k][k], 1e-12 * weight) for k in range(len(FEATURES))]
    return prior, penalty


def fit(all_samples: list[Sample]) -> list[float]:
    stats = _relative_stats(all_samples)
    prior, penalty = _prior_and_penalty(all_samples, stats)
    return nonnegative_ridge(stats, prior, penalty)


def predict(theta: list[float], x: list[float]) -> float:
    return sum(t * v for t, v in zip(theta, x))


def _noise_floor(by_layout: dict[tuple, list[Sample]]) -> float:
    """The spread of repeats: the median over layouts run more than once of (max - min) / median; where no layout
    was repeated, the median of the runs' own p10-p90 spread; 0 when neither is known."""
    repeats = [(max(s.measured_s for s in runs) - min(s.measured_s for s in runs)) /
               statistics.median(s.measured_s for s in runs) for runs in by_layout.values() if len(runs) > 1]
    if repeats:
        return statistics.median(repeats)
    spreads = [s.spread for runs in by_layout.values() for s in runs if s.spread is not None]
    return statistics.median(spreads) if spreads else 0.0


@dataclass
class Report:
    """A fitted calibration and how well it does out of sample."""

    runs: int
    layouts: int
    theta: Optional[list[float]]
    loo_error: Optional[float] = None  # median |calibrated - measured| / measured, each layout held out
    uncalibrated_error: Optional[float] = None
    pair_order: Optional[float] = None  # share of distinguishable pairs ordered as measured (held out)
    uncalibrated_pair_order: Optional[float] = None
    pairs: int = 0
    noise_floor: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "Report":
        return cls(**{k: data.get(k) for k in cls.__dataclass_fields__ if k in data})


def _pair_agreement(by_request: dict[str, list[tuple]], floor: float) -> tuple[Optional[float], Optional[float], int]:
    agree = agree_raw = pairs = 0
    for rows in by_request.values():
        for (m1, p1, e1), (m2, p2, e2) in combinations(rows, 2):
            if abs(m1 - m2) / min(m1, m2) <= 2 * floor:
                continue
            pairs += 1
            agree += (p1 < p2) == (m1 < m2)
            agree_raw += (e1 < e2) == (m1 < m2)
    return (agree / pairs if pairs else None), (agree_raw / pairs if pairs else None), pairs


def evaluate(all_samples: list[Sample]) -> Report:
    """The fit on every sample, with its leave-one-layout-out error and pair order."""
    by_layout: dict[tuple, list[Sample]] = defaultdict(list)
    for s in all_samples:
        by_layout[(s.request, s.layout)].append(s)
    if len(all_samples) < MIN_RUNS or len(by_layout) < 2:
        return Report(len(all_samples), len(by_layout), None)
    total = _relative_stats(all_samples)
    prior, penalty = _prior_and_penalty(all_samples, total)
    theta = nonnegative_ridge(total, prior, penalty)
    errors, raw_errors = [], []
    by_request: dict[str, list[tuple]] = defaultdict(list)
    for (request, _), runs in by_layout.items():
        held_out = nonnegative_ridge(total - _relative_stats(runs), prior, penalty)
        measured = statistics.median(s.measured_s for s in runs)
        predicted = statistics.median(predict(held_out, s.x) for s in runs)
        estimate = runs[0].estimate_s
        errors.append(abs(predicted - measured) / measured)
        raw_errors.append(abs(estimate - measured) / measured)
        by_request[request].append((measured, predicted, estimate))
    floor = _noise_floor(by_layout)
    order, raw_order, pairs = _pair_agreement(by_request, floor)
    return Report(len(all_samples), len(by_layout), theta, statistics.median(errors), statistics.median(raw_errors),
                  order, raw_order, pairs, floor)
