"""Plan and recommend beside the runs store: a measured row carries measured.yours and ranks by its measurement;
with enough runs of a group the estimates are calibrated and the answer says so; without a store nothing
changes."""

from __future__ import annotations

import pytest

from service.cli.recommend import summary_text
from service.plan.planner import make_request, plan
from service.plan.provenance import measured as published
from service.plan.provenance import row_dict
from service.plan.report import format_text, plan_json
from service.recommend.recommendation import recommend
from service.runs.advice import reading_store, row_key, with_runs
from service.runs.schema import RunRecord
from service.runs.store import RunsStore
from tests.service.runs.test_calibration import LAYOUTS, cpu_run, true_time

REQUEST = dict(goal="pretrain", seq_length=64, global_batch_size=16, precision="fp32", engine="bundled")


@pytest.fixture
def planned():
    return plan(make_request("tiny-llama", 2, "cpu", **REQUEST))


@pytest.fixture
def store(store_url):
    """A fresh store on SQLite and on PostgreSQL: plan's reads aggregate in the database."""
    return RunsStore(store_url)


def _measure(store: RunsStore, row, step_s: float, repeats: int = 1) -> None:
    """``repeats`` runs of a planned row's layout, 1 % apart."""
    lay = row.structure
    for i in range(repeats):
        run = cpu_run(lay.tp, row.micro_batch_size, row.sharding, step_s * (1 + i / 100))
        layout = run.layout.model_copy(update={"pp": lay.pp, "vp": lay.vp, "cp": lay.cp, "ep": lay.ep,
                                               "etp": lay.etp, "dp": row.dp, "recompute": row.layout.recompute})
        store.add(run.model_copy(update={"layout": layout}))


def test_without_a_store_the_plan_is_unchanged(planned, tmp_path):
    assert reading_store(str(tmp_path / "missing.sqlite")) is None
    assert with_runs(planned, None) is planned
    assert not (tmp_path / "missing.sqlite").exists()  # planning creates no store
    assert row_dict(planned, planned.layouts[0])["measured"] is None  # neither published nor yours


def test_a_measured_row_ranks_by_its_measurement(planned, store):
    last = planned.fitting[-1]
    _measure(store, last, 0.001, repeats=3)  # measured far faster than any estimate
    result = with_runs(planned, store)
    assert row_key(result.layouts[0]) == row_key(last)
    measured = row_dict(result, result.layouts[0])["measured"]
    assert measured["tokens_per_s_per_gpu"] is None and measured["source"] is None  # nothing published of it
    own = measured["yours"]
    assert own["count"] == 3 and own["spread"] == pytest.approx(0.02, abs=0.001)
    assert own["tokens_per_s_per_gpu"] == pytest.approx(16 * 64 / 0.00101 / 2)
    assert result.why_first == "measured fastest in your runs store"
    assert "measured in your runs:" in format_text(result, 3)
    assert planned.layouts[0] is not last  # the cached plan itself is untouched


def test_runs_of_another_request_do_not_count(planned, store):
    other = cpu_run(1, 1, "full", 0.001).model_copy(update={"request": cpu_run(1, 1, "full", 1).request.model_copy(
        update={"global_batch_size": 32})})
    store.add(other)
    result = with_runs(planned, store)
    assert all(row_dict(result, row)["measured"] is None for row in result.layouts)


def test_enough_runs_calibrate_the_estimates_and_the_answer_says_so(planned, store):
    for tp, mbs, sharding in LAYOUTS:
        run = cpu_run(tp, mbs, sharding, 1.0)
        store.add(run.model_copy(update={"measurement": run.measurement.model_copy(
            update={"step_time_s": true_time(run)})}))
    result = with_runs(planned, store)
    answer = plan_json(result, None)
    assert answer["calibration"].startswith(f"{len(LAYOUTS)} layout(s) measured in your runs store")
    assert f"calibrated on {len(LAYOUTS)} of your runs of the tiny family on cpu (bundled)" in answer["calibration"]
    assert "the model's own calibration: not calibrated for CPUs" in answer["calibration"]
    unmeasured = [row for row in answer["layouts"] if row["measured"] is None and row["fits"]]
    assert unmeasured and all(row["calibrated_tokens_per_s_per_gpu"] for row in unmeasured)
    # the fitted calibration is kept, and fitted again only when the runs change
    kept = ["cpu|bundled|-|dense", "cpu|bundled|-|dense|tiny"]  # the dense group's fit and the family's
    assert set(store.cached_calibrations(kept, len(LAYOUTS), len(LAYOUTS))) == set(kept)
    store.delete(1)
    assert store.cached_calibrations(kept, len(LAYOUTS), len(LAYOUTS)) == {}


