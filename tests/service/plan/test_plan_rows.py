"""A plan row says which pipeline stage its memory figures describe, and whether Megatron Bridge's library
recipe can place its pipeline."""

from __future__ import annotations

import json

import pytest

from service.cli.app import main
from service.layouts.bridge_tables import PIPELINE_LAYOUT_TABLES, needs_unwritten_layout
from service.plan.planner import make_request, plan


@pytest.fixture(scope="module")
def kimi_512():
    return plan(make_request("kimi-k2", 512, "h100"))


def test_memory_figures_name_the_stage_they_describe():
    rows = plan(make_request("llama3-70b", 64, "h100", seq_length=8192, global_batch_size=128)).layouts
    roles = {row.memory.stage for row in rows}
    assert "only" in roles and roles & {"first", "middle", "last"}
    for row in rows:
        assert (row.memory.stage == "only") == (row.layout.pp == 1)
        assert row.to_dict()["memory_stage"] == row.memory.stage


@pytest.mark.parametrize("model, gpus, gpu_type, batch, pp, stage", [
    ("deepseek-v2-lite", 16, "l40s", 32, 16, "last"),  # 27 layers over 16 stages: 6 / 14 x 1 / 7
    ("llama3-70b", 64, "h100", 1024, 4, "first"),      # even 20s: the first stage keeps 4 micro batches (1F1B)
])
def test_the_named_stage_is_the_fullest_one(model, gpus, gpu_type, batch, pp, stage):
    request = make_request(model, gpus, gpu_type, global_batch_size=batch)
    rows = [r for r in plan(request).layouts if r.layout.pp == pp and r.layout.vp is None]
    assert rows and {r.memory.stage for r in rows} == {stage}


def test_plan_json_marks_pipelines_the_library_recipe_cannot_place(kimi_512):
    table = PIPELINE_LAYOUT_TABLES["kimi-k2"]
    data = kimi_512.to_dict()
    marked = [row for row in data["layouts"] if row["needs_pipeline_layout_string"]]
    assert marked and len(marked) < len(data["layouts"])
    for row in data["layouts"]:
        pair = (row["pp"], row["vp"] or 1)
        assert row["needs_pipeline_layout_string"] == (row["pp"] > 1 and pair not in table)
        assert row["needs_pipeline_layout_string"] == needs_unwritten_layout("kimi-k2", 61, *pair)


def test_the_bundled_engine_never_needs_a_layout_string():
    result = plan(make_request("tiny-llama", 2, "cpu", engine="bundled"))
    assert result.layouts and not any(row.to_dict()["needs_pipeline_layout_string"] for row in result.layouts)


def test_the_text_plan_and_the_not_fitting_reason_say_it_too(capsys, kimi_512):
    flags = ["plan", "--model", "kimi-k2", "--gpus", "512", "--gpu-type", "h100", "--top", "0"]
    assert main(flags) == 0
    text = capsys.readouterr().out
    assert main(flags + ["--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)["layouts"]
    flagged = [line for line in text.splitlines() if line.endswith("needs a layout string (RA-L019)")]
    assert 0 < len(flagged) == sum(row["needs_pipeline_layout_string"] for row in rows) < len(rows)
    not_fitting = next(r for r in kimi_512.layouts if not r.fits and r.layout.pp > 1)
    assert f"on its {not_fitting.memory.stage} pipeline stage" in kimi_512.why_not_fitting(not_fitting)


def test_the_api_schema_documents_the_new_keys():
    from fastapi.testclient import TestClient

    from service.http.app import app

    client = TestClient(app)
    layout = client.get("/openapi.json").json()["components"]["schemas"]["LayoutOut"]
    assert {"memory_stage", "needs_pipeline_layout_string"} <= set(layout["required"])
    answer = client.post("/v1/plan", json={"model": "kimi-k2", "gpus": 512, "gpu_type": "h100", "top": 5})
    assert answer.status_code == 200
    rows = answer.json()["layouts"]
    assert all(isinstance(row["needs_pipeline_layout_string"], bool) for row in rows)
    json.dumps(rows)


@pytest.mark.parametrize("model, gpus, engine", [("llama3-70b", 32, "megatron"), ("qwen3-30b-a3b", 16, "megatron"),
                                                 ("llama32-1b", 8, "bundled")])
def test_a_row_keeps_the_step_time_terms_it_was_ranked_by(model, gpus, engine):
    rows = plan(make_request(model, gpus, "h100", engine=engine)).layouts
    fitting = [row for row in rows if row.fits]
    assert fitting  # rows that fit keep their terms; the others are estimated when asked
    for row in rows:
        fresh = row.estimators.time.estimate(row.layout, row.sharding)
        assert row.time == fresh and row.tokens_per_s in (None, fresh.tokens_per_s_per_gpu)
