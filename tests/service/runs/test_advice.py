"""Plan and recommend beside the runs store: a measured row carries measured_yours and ranks by its measurement;
with enough runs of a group the estimates are calibrated and the answer says so; without a store nothing
changes."""

from __future__ import annotations

import pytest

from service.plan.planner import make_request, plan
from service.plan.provenance import row_dict
from service.plan.report import format_text, plan_json
from service.recommend.recommendation import recommend
from service.runs.advice import reading_store, row_key, with_runs
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
    assert row_dict(planned, planned.layouts[0])["measured_yours"] is None


def test_a_measured_row_ranks_by_its_measurement(planned, store):
    last = planned.fitting[-1]
    _measure(store, last, 0.001, repeats=3)  # measured far faster than any estimate
    result = with_runs(planned, store)
    assert row_key(result.layouts[0]) == row_key(last)
    own = row_dict(result, result.layouts[0])["measured_yours"]
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
    assert all(row_dict(result, row)["measured_yours"] is None for row in result.layouts)


def test_enough_runs_calibrate_the_estimates_and_the_answer_says_so(planned, store):
    for tp, mbs, sharding in LAYOUTS:
        run = cpu_run(tp, mbs, sharding, 1.0)
        store.add(run.model_copy(update={"measurement": run.measurement.model_copy(
            update={"step_time_s": true_time(run)})}))
    result = with_runs(planned, store)
    answer = plan_json(result, None)
    assert answer["calibration"].startswith(f"{len(LAYOUTS)} layout(s) measured in your runs store")
    assert f"calibrated on {len(LAYOUTS)} of your runs on cpu (bundled)" in answer["calibration"]
    assert "the model's own calibration: not calibrated for CPUs" in answer["calibration"]
    unmeasured = [row for row in answer["layouts"] if row["measured_yours"] is None and row["fits"]]
    assert unmeasured and all(row["calibrated_tokens_per_s_per_gpu"] for row in unmeasured)
    # the fitted calibration is kept, and fitted again only when the runs change
    assert store.cached_calibration("cpu|bundled|-|dense", len(LAYOUTS), len(LAYOUTS)) is not None
    store.delete(1)
    assert store.cached_calibration("cpu|bundled|-|dense", len(LAYOUTS), len(LAYOUTS)) is None


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
    assert rec.to_dict()["layout"]["measured_yours"]["count"] == 1
