"""Input the service cannot use is a 4xx naming it, never a 500: integers beyond 64 bits in YAML and overrides,
an override too deep for the config it would be written into."""

from __future__ import annotations

from fastapi.testclient import TestClient

from service.http.app import create_app
from tests.service.configs.test_yaml_numbers import BIG
from tests.service.http.test_json_bodies import REQUEST


def test_v1_validate_answers_400_naming_yaml(client):
    for response in (
        client.post("/v1/validate", content=f"distributed:\n  tp_size: {BIG}\n",
                    headers={"content-type": "text/plain"}),
        client.post("/v1/validate", json={"yaml": f"distributed:\n  tp_size: {BIG}\n"}),
    ):
        assert response.status_code == 400, response.text
        body = response.json()
        assert (body["field"], body["line"], body["column"]) == ("yaml", 2, 12)
        assert "`distributed.tp_size` is an integer with 5,000 digits" in body["detail"]


def test_v1_diff_answers_400_naming_the_document(client):
    response = client.post("/v1/diff", json={"base": "a: 1\n", "new": f"a: {BIG}\n"})
    assert response.status_code == 400, response.text
    body = response.json()
    assert (body["field"], body["line"]) == ("new", 1)
    assert body["detail"].startswith("new: unusable YAML at line 1, column 4: `a` is an integer")


def test_validate_page_shows_the_problem_with_400(client):
    response = client.post("/validate", data={"yaml": f"distributed:\n  tp_size: {BIG}\n"})
    assert response.status_code == 400
    assert "line 2: `distributed.tp_size` is an integer with 5,000 digits" in response.text


def test_v1_recommend_override_beyond_64_bits_is_400_naming_overrides(client):
    body = {**REQUEST, "overrides": {"distributed.tp_size": int("9" * 4000)}}  # json reads 4,000 digits
    response = client.post("/v1/recommend", json=body)
    assert response.status_code == 400, response.text
    assert response.json()["field"] == "overrides"
    assert "--distributed.tp_size: the value is an integer with 4,000 digits" in response.json()["detail"]


def test_an_override_too_deep_for_the_written_config_is_a_400_not_a_500():
    """63 levels pass the override's own limit; under `metadata` the config is 65 deep."""
    deep = "[" * 63 + "]" * 63  # read as YAML, as the CLI reads it
    response = TestClient(create_app()).post("/v1/recommend", json={
        "model": "tiny-llama", "gpus": 2, "gpu_type": "cpu", "engine": "bundled", "overrides": {"metadata.deep": deep}})
    assert response.status_code == 400, response.text
    body = response.json()
    assert body["field"] == "overrides" and "would not read back as a config" in body["detail"]
