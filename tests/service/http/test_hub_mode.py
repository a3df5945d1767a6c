"""With the Hub allowed (RECIPE_ADVISOR_ALLOW_HUB=1) the service resolves a Hub id from the cache and never
reads a server folder a client names."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from service.http.app import create_app
from tests.hub_cache import cache_repo
from tests.recipe_index.test_local_model_configs import SMALL_LLAMA


@pytest.fixture
def client() -> TestClient:
    """A fresh app for each test: the Hub mode and the working folder are set per test."""
    return TestClient(create_app(), raise_server_exceptions=False)


@pytest.fixture
def hub_mode_beside_a_secret(tmp_path, monkeypatch, offline_hub):
    secret = {**SMALL_LLAMA, "hidden_size": "SECRET-API-KEY-abc123"}
    for repo in ("some-org/leak", "some-org/cached"):
        (tmp_path / repo).mkdir(parents=True)
        (tmp_path / repo / "config.json").write_text(json.dumps(secret))
    cache_repo(offline_hub, "some-org/cached", SMALL_LLAMA)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RECIPE_ADVISOR_ALLOW_HUB", "1")


def test_a_hub_id_that_names_a_server_folder_is_not_read(hub_mode_beside_a_secret, client):
    response = client.post("/v1/plan", json={"model": "some-org/leak", "gpus": 8, "gpu_type": "h100"})
    assert response.status_code == 404 and "SECRET" not in response.text
    yaml = "model:\n  pretrained_model_name_or_path: some-org/leak\n"
    response = client.post("/v1/validate", content=yaml, headers={"content-type": "application/yaml"})
    assert response.status_code == 200 and "SECRET" not in response.text
    assert "RA-C009" in response.text  # unknown to the service: not resolvable, said so


def test_a_hub_id_resolves_from_the_cache_not_from_a_folder_of_that_name(hub_mode_beside_a_secret, client):
    response = client.post("/v1/plan", json={"model": "some-org/cached", "gpus": 8, "gpu_type": "h100"})
    assert response.status_code == 200, response.text
    assert response.json()["model"] == "some-org/cached" and "SECRET" not in response.text  # the folder's is invalid
