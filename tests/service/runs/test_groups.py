"""Which calibration a plan uses: a model family with enough runs in the group gets its own fit, else the plan uses
its dense / MoE group's; the answer's ``calibration`` says which, in the words the issue gives."""

from __future__ import annotations

import re

import pytest

from service.plan.planner import make_request, plan
from service.plan.report import plan_json
from service.runs.advice import with_runs
from service.runs.calibration import features, micro_batches
from service.runs.estimate import run_components
from service.runs.groups import Calibration, calibration_for
from service.runs.schema import RunRecord
from service.runs.store import RunsStore
from tests.service.runs.test_calibration import LAYOUTS

REQUEST = dict(goal="pretrain", seq_length=64, global_batch_size=16, precision="fp32", engine="bundled")
# "calibrated on 14 of your runs on h100 (megatron): median error 6 %", the family named where its own fit applies
SHAPE = re.compile(r"calibrated on \d+ of your runs( of the [^(]+ family)? on \S+ \([a-z]+(, [^)]+)?\): "
                   r"median error \d+ %")


@pytest.fixture
def store(store_url):
    return RunsStore(store_url)


# How a machine runs a step: (compute and communication slower than the model says, s per micro batch, s a step)
SLOW, FAST = (30.0, 0.02, 0.05), (3.0, 0.002, 0.005)


def machine_time(x: list[float], machine: tuple) -> float:
    scale, per_micro_batch, per_step = machine
    return scale * (x[0] + x[2] + x[3]) + per_micro_batch * x[5] + per_step


def slowed(record: RunRecord, machine: tuple) -> RunRecord:
    """The run as ``machine`` measures it."""
    step = machine_time(features(run_components(record), micro_batches(record)), machine)
    return record.model_copy(update={"measurement": record.measurement.model_copy(update={"step_time_s": step})})


def add_runs(store: RunsStore, model: str, machine: tuple, layouts=LAYOUTS) -> None:
    for tp, mbs, sharding in layouts:
        store.add(slowed(RunRecord.model_validate({
            "request": {"model": model, "gpu_type": "cpu", "gpus_per_node": 2, **{
                k: REQUEST[k] for k in ("goal", "seq_length", "global_batch_size", "precision")}},
            "layout": {"tp": tp, "dp": 2 // tp, "micro_batch_size": mbs, "sharding": sharding},
            "measurement": {"step_time_s": 1.0, "timed_steps": 10}}), machine))


def calibrated_errors(model: str, store: RunsStore, machine: tuple) -> tuple[str, list[float]]:
    """The plan's calibration text, and the error of each measured row's calibrated estimate against the
    machine's own step time (the layouts measured pin every term the machine has)."""
    result = with_runs(plan(make_request(model, 2, "cpu", **REQUEST)), store)
    errors = []
    for row in result.layouts:
        speed = result.runs.calibrated_speed(row)
        if speed is not None and result.runs.yours(row):
            truth = machine_time(features(row.components, row.grad_accumulation_steps), machine)
            errors.append(abs(row.estimators.time.tokens_per_s_per_gpu(truth) / speed - 1))
    return plan_json(result, 3)["calibration"], errors


def result_speeds(model: str, store: RunsStore) -> list:
    result = with_runs(plan(make_request(model, 2, "cpu", **REQUEST)), store)
    return [result.runs.calibrated_speed(row) for row in result.layouts]


def test_a_family_with_enough_runs_gets_its_own_fit(store):
    add_runs(store, "qwen25-500m", FAST)  # one cluster and software, yet the families run 10x apart
    add_runs(store, "tiny-llama", SLOW)
    text, errors = calibrated_errors("tiny-llama", store, SLOW)
    assert SHAPE.search(text)
    assert f"calibrated on {len(LAYOUTS)} of your runs of the tiny family on cpu (bundled)" in text
    assert errors and max(errors) < 0.03  # its own terms: the fit of both families is off by 5 % (10 % on Qwen2.5)
    text, errors = calibrated_errors("qwen25-500m", store, FAST)
    assert f"calibrated on {len(LAYOUTS)} of your runs of the Qwen2.5 family on cpu (bundled)" in text
    assert errors and max(errors) < 0.03


def test_a_family_with_too_few_runs_uses_its_dense_group(store):
    add_runs(store, "qwen25-500m", SLOW)
    add_runs(store, "tiny-llama", SLOW, LAYOUTS[:3])
    text, errors = calibrated_errors("tiny-llama", store, SLOW)
    assert SHAPE.search(text) and f"calibrated on {len(LAYOUTS) + 3} of your runs on cpu (bundled)" in text
    assert "fitted on all your dense runs: the tiny family has 3 of the 5 runs a fit of its own needs" in text
    assert errors and max(errors) < 0.05  # one machine for both families: the group's fit holds for each


def test_runs_of_the_other_kind_never_count(store):
    add_runs(store, "tiny-moe", SLOW)  # the tiny family, but MoE
    add_runs(store, "tiny-llama", SLOW, LAYOUTS[:3])
    text, _ = calibrated_errors("tiny-llama", store, SLOW)
    assert "your runs: 3 completed run(s) on cpu (bundled), fewer than the 5 a calibration needs" in text
    assert not any(result_speeds("tiny-llama", store))
    calibration = calibration_for(store, make_request("tiny-moe", 2, "cpu", **REQUEST))
    assert calibration.by_family and calibration.kind == "MoE" and calibration.report.runs == len(LAYOUTS)


def test_the_answer_reads_as_the_issue_words_it():
    from service.runs.calibration import Report

    report = Report(runs=14, layouts=9, theta=[1.0] * 7, loo_error=0.06, uncalibrated_error=0.31, pair_order=0.9,
                    pairs=40)
    assert Calibration("h100|megatron|-|dense", "h100", "megatron", None, report).describe() == (
        "calibrated on 14 of your runs on h100 (megatron): median error 6 % leaving each layout out (uncalibrated "
        "31 %), 90 % of 40 layout pairs ordered as measured")
    family = Calibration("eos|megatron|25.09|dense|Llama 3", "eos", "megatron", "25.09", report, family="Llama 3",
                         family_report=report)
    assert family.describe().startswith("calibrated on 14 of your runs of the Llama 3 family on eos (megatron, "
                                        "25.09): median error 6 %")
