"""JSON request bodies: strict types named by field, numbers and text that can be read, each key given once,
the content type said, and one value for a count given in the body and the query."""

from __future__ import annotations

import pytest

from service.configs.yamlio import OverrideError, parse_overrides
from service.http import schemas as m
from service.recommend.request_overrides import request_fields
from tests.service.configs.test_yaml_numbers import BIG
from tests.service.validate.test_trainer_refusals import BUNDLED

REQUEST = {"model": "llama3-8b", "gpu_type": "h100", "gpus": 8}


def test_a_json_number_over_the_digit_limit_names_the_body(client):
    raw = '{"model": "llama3-8b", "gpu_type": "h100", "gpus": %s}' % BIG
    response = client.post("/v1/plan", content=raw, headers={"content-type": "application/json"})
    assert response.status_code == 400
    body = response.json()
    assert body["field"] == "body"
    assert "number too large" in body["detail"] and "4,300 digits" in body["detail"]


def test_a_json_body_that_is_not_utf8_names_the_body(client):
    response = client.post("/v1/plan", content=b'{"model": "\xff"}', headers={"content-type": "application/json"})
    assert response.status_code == 400
    assert response.json()["field"] == "body" and "not UTF-8" in response.json()["detail"]


@pytest.mark.parametrize("route", ["/v1/plan", "/v1/recommend"])
@pytest.mark.parametrize("field, value", [("gpus", "8"), ("gpus", True), ("gpus", 8.5), ("gpus", 8.25e4),
                                          ("seq_length", "4096"), ("top", "3"), ("nodes", False)])
def test_request_numbers_are_strict_and_the_error_names_the_field(client, route, field, value):
    response = client.post(route, json={**REQUEST, field: value})
    assert response.status_code == 422, response.text
    assert [e["loc"] for e in response.json()["detail"]] == [["body", field]]


def test_v1_validate_json_body_is_strict_too(client):
    response = client.post("/v1/validate", json={"yaml": "a: 1\n", "gpus": "8"})
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "gpus"]


@pytest.mark.parametrize("route", ["/v1/plan", "/v1/recommend"])
def test_a_whole_number_written_as_a_float_is_that_integer(client, route):
    """The OpenAPI schema says `integer`, which JSON Schema (and schemathesis) take 8.0 to be."""
    as_float = client.post(route, json={**REQUEST, "gpus": 8.0, "top": 2.0})
    as_int = client.post(route, json={**REQUEST, "gpus": 8, "top": 2})
    assert as_float.status_code == as_int.status_code == 200
    assert as_float.json() == as_int.json()


def test_json_numbers_and_override_values_still_pass(client):
    assert client.post("/v1/plan", json={**REQUEST, "top": 1}).status_code == 200
    body = m.RecommendBody.model_validate({**REQUEST, "overrides": {"optimizer.lr": 1, "a.b": True, "c.d": "x"}})
    assert body.overrides == {"optimizer.lr": 1, "a.b": True, "c.d": "x"}


@pytest.mark.parametrize("path,body,field", [
    ("/v1/plan", '{"model": "llama3-8b", "gpus": 8, "gpus": 16, "gpu_type": "h100"}', "gpus"),
    ("/v1/recommend", '{"model": "llama3-8b", "gpus": 8, "gpu_type": "h100", '
                      '"overrides": {"optimizer.lr": 1, "optimizer.lr": 2}}', "overrides.optimizer.lr"),
    ("/v1/diff", '{"base": "a: 1", "new": "a: 2", "new": "a: 3"}', "new"),
    ("/v1/validate", '{"yaml": "a: 1", "gpus": 8, "gpus": 16}', "gpus"),
])
def test_a_json_key_written_twice_is_400_naming_it(client, path, body, field):
    response = client.post(path, content=body, headers={"content-type": "application/json"})
    assert response.status_code == 400
    assert response.json()["field"] == field and f"`{field}` twice" in response.json()["detail"]


def test_distinct_keys_and_repeats_in_different_objects_are_fine(client):
    body = '{"base": "a: 1", "new": "a: 2"}'
    assert client.post("/v1/diff", content=body, headers={"content-type": "application/json"}).status_code == 200