def test_too_few_runs_leave_the_estimates_uncalibrated_and_say_so(planned, store):
    _measure(store, planned.fitting[0], 0.5)
    text = plan_json(with_runs(planned, store), 3)["calibration"]
    assert "1 completed run(s) on cpu (bundled), fewer than the 5 a calibration needs" in text


def test_recommend_picks_the_layout_measured_fastest(tmp_path, monkeypatch):
    store = RunsStore(str(tmp_path / "runs.sqlite"))
    planned = plan(make_request("tiny-llama", 2, "cpu", **REQUEST))
    last = planned.fitting[-1]
    _measure(store, last, 0.001)
    monkeypatch.setenv("RECIPE_ADVISOR_DB", store.url.removeprefix("sqlite:///"))
    rec = recommend("tiny-llama", 2, "cpu", **REQUEST)
    assert row_key(rec.best) == row_key(last)
    assert rec.to_dict()["layout"]["measured"]["yours"]["count"] == 1
    assert "measured in your runs: " in summary_text(rec)


def test_a_row_measured_both_ways_keeps_the_published_fields_and_nests_yours(tmp_path):
    """gpt-oss-120b on 64 H100: NVIDIA published TP1 PP4 EP8 micro batch 1; your run of it sits in measured.yours."""
    request = make_request("gpt-oss-120b", 8, "h100", nodes=8, goal="pretrain", seq_length=4096,
                           global_batch_size=1280, precision="bf16", engine="megatron")
    planned = plan(request)
    row = next(r for r in planned.fitting if (r.structure.tp, r.structure.pp, r.structure.vp, r.structure.ep,
                                              r.micro_batch_size) == (1, 4, None, 8, 1))
    store = RunsStore(str(tmp_path / "runs.sqlite"))
    lay = row.structure
    store.add(RunRecord.model_validate({
        "provenance": {"engine": "megatron", "release": "26.04.01", "cluster": "eos"},
        "request": {"model": "gpt-oss-120b", "gpu_type": "h100", "gpus_per_node": 8, "nodes": 8,
                    "seq_length": 4096, "global_batch_size": 1280, "precision": "bf16"},
        "layout": {"tp": lay.tp, "pp": lay.pp, "vp": lay.vp, "cp": lay.cp, "ep": lay.ep, "etp": lay.etp,
                   "dp": row.dp, "micro_batch_size": row.micro_batch_size, "sharding": row.sharding,
                   "recompute": row.layout.recompute},
        "measurement": {"step_time_s": 1280 * 4096 / (6000.0 * 64), "timed_steps": 20}}))
    result = with_runs(planned, store)
    shown = next(r for r in result.layouts if row_key(r) == row_key(row))
    measured = row_dict(result, shown)["measured"]
    assert measured["tokens_per_s_per_gpu"] == 5824.0 and measured["source"].startswith("svcnemo-autobot/")
    assert measured["global_batch_size"] == 1280 and measured["sharding"] == "not full"
    assert measured["yours"]["count"] == 1 and measured["yours"]["tokens_per_s_per_gpu"] == pytest.approx(6000.0)
    assert list(measured) == ["tokens_per_s_per_gpu", "global_batch_size", "release", "source", "sharding", "yours"]
    text = format_text(result, None)
    assert "measured 5,824 tok/s/GPU at global batch 1280 (release 26.04.01" in text
    assert "measured in your runs: 6,000 tok/s/GPU, 1 run(s)" in text
    published_only = [row_dict(result, r)["measured"] for r in result.layouts
                      if row_key(r) != row_key(row) and published(request, r)]
    assert published_only and all(m["source"] and m["yours"] is None for m in published_only)
