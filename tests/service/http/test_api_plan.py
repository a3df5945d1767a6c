"""POST /v1/plan: the planner over HTTP, same answers as the library, bad input as 4xx."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from service.cli.app import main
from service.http.routes import advise as api
from tests.paths import REPO

BODY = {"model": "llama3-8b", "gpus": 8, "gpu_type": "h100"}


def test_plan_matches_the_cli(client, capsys):
    r = client.post("/v1/plan", json={**BODY, "top": 3})
    assert r.status_code == 200
    assert main(["plan", "--model", "llama3-8b", "--gpus", "8", "--gpu-type", "h100", "--top", "3",
                 "--format", "json"]) == 0
    assert r.json() == json.loads(capsys.readouterr().out)
    first = r.json()["layouts"][0]
    assert first["fits"] and first["dp"] * first["tp"] * first["pp"] * first["cp"] == 8


def test_plan_passes_every_field_through(client):
    body = {**BODY, "nodes": 2, "goal": "sft", "seq_length": 8192, "global_batch_size": 64,
            "precision": "fp16", "engine": "bundled", "top": 2}
    got = client.post("/v1/plan", json=body).json()
    assert got["hardware"]["world_size"] == 16
    assert (got["goal"], got["seq_length"], got["global_batch_size"], got["precision"], got["engine"]) == (
        "sft", 8192, 64, "fp16", "bundled")
    assert len(got["layouts"]) == 2
    assert all(row["sharding"] in ("full", "none") for row in got["layouts"])  # the bundled trainer's FSDP2 / DDP


def test_plan_aliases_share_one_cache_entry(client):
    api.cached_plan.cache_clear()
    api.responses.clear()
    a = client.post("/v1/plan", json={**BODY, "top": 1}).json()
    b = client.post("/v1/plan",
                    json={**BODY, "model": "meta-llama/Meta-Llama-3-8B", "gpu_type": "H100", "top": 4}).json()
    again = client.post("/v1/plan", json={**BODY, "model": "Meta-Llama-3-8B", "top": 4}).json()
    assert a["layouts"][0] == b["layouts"][0] and again == b
    info = api.cached_plan.cache_info()
    assert (info.misses, info.hits) == (1, 1)  # one ranking computed for both `top`s
    assert (api.responses.misses, api.responses.hits) == (2, 1)  # the third request is a stored answer


def test_plan_with_no_valid_layout_is_an_empty_list(client):
    r = client.post("/v1/plan", json={"model": "deepseek-v3", "gpus": 1, "gpu_type": "h100"})
    assert r.status_code == 200
    assert r.json()["layouts"] == [] or not r.json()["layouts"][0]["fits"]


@pytest.mark.parametrize(
    "change, loc",
    [
        ({"gpus": "eight"}, ["body", "gpus"]),
        ({"gpus": 0}, ["body", "gpus"]),
        ({"goal": "train"}, ["body", "goal"]),
        ({"engine": "deepspeed"}, ["body", "engine"]),
        ({"precision": "int8"}, ["body", "precision"]),
        ({"top": 1000}, ["body", "top"]),
        ({"gpu-type": "h100"}, ["body", "gpu-type"]),
    ],
)
def test_plan_bad_fields_are_422_naming_the_field(client, change, loc):
    r = client.post("/v1/plan", json={**BODY, **change})
    assert r.status_code == 422
    assert loc in [e["loc"] for e in r.json()["detail"]]


@pytest.mark.parametrize("missing", ["model", "gpus", "gpu_type"])
def test_plan_missing_fields_are_422(client, missing):
    body = {k: v for k, v in BODY.items() if k != missing}
    r = client.post("/v1/plan", json=body)
    assert r.status_code == 422
    assert ["body", missing] in [e["loc"] for e in r.json()["detail"]]


def test_plan_unknown_model_is_404_with_closest_ids(client):
    r = client.post("/v1/plan", json={**BODY, "model": "lama3-8b"})
    assert r.status_code == 404
    assert r.json()["field"] == "model"
    assert "llama3-8b" in r.json()["suggestions"]


def test_plan_unknown_gpu_is_404(client):
    r = client.post("/v1/plan", json={**BODY, "gpu_type": "h10"})
    assert r.status_code == 404
    assert r.json()["field"] == "gpu_type" and "h100" in r.json()["suggestions"]


def test_plan_never_treats_the_model_as_a_server_path(client):
    r = client.post("/v1/plan", json={**BODY, "model": "/etc"})
    assert r.status_code == 404


FIRST_REQUEST = """
import json
from fastapi.testclient import TestClient
from service.http.app import create_app
body = {"model": "llama3-8b", "gpus": 8, "gpu_type": "h100", "engine": "bundled", "precision": "fp8"}
with TestClient(create_app()) as client:
    print(json.dumps(client.post("/v1/plan", json=body).json()["layouts"]))
"""


def test_first_request_of_a_fresh_worker_uses_every_rule():
    # In a new process the first call is a plan: the bundled trainer's precision rule must apply already.
    out = subprocess.run([sys.executable, "-c", FIRST_REQUEST], capture_output=True, text=True, timeout=120,
                         cwd=REPO)
    assert out.returncode == 0, out.stderr
    layouts = json.loads(out.stdout)
    # fp8 in the bundled trainer is data parallel only (RA-E003): without the rule, TP 2-8 rows appear.
    assert layouts and all(row["tp"] == 1 for row in layouts)


def test_plan_without_a_precision_answers_with_the_rule(client):
    r = client.post("/v1/plan", json={"model": "olmoe-7b", "gpus": 2, "gpu_type": "cpu", "engine": "bundled"})
    assert r.status_code == 200, r.text
    got = r.json()
    assert got["precision"] == "fp32" and got["layouts"] == []
    assert "RA-E002" in json.dumps(got["rejections"])


@pytest.mark.parametrize("field", ["seq_length", "global_batch_size"])
def test_plan_zero_is_422_naming_the_field(client, field):
    r = client.post("/v1/plan", json={**BODY, field: 0})
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"] == ["body", field]


def test_the_per_node_overflow_fix_offers_only_what_the_next_call_accepts(client):
    detail = client.post("/v1/plan", json={"model": "llama3-8b", "gpus": 9, "nodes": 1, "gpu_type": "h100"}).json()
    assert "without nodes" not in detail["detail"] and "gpus <= 8 with nodes" in detail["detail"]
    detail = client.post("/v1/plan", json={"model": "llama3-8b", "gpus": 16, "nodes": 2, "gpu_type": "h100"}).json()
    assert "the total (32) without nodes" in detail["detail"]
    assert client.post("/v1/plan", json={"model": "llama3-8b", "gpus": 32, "gpu_type": "h100"}).status_code == 200
