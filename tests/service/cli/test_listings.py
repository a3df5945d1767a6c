"""The `models` and `recipes` listings, on the command line and over HTTP: family filters, checked filters,
one set of JSON keys, the text table."""

from __future__ import annotations

import json

import pytest

from recipe_index.recipes import list_models
from tests.cli import run_cli


@pytest.mark.parametrize("family", ["llama", "Llama 3", " QWEN ", "no-such-family"])
def test_models_family_filters_as_the_api_does(capsys, client, family):
    code, out, _ = run_cli(capsys, "models", "--family", family, "--format", "json")
    assert code == 0
    ids = [row["id"] for row in json.loads(out)]
    response = client.get("/v1/models", params={"family": family})
    assert response.status_code == 200
    assert ids == [row["id"] for row in response.json()]
    assert len(ids) < len(list_models())
    assert (ids == []) == (family == "no-such-family")


@pytest.mark.parametrize("listing, query", [("models", []), ("hardware", []), ("recipes", ["--kind", "bundled"])])
def test_cli_json_listings_are_the_apis(capsys, client, listing, query):
    """One set of keys for a listing (the CLI said layers/hidden where the API says
    num_hidden_layers/hidden_size); the text table keeps its short headers."""
    code, out, _ = run_cli(capsys, listing, *query, "--format", "json")
    assert code == 0
    params = {"kind": "bundled"} if query else {}
    assert json.loads(out) == client.get(f"/v1/{listing}", params=params).json()
    code, text, _ = run_cli(capsys, listing, *query)
    assert code == 0 and len(text.splitlines()) == len(json.loads(out)) + 1


def test_models_text_table_shows_the_heads_tp_must_divide(capsys):
    _, text, _ = run_cli(capsys, "models", "--family", "Llama 3")
    header, *rows = text.splitlines()
    assert header.split()[:10] == ["id", "hf_id", "family", "architecture", "layers", "hidden", "heads", "kv_heads",
                                   "experts", "params"]
    llama3_8b = next(r.split() for r in rows if r.startswith("llama3-8b "))
    assert llama3_8b[-6:] == ["32", "4096", "32", "8", "0", "8.03B"]


def test_models_family_text_says_when_nothing_matches(capsys):
    assert run_cli(capsys, "models", "--family", "nope")[:2] == (0, "no models match\n")


def test_recipe_filters_are_checked_as_the_cli_checks_them():
    # An unknown GPU type listed nothing (200 []), a misspelt filter listed everything.
    from fastapi.testclient import TestClient

    from service.http.app import app

    client = TestClient(app)
    unknown = client.get("/v1/recipes?hardware=hopper")
    assert (unknown.status_code == 404 and unknown.json()["field"] == "hardware"
            and "h100" in unknown.json()["suggestions"])
    misspelt = client.get("/v1/recipes?familly=llama")
    assert misspelt.status_code == 422 and misspelt.json()["detail"][0]["loc"] == ["query", "familly"]
    alias = client.get("/v1/recipes?hardware=h100-sxm&mode=sft")
    assert alias.status_code == 200 and alias.json() and {r["hardware"] for r in alias.json()} == {"h100"}


def test_recipes_filter_by_the_family_models_lists_too():
    # `models` shows "Llama 3", recipes carry Bridge's package name "llama".
    import recipe_index as index

    by_card = index.list_recipes(family="Llama 3")
    assert by_card and all(r.model and index.find_bundled_model(r.model).family == "Llama 3" for r in by_card)
    assert {r.name for r in by_card} < {r.name for r in index.list_recipes(family="llama")}


def test_models_filter_by_family_as_recipes_do_and_refuse_unknown_filters(client):
    llama = client.get("/v1/models?family=llama")
    assert llama.status_code == 200
    ids = {m["id"] for m in llama.json()}
    assert "llama3-8b" in ids and not any(i.startswith("qwen") for i in ids)
    assert {m["id"] for m in client.get("/v1/models?family=Llama%203").json()} <= ids  # the card's own family
    assert len(client.get("/v1/models").json()) > len(ids)
    assert client.get("/v1/models?family=nonesuch").json() == []
    misspelt = client.get("/v1/models?famly=llama")
    assert misspelt.status_code == 422 and misspelt.json()["detail"][0]["loc"] == ["query", "famly"]
    assert client.get("/v1/recipes?familly=llama").status_code == 422  # the same mechanism
