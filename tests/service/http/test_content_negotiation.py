"""Content negotiation: the Accept header's most specific range and q-values decide between YAML and JSON,
and a failed download is text for curl and a page only for a browser."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("accept, yaml", [
    ("application/yaml", True), ("application/yaml;q=0, application/json", False),
    ("application/json, application/yaml;q=0.5", False), ("*/*", False), ("text/yaml;q=0.9, */*;q=0.1", True),
    ("application/yaml;q=abc", False)])
def test_recipe_negotiation_honours_q_values_and_varies_on_accept(client, accept, yaml):
    response = client.get("/v1/recipes/llama3_8b_pretrain_config", headers={"accept": accept})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/yaml" if yaml else "application/json")
    assert response.headers["vary"] == "Accept"


def test_a_failed_download_is_text_for_curl_and_a_page_for_a_browser(client):
    """`curl -s -o config.yaml .../recommend.yaml?...` saved the HTML form page as the config."""
    url = "/recommend.yaml?model=llama3-8b&gpu_type=h100&gpus=9&goal=pretrain"
    answer = client.get(url, headers={"accept": "*/*"})
    assert answer.status_code == 400 and answer.headers["content-type"].startswith("text/plain")
    assert answer.text.startswith("error: gpus") and "<" not in answer.text
    page = client.get(url, headers={"accept": "text/html,application/xhtml+xml,*/*;q=0.8"})
    assert page.status_code == 400 and page.headers["content-type"].startswith("text/html")


@pytest.mark.parametrize("accept, yaml", [("*/*, application/json;q=0", True), ("text/*", True),
                                          ("application/yaml, application/json", True), ("", False),
                                          ("application/*;q=0.5, application/json", False)])
def test_the_most_specific_accept_range_decides(client, accept, yaml):
    """Q-values were combined by maximum, so `*/*` outvoted `application/json;q=0`."""
    response = client.get("/v1/recipes/llama3_8b_pretrain_config", headers={"accept": accept})
    assert response.headers["content-type"].startswith("application/yaml" if yaml else "application/json")


@pytest.mark.parametrize("accept, yaml_wanted", [("application/json, application/*", False), ("application/*", False),
                                                 ("text/*", True)])
def test_a_wildcard_does_not_name_yaml(client, accept, yaml_wanted):
    """`application/*` alone answered YAML."""
    response = client.get("/v1/recipes/llama3_8b_pretrain_config", headers={"accept": accept})
    assert response.headers["content-type"].startswith("application/yaml" if yaml_wanted else "application/json")


def test_a_download_for_a_client_that_refuses_html_is_text(client):
    url = "/recommend.yaml?model=llama3-8b&gpu_type=h100&gpus=9&goal=pretrain"
    response = client.get(url, headers={"accept": "text/html;q=0, */*"})
    assert response.headers["content-type"].startswith("text/plain")


def test_accept_weights_that_are_no_number_count_as_zero(client):
    """`q=nan` outweighed a YAML type; `text/*` is no browser asking for the form page."""
    response = client.get("/v1/recipes/llama3_8b_pretrain_config",
                          headers={"accept": "application/yaml;q=0.5, application/json;q=nan"})
    assert response.headers["content-type"].startswith("application/yaml")
    page = client.get("/recommend.yaml?model=llama3-8b&gpu_type=h100&gpus=9&goal=pretrain",
                      headers={"accept": "text/*"})
    assert page.headers["content-type"].startswith("text/plain")
