"""The OpenAPI schema: the bounds of every integer field, and defaults described as the recipes' own."""

from __future__ import annotations

from service.http import schemas as m
from tests.service.http.test_json_bodies import REQUEST


def test_the_schema_keeps_the_bounds_of_every_integer_field():
    """A whole-number type on the fields had turned minimum/maximum into raw ge/le."""
    for model in (m.ValidateRequest, m.PlanBody, m.RecommendBody):
        for name, prop in model.model_json_schema()["properties"].items():
            for branch in prop.get("anyOf", [prop]):
                if branch.get("type") == "integer":
                    assert "minimum" in branch and "maximum" in branch and "ge" not in branch, (model, name)


def test_plan_defaults_are_described_as_the_recipes(client):
    """The descriptions' example must be what the service answers, not a fixed 4096 / 32."""
    answer = client.post("/v1/plan", json={**REQUEST, "top": 1}).json()
    schema = client.get("/openapi.json").json()["components"]["schemas"]
    for name in ("PlanBody", "RecommendBody"):
        seq = schema[name]["properties"]["seq_length"]["description"]
        gbs = schema[name]["properties"]["global_batch_size"]["description"]
        assert f"llama3-8b pretrain: {answer['seq_length']})" in seq and "recipe" in seq.split(";")[1]
        assert f"llama3-8b pretrain: {answer['global_batch_size']})" in gbs
        assert "Only where the index has no recipe: 4096 for pretrain" in seq
        assert "default: 4096" not in seq and "(32 pretrain" not in gbs
