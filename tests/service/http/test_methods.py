"""HEAD answers every GET route as its GET without the body; OPTIONS and a 405 name every method a path serves."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("path", [
    "/healthz",
    "/",
    "/validate",
    "/v1/recipes/llama3_8b_pretrain_config",
    "/v1/models",
    "/openapi.json",
    "/recommend.yaml?model=llama3-8b&gpu_type=h100&gpus=8&goal=pretrain",
    "/static/style.css",
])
def test_head_has_the_headers_of_get_and_no_body(client, path):
    got, head = client.get(path), client.head(path)
    assert got.status_code == 200 and head.status_code == 200
    assert head.content == b""
    assert dict(head.headers) == dict(got.headers)  # content-length included: that of the GET's body


def test_head_of_an_unknown_recipe_is_its_404_without_a_body(client):
    head = client.head("/v1/recipes/no_such_recipe")
    assert head.status_code == 404 and head.content == b""


@pytest.mark.parametrize(("path", "allow"), [
    ("/validate", "GET, HEAD, POST, OPTIONS"),
    ("/healthz", "GET, HEAD, OPTIONS"),
    ("/v1/recommend", "POST, OPTIONS"),
    ("/v1/recipes/llama3_8b_pretrain_config", "GET, HEAD, OPTIONS"),
    ("/static/style.css", "GET, HEAD, OPTIONS"),
])
def test_options_lists_the_methods_the_path_serves(client, path, allow):
    r = client.options(path)
    assert r.status_code == 200
    assert r.headers["allow"] == allow
    assert r.content == b""


def test_options_of_an_unknown_path_is_404(client):
    assert client.options("/v1/nothing-here").status_code == 404


def test_a_wrong_method_is_405_naming_every_method_of_the_path(client):
    r = client.put("/validate")
    assert r.status_code == 405
    assert r.headers["allow"] == "GET, HEAD, POST, OPTIONS"
    assert client.head("/v1/recommend").headers["allow"] == "POST, OPTIONS"


def test_a_wrong_method_on_a_static_file_is_405_naming_get_and_head(client):
    r = client.put("/static/style.css")
    assert r.status_code == 405
    assert r.headers["allow"] == "GET, HEAD, OPTIONS"
