"""The rows a plan shows: distinct parallel shapes with their variants folded under them, the candidate sources'
choice first and marked, in the CLI text and JSON, the API and the page (service/plan/shown.py)."""

from __future__ import annotations

import json

from fastapi.testclient import TestClient

from service.cli.app import main
from service.http.app import create_app

QWEN_16_H100 = ["--model", "qwen3-30b-a3b", "--gpus", "16", "--gpu-type", "h100"]


def _shape(row: dict) -> tuple:
    return (row["tp"], row["pp"], (row["vp"] or 1) > 1, row["cp"], row["ep"], row["etp"], row["sharding"])


def test_top_counts_distinct_shapes_and_the_variants_fold_under_them(capsys):
    assert main(["plan", *QWEN_16_H100, "--top", "6", "--format", "json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    rows = answer["layouts"]
    assert len(rows) == 6 and len({_shape(r) for r in rows}) == 6
    folded = next(r for r in rows if r["variants"])
    for variant in folded["variants"]:  # a variant differs only in micro batch, VP or recompute
        assert variant["sharding"] == folded["sharding"]
        assert ((variant["vp"] or 1) > 1) == ((folded["vp"] or 1) > 1)
        assert (variant["micro_batch_size"], variant["vp"], variant["recompute"]) != (
            folded["micro_batch_size"], folded["vp"], folded["recompute"])
    estimate = [r for r in rows if r["layout_source"] == "estimate"]
    assert [r["estimate_rank"] for r in estimate] == sorted(r["estimate_rank"] for r in estimate)


def test_the_policys_choice_is_the_first_row_marked_with_its_estimate_and_rank(capsys):
    assert main(["plan", *QWEN_16_H100, "--top", "3", "--format", "json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    first = answer["layouts"][0]
    assert first["layout_source"] == "library" and first["source_recipe"] == answer["layout_source"]["recipe"]
    assert f"estimated {first['tokens_per_s_per_gpu']:,.0f} tokens/s/GPU" in answer["layout_source"]["summary"]
    assert any(r["layout_source"] == "transferred" and r["source_note"] for r in answer["layouts"][1:3])
    if answer["why_first"]:  # it names a row of the three shown
        number = int(answer["why_first"].split("first although row ")[1].split()[0])
        assert 2 <= number <= 3
    assert main(["plan", *QWEN_16_H100, "--top", "3"]) == 0
    text = capsys.readouterr().out
    assert f"      library: {first['source_recipe']} (estimate rank {first['estimate_rank']})" in text
    assert "layout source: library layout kept:" in text


def test_the_api_rows_and_the_page_fold_the_variants():
    client = TestClient(create_app())
    body = {"model": "qwen3-30b-a3b", "gpus": 16, "gpu_type": "h100"}
    planned = client.post("/v1/plan", json={**body, "top": 4}).json()
    assert len({_shape(r) for r in planned["layouts"]}) == 4
    assert planned["layout_source"]["band_basis"].startswith("the Qwen3 MoE family's")
    recommended = client.post("/v1/recommend", json={**body, "top": 4}).json()
    others = recommended["other_layouts"]
    assert others and all(_shape(r) != _shape(recommended["layout"]) for r in others)
    page = client.get("/recommend", params={**body, "goal": "pretrain"})
    assert page.status_code == 200
    assert "other variant(s) of this shape</summary>" in page.text
    assert '<span class="source-mark">transferred</span>' in page.text
