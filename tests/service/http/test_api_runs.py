"""/v1/runs: a job's epilogue records its run; runs are listed by model, hardware, engine, team; writes need the
token where it is required; bad input is a 4xx naming the field and stores nothing."""

from __future__ import annotations

import math

import pytest
from fastapi.testclient import TestClient

from service.http.app import create_app
from service.runs.store import RunsStore
from tests.service.runs.writer import tiny_run

TOKEN = "s3cret-token"


@pytest.fixture
def api(tmp_path, monkeypatch):
    db = tmp_path / "api.sqlite"
    monkeypatch.setenv("RECIPE_ADVISOR_DB", str(db))
    monkeypatch.delenv("RECIPE_ADVISOR_TOKEN", raising=False)
    monkeypatch.delenv("RECIPE_ADVISOR_PUBLIC", raising=False)
    with TestClient(create_app()) as client:
        yield client, db


def body(i: int = 1, **changes) -> dict:
    data = tiny_run(i).model_dump(mode="json")
    for dotted, value in changes.items():
        section, key = dotted.split("__")
        data[section][key] = value
    return data


def test_a_run_is_recorded_once_and_listed_by_filter(api):
    client, _ = api
    assert client.post("/v1/runs", json=body(1)).status_code == 201
    again = client.post("/v1/runs", json=body(1))
    assert again.status_code == 200 and again.json() == {"id": 1, "created": False}
    client.post("/v1/runs", json=body(2, provenance__engine="automodel"))
    assert [r["id"] for r in client.get("/v1/runs", params={"engine": "automodel"}).json()["runs"]] == [2]
    assert [r["id"] for r in client.get("/v1/runs", params={"team": "b", "model": "tiny-llama"}).json()["runs"]] == [2]
    assert client.get("/v1/runs", params={"gpu_type": "h100"}).json()["runs"] == []
    stored = client.get("/v1/runs/1").json()
    assert stored["measurement"]["estimate_step_time_s"] > 0  # the planner's estimate stored beside it


def test_listing_an_empty_service_creates_no_store(api):
    client, db = api
    assert client.get("/v1/runs").json() == {"runs": []} and not db.exists()
    assert client.get("/v1/runs/3").status_code == 404


@pytest.mark.parametrize("change, field", [
    ({"measurement__step_time_s": -1.0}, "step_time_s"),
    ({"measurement__step_time_s": math.nan}, "step_time_s"),
    ({"request__gpus_per_node": 0}, "gpus_per_node"),
])
def test_a_bad_run_is_refused_naming_its_field(api, change, field):
    client, db = api
    response = client.post("/v1/runs", content=__import__("json").dumps(body(1, **change)),
                           headers={"content-type": "application/json"})
    assert response.status_code in (400, 422) and field in response.text
    assert not db.exists() or RunsStore(str(db)).count() == 0


def test_an_unknown_model_is_refused_naming_the_field(api):
    client, db = api
    response = client.post("/v1/runs", json=body(1, request__model="llama-99b"))
    assert response.status_code == 400 and response.json()["field"] == "request.model"
    assert RunsStore(str(db)).count() == 0


def test_an_oversized_body_is_refused(api):
    client, db = api
    huge = body(1)
    huge["config_text"] = "x" * (2 << 20)
    assert client.post("/v1/runs", json=huge).status_code == 413
    assert not db.exists() or RunsStore(str(db)).count() == 0


def test_with_a_token_set_writes_need_it(api, monkeypatch):
    client, _ = api
    monkeypatch.setenv("RECIPE_ADVISOR_TOKEN", TOKEN)
    refused = client.post("/v1/runs", json=body(1))
    assert refused.status_code == 401 and refused.headers["www-authenticate"] == "Bearer"
    assert client.post("/v1/runs", json=body(1), headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert client.post("/v1/runs", json=body(1), headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 201
    assert client.delete("/v1/runs/1").status_code == 401
    assert client.delete("/v1/runs/1", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 204


def test_without_the_token_reads_leave_the_config_text_out(api, monkeypatch):
    client, _ = api
    monkeypatch.setenv("RECIPE_ADVISOR_TOKEN", TOKEN)
    secret = {**body(1), "config_text": "model: proprietary\n"}
    client.post("/v1/runs", json=secret, headers={"Authorization": f"Bearer {TOKEN}"})
    assert client.get("/v1/runs/1").json()["config_text"] is None
    assert client.get("/v1/runs/1", headers={"Authorization": f"Bearer {TOKEN}"}).json()["config_text"] == (
        "model: proprietary\n")


def test_listening_beyond_loopback_without_a_token_takes_no_writes(api, monkeypatch):
    client, _ = api
    monkeypatch.setenv("RECIPE_ADVISOR_PUBLIC", "1")
    refused = client.post("/v1/runs", json={"not": "even a run"})
    assert refused.status_code == 401 and "RECIPE_ADVISOR_TOKEN" in refused.json()["detail"]


def test_a_plan_answer_shows_a_run_posted_after_it(api):
    client, _ = api
    request = {"model": "tiny-llama", "gpus": 2, "gpu_type": "cpu", "engine": "bundled", "seq_length": 64,
               "global_batch_size": 16, "precision": "fp32", "top": 20}
    first = client.post("/v1/plan", json=request).json()
    row = next(r for r in first["layouts"] if r["pp"] == 1 and r["tp"] == 1 and r["fits"])
    run = body(1, request__seq_length=64, request__global_batch_size=16, request__precision="fp32",
               layout__micro_batch_size=row["micro_batch_size"], layout__sharding=row["sharding"],
               layout__dp=row["dp"], layout__recompute=row["recompute"], measurement__step_time_s=1e-4,
               measurement__step_time_p10_s=None, measurement__step_time_p90_s=None,
               measurement__tokens_per_s_per_gpu=None)
    assert client.post("/v1/runs", json=run).status_code == 201
    second = client.post("/v1/plan", json=request).json()
    measured = second["layouts"][0]["measured"]
    assert measured["yours"]["count"] == 1 and measured["tokens_per_s_per_gpu"] is None  # nothing published of it
    assert second["why_first"] == "measured fastest in your runs store"
