"""Step-time estimates against NVIDIA's published training throughput (benchmarks/step_time_published.py).

Floors under the benchmark's figures, so that a later change to the step-time model that makes the
estimates of published layouts worse fails here, and the MoE calibration's one promise: it rescales
every layout of a request alike, so the planner's ranking does not depend on it.
"""

from __future__ import annotations

import json
import math
import sys

import pytest

from service.estimate import constants as C
from service.plan.planner import make_request, plan
from tests.paths import REPO

sys.path.insert(0, str(REPO / "benchmarks"))

import step_time_published as published  # noqa: E402


@pytest.fixture(scope="module")
def rows():
    return published.score(json.loads(published.DATA.read_text()))


def test_every_scored_record_is_a_valid_published_layout(rows):
    assert len(rows) >= 300
    for row in rows:
        r = row["r"]
        assert r["source"] and row["measured"] > 0 and row["estimate"] > 0
        assert r["num_gpus"] % (r["tp"] * r["pp"] * r["cp"]) == 0


@pytest.mark.parametrize("kind, median_range, within_30", [("dense", (0.92, 1.15), 0.80), ("moe", (0.85, 1.18), 0.60)])
def test_estimates_match_published_throughput(rows, kind, median_range, within_30):
    subset = [row for row in rows if row["kind"] == kind]
    summary = published.summarise(subset)
    assert median_range[0] <= summary["median"] <= median_range[1]
    assert summary["within_30"] >= within_30 * summary["n"]


def test_lora_estimates_count_no_weight_gradients(rows):
    """With 6N GEMMs for a frozen base, every published LoRA run looked 25 % faster than estimated."""
    lora = [row for row in rows if row["r"]["mode"] == "peft"]
    assert len(lora) >= 5
    logs = [math.log(row["estimate"] / row["measured"]) for row in lora]
    assert abs(sum(logs) / len(logs)) < math.log(1.15)


def test_moe_calibration_leaves_the_ranking_alone(monkeypatch):
    request = make_request("qwen3-30b-a3b", 16, "h100", goal="pretrain", seq_length=4096, global_batch_size=512,
                           precision="fp8", engine="megatron")

    def ranking():
        p = plan(request)
        return [(row.layout, row.sharding) for row in p.fitting], [row.tokens_per_s for row in p.fitting]

    factor = C.MOE_MEASURED_STEP_FACTOR
    assert factor > 1
    calibrated_order, calibrated_tps = ranking()
    monkeypatch.setattr(C, "MOE_MEASURED_STEP_FACTOR", 1.0)
    plain_order, plain_tps = ranking()
    assert calibrated_order == plain_order and len(plain_order) > 10
    for calibrated, plain in zip(calibrated_tps, plain_tps):
        assert calibrated == pytest.approx(plain / factor)


def test_recommend_says_when_an_estimate_carries_the_moe_factor():
    from service.recommend.recommendation import recommend

    moe = recommend("qwen3-30b-a3b", 16, "h100")
    dense = recommend("llama3-8b", 8, "h100")
    assert any(f"x{C.MOE_MEASURED_STEP_FACTOR:g}" in note for note in moe.notes)
    assert not any("MoE step times" in note for note in dense.notes)
    assert "MoE step times" not in moe.config_yaml  # a note on the estimate, not on the config
    t = moe.best.time
    assert t.moe_unattributed_s == pytest.approx(t.step_time_s * (1 - 1 / C.MOE_MEASURED_STEP_FACTOR))


def test_plan_notes_the_moe_factor_in_text_json_and_http():
    from fastapi.testclient import TestClient

    from service.http.app import create_app
    from service.plan.report import format_text, plan_json

    moe = plan(make_request("qwen3-30b-a3b", 16, "h100"))
    dense = plan(make_request("llama3-8b", 8, "h100"))
    assert plan_json(moe, 3)["notes"] and plan_json(dense, 3)["notes"] == []
    assert "note: MoE step times include" in format_text(moe, 3)
    response = TestClient(create_app()).post("/v1/plan",
                                             json={"model": "qwen3-30b-a3b", "gpus": 16, "gpu_type": "h100"})
    assert response.status_code == 200 and any("MoE step times" in n for n in response.json()["notes"])
