"""Calibration of the step-time terms: it recovers a known correction, reports its out-of-sample error and pair
order, and on NVIDIA's published rows (grouped by release and GPU, standing in for users' clusters) it beats the
uncalibrated estimate, dense and MoE."""

from __future__ import annotations

import statistics
from collections import defaultdict

import pytest

from service.runs.calibration import MIN_RUNS, evaluate, features, micro_batches, samples
from service.runs.estimate import is_moe, run_components
from service.runs.fit import Stats, nonnegative_ridge
from service.runs.published import published_records
from service.runs.schema import RunRecord

LAYOUTS = [  # (tp, micro batch, sharding) on 2 CPU processes
    (1, 1, "full"), (1, 2, "full"), (1, 4, "full"), (1, 8, "full"), (1, 1, "none"), (1, 2, "none"), (1, 4, "none"),
    (1, 8, "none"), (2, 1, "full"), (2, 2, "full"), (2, 4, "full"), (2, 8, "full")]


def cpu_run(tp: int, mbs: int, sharding: str, step_s: float) -> RunRecord:
    return RunRecord.model_validate({
        "request": {"model": "tiny-llama", "gpu_type": "cpu", "gpus_per_node": 2, "seq_length": 64,
                    "global_batch_size": 16, "precision": "fp32"},
        "layout": {"tp": tp, "dp": 2 // tp, "micro_batch_size": mbs, "sharding": sharding},
        "measurement": {"step_time_s": step_s, "timed_steps": 10}})


def true_time(record: RunRecord) -> float:
    """A machine whose compute runs 30x slower than the model says, with 20 ms per micro batch and 50 ms a step."""
    x = features(run_components(record), micro_batches(record))
    return 30 * x[0] + 30 * x[2] + 30 * x[3] + 0.02 * x[5] + 0.05


def test_the_fit_recovers_a_known_correction_of_the_terms():
    runs = [cpu_run(tp, mbs, sharding, 1.0) for tp, mbs, sharding in LAYOUTS]
    runs = [r.model_copy(update={"measurement": r.measurement.model_copy(update={"step_time_s": true_time(r)})})
            for r in runs]
    report = evaluate(samples(runs))
    assert report.runs == 12 and report.layouts == 12
    assert report.loo_error < 0.03 < report.uncalibrated_error
    assert report.pair_order == 1.0 and report.pairs > 30


def test_fewer_runs_than_the_minimum_give_no_calibration():
    runs = [cpu_run(tp, mbs, sharding, 0.5) for tp, mbs, sharding in LAYOUTS[:MIN_RUNS - 1]]
    assert evaluate(samples(runs)).theta is None


def test_runs_that_did_not_complete_are_not_fitted():
    crashed = cpu_run(1, 1, "full", 1.0).model_copy(update={"outcome": "crashed"})
    assert samples([crashed]) == []


def test_the_fit_keeps_coefficients_non_negative():
    stats = Stats.zero(2)
    for x, y in (([1.0, 1.0], 1.0), ([2.0, 1.0], 1.5), ([3.0, 1.0], 1.9)):
        stats.add_row(x, y, 1.0)
    theta = nonnegative_ridge(stats, prior=[0.0, 0.0], penalty=[1e-9, 1e-9])
    assert theta[0] == pytest.approx(0.45, abs=0.01) and theta[1] == pytest.approx(0.57, abs=0.02)
    stats = Stats.zero(2)
    for x, y in (([1.0, 1.0], 1.0), ([2.0, 1.0], 0.5)):  # wants a negative slope
        stats.add_row(x, y, 1.0)
    assert min(nonnegative_ridge(stats, prior=[0.0, 0.0], penalty=[1e-9, 1e-9])) >= 0.0


@pytest.mark.slow
@pytest.mark.parametrize("moe", [False, True], ids=["dense", "moe"])
def test_published_groups_calibrated_on_their_own_rows_beat_the_uncalibrated_estimate(moe):
    groups = defaultdict(list)
    for record in published_records(estimate=False):
        if is_moe(record) == moe:
            groups[(record.provenance.release, record.request.gpu_type)].append(record)
    reports = [evaluate(samples(runs)) for runs in groups.values()]
    reports = [r for r in reports if r.theta is not None]
    assert len(reports) >= 8
    calibrated = statistics.median(r.loo_error for r in reports)
    uncalibrated = statistics.median(r.uncalibrated_error for r in reports)
    assert calibrated < uncalibrated
