"""The Runs view: the table, the estimated-vs-measured plot and a run's loss curve, inline SVG, autoescaped."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from service.http.app import create_app
from service.runs.store import RunsStore
from tests.service.runs.writer import tiny_run


@pytest.fixture
def page(tmp_path, monkeypatch):
    db = tmp_path / "web.sqlite"
    monkeypatch.setenv("RECIPE_ADVISOR_DB", str(db))
    store = RunsStore(str(db))
    with TestClient(create_app()) as client:
        yield client, store


def _with_curve(i: int, **provenance):
    run = tiny_run(i)
    measured = run.measurement.model_copy(update={"loss_curve": [(1, 6.0), (2, 5.5), (3, 5.1)],
                                                  "estimate_tokens_per_s_per_gpu": 2000.0})
    return run.model_copy(update={"measurement": measured,
                                  "provenance": run.provenance.model_copy(update=provenance)})


def test_the_runs_page_lists_runs_and_plots_them(page):
    client, store = page
    store.add(_with_curve(1, cluster="lab"))
    store.add(_with_curve(2, source="published", release="26.02"))
    html = client.get("/runs").text
    assert "2 run(s)" in html and 'href="/runs/1"' in html and "(published 26.02)" in html
    assert html.count("<circle") == 2 and "<script src=\"http" not in html


def test_the_runs_page_filters(page):
    client, store = page
    store.add(_with_curve(1, cluster="lab"))
    store.add(_with_curve(2, cluster="other"))
    assert "1 run(s)" in client.get("/runs", params={"cluster": "lab"}).text


def test_a_run_page_draws_its_loss_curve(page):
    client, store = page
    store.add(_with_curve(1))
    html = client.get("/runs/1").text
    assert "<polyline" in html and "From step 1 (loss 6)" in html


def test_labels_are_escaped(page):
    client, store = page
    store.add(_with_curve(1, cluster="<script>alert(1)</script>"))
    html = client.get("/runs").text + client.get("/runs/1").text
    assert "<script>alert(1)</script>" not in html and "&lt;script&gt;" in html


def test_an_unknown_run_is_a_404_page(page):
    client, _ = page
    response = client.get("/runs/42")
    assert response.status_code == 404 and "no run 42" in response.text


def test_without_a_store_the_page_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("RECIPE_ADVISOR_DB", str(tmp_path / "none.sqlite"))
    with TestClient(create_app()) as client:
        html = client.get("/runs").text
    assert "No runs store yet" in html and not (tmp_path / "none.sqlite").exists()


def test_the_result_page_shows_your_measurement_of_the_layout(page):
    client, store = page
    ask = {"model": "tiny-llama", "gpus": 2, "gpu_type": "cpu", "engine": "bundled"}
    answer = client.post("/v1/recommend", json=ask).json()
    layout, config = answer["layout"], answer["config"]
    run = tiny_run(1, seq_length=config["dataset"]["seq_length"], precision=config["precision"],
                   global_batch_size=config["step_scheduler"]["global_batch_size"])
    fast = run.measurement.model_copy(update={"tokens_per_s_per_gpu": 1e6, "step_time_s": 64 * 16 / 2e6})
    store.add(run.model_copy(update={"measurement": fast, "layout": run.layout.model_copy(update={
        key: layout[key] for key in ("tp", "pp", "cp", "ep", "dp", "micro_batch_size", "recompute", "sharding")})}))
    html = client.get("/recommend", params={key: str(value) for key, value in ask.items()}).text
    assert 'id="measured-yours">Measured in your runs: 1,000,000 tokens/s per GPU, median of 1 run(s)' in html
    assert 'id="measured">' not in html  # nothing published of it: no published line
