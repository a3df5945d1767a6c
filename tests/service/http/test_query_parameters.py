"""Query parameters: misspelt, repeated or unknown ones are named, not ignored; /healthz takes a cache buster."""

from __future__ import annotations

import pytest

from tests.service.http.test_json_bodies import REQUEST

YAML_BODY = {"content": "hardware: {gpu_type: h100, gpus_per_node: 8}\n", "headers": {"content-type": "text/plain"}}


@pytest.mark.parametrize("query,name", [("gpu=16", "gpu"), ("gpu_typ=a100-40gb", "gpu_typ")])
def test_validate_refuses_a_misspelt_query_parameter(client, query, name):
    response = client.post(f"/v1/validate?{query}", **YAML_BODY)
    assert response.status_code == 422
    detail = response.json()["detail"][0]
    assert detail["loc"] == ["query", name] and "gpus" in detail["msg"] and "gpu_type" in detail["msg"]


def test_validate_refuses_a_repeated_query_parameter(client):
    response = client.post("/v1/validate?gpus=16&gpus=8", **YAML_BODY)
    assert response.status_code == 422 and response.json()["detail"][0]["loc"] == ["query", "gpus"]
    assert client.post("/v1/validate?gpus=8", **YAML_BODY).status_code == 200


def test_healthz_takes_a_cache_buster_while_the_v1_routes_stay_strict(client):
    for query in ("x=1", "_=1700000000&x=1&x=2"):
        health = client.get(f"/healthz?{query}")
        assert health.status_code == 200 and health.json()["status"] == "ok", query
    assert client.get("/v1/hardware?x=1").status_code == 422


@pytest.mark.parametrize("route", ["/recommend", "/recommend.yaml"])
def test_the_web_form_refuses_a_repeated_parameter(client, route):
    response = client.get(route, params=[("model", "llama3-8b"), ("gpu_type", "h100"), ("gpus", "8"), ("gpus", "16")])
    assert response.status_code == 422 and "given more than once" in response.text
    assert client.get(route, params={"model": "llama3-8b", "gpu_type": "h100", "gpus": "8"}).status_code == 200


@pytest.mark.parametrize("path", ["/recommend", "/recommend.yaml"])
def test_unknown_query_parameters_are_named_not_ignored(client, path):
    params = {**REQUEST, "global_batch": "64", "zz": ""}
    response = client.get(path, params=params, headers={"accept": "text/html"})  # a browser
    assert response.status_code == 422
    assert response.headers["content-type"].startswith("text/html")
    for name in ("global_batch", "zz"):
        assert f"<code>{name}</code>: unknown parameter" in response.text
    if path == "/recommend.yaml":  # curl: the same problems as text, not a page to save as the config
        response = client.get(path, params=params, headers={"accept": "*/*"})
        assert response.status_code == 422 and response.headers["content-type"].startswith("text/plain")
        assert all(f"error: {name}: unknown parameter" in response.text for name in ("global_batch", "zz"))