@pytest.mark.parametrize("headers", [{"content-type": "text/plain"},
                                     {"content-type": "application/x-www-form-urlencoded"}, {}])
def test_a_json_endpoint_says_to_send_application_json(client, headers):
    body = '{"model": "llama3-8b", "gpus": 8, "gpu_type": "h100"}'
    response = client.post("/v1/plan", content=body, headers=headers)
    assert response.status_code == 415
    assert "application/json" in response.json()["detail"] and response.json()["field"] == "content-type"
    assert "valid dictionary" not in response.text


def test_json_with_a_charset_is_still_json(client):
    response = client.post("/v1/diff", content='{"base": "a: 1", "new": "a: 1"}',
                           headers={"content-type": "application/json; charset=utf-8"})
    assert response.status_code == 200


@pytest.mark.parametrize("content_type", ["application/octet-stream", "application/x-www-form-urlencoded"])
def test_validate_415_names_the_content_type(client, content_type):
    response = client.post("/v1/validate", content=b"model: {pretrained_model_name_or_path: llama3-8b}\n",
                           headers={"content-type": content_type})
    assert response.status_code == 415 and response.json()["field"] == "content-type"
    assert "Content-Type: application/yaml" in response.json()["detail"]


@pytest.mark.parametrize("value", ["{a: 1}", "{}"])
def test_a_mapping_for_a_single_valued_override_is_refused(client, value):
    response = client.post("/v1/recommend", json={"model": "llama3-8b", "gpus": 8, "gpu_type": "h100",
                                                  "overrides": {"precision": value}})
    assert response.status_code == 400 and response.json()["field"] == "overrides"
    assert "--precision: precision takes a single value, not a mapping" in response.json()["detail"]


def test_a_key_under_a_single_value_is_refused_and_sections_still_take_mappings():
    with pytest.raises(OverrideError, match="--precision.a: precision takes a single value"):
        request_fields(parse_overrides(["--precision.a", "1"]), {})
    assert request_fields(parse_overrides(["--dataset", "{seq_length: 4096}"]), {})["seq_length"] == 4096


def test_a_count_given_differently_in_the_body_and_the_query_is_refused():
    from fastapi.testclient import TestClient

    from service.http.app import create_app

    client = TestClient(create_app())
    clash = client.post("/v1/validate?gpus=16", json={"yaml": BUNDLED, "gpus": 8})
    assert clash.status_code == 400 and clash.json()["field"] == "gpus"
    assert client.post("/v1/validate?gpus=8", json={"yaml": BUNDLED, "gpus": 8}).status_code == 200


@pytest.mark.parametrize("depth", [65, 10_000])
@pytest.mark.parametrize("path", ["/v1/recommend", "/v1/validate"])
def test_a_json_body_nested_too_deeply_says_so_with_the_limit(client, path, depth):
    body = '{"yaml": "a: 1", "model": ' + "[" * depth + "]" * depth + "}"
    response = client.post(path, content=body, headers={"content-type": "application/json"})
    assert response.status_code == 400
    assert response.json()["field"] == "body"
    assert response.json()["detail"].startswith("the JSON body is nested deeper than 64 levels")


def test_a_json_body_at_the_nesting_limit_is_read(client):
    overrides = '{"optimizer.lr": ' + "[" * 63 + "]" * 63 + "}"  # 64 levels with the body's own object
    body = '{"model": "llama3-8b", "gpus": 8, "gpu_type": "h100", "overrides": ' + overrides + "}"
    response = client.post("/v1/recommend", content=body, headers={"content-type": "application/json"})
    assert "nested" not in response.text


def test_yaml_nested_past_the_reader_says_the_depth_and_the_limit(client):
    response = client.post("/v1/validate", content="a: " + "[" * 1100 + "]" * 1100,
                           headers={"content-type": "text/plain"})
    assert response.status_code == 400
    detail = response.json()["detail"]
    assert "nesting 1,000 or more levels deep (the limit is 64)" in detail and "indentation" not in detail
