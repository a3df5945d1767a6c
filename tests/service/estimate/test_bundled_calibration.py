"""The bundled engine's step-time estimates against FSDP2 runs (benchmarks/bundled_calibration.py): the
out-of-sample error, the MFU ceiling that keeps estimates within what such runs reached, and the provenance
line every answer carries."""

from __future__ import annotations

import math
import sys

import pytest
from fastapi.testclient import TestClient

from recipe_index import find_bundled_model, get_hardware
from recipe_index.measurements import fsdp2_calibration_rows
from service.estimate import constants as C
from service.estimate.memory import model_shape
from service.estimate.mfu_ceiling import mfu_ceiling
from service.http.app import create_app
from service.plan.planner import make_request, plan
from service.recommend.recommendation import recommend
from tests.paths import REPO

sys.path.insert(0, str(REPO / "benchmarks"))

import bundled_calibration as calibration  # noqa: E402


def test_every_published_row_names_its_source_and_why_it_is_left_out():
    import json

    rows = json.loads(calibration.PUBLISHED_FSDP2.read_text())
    assert len(rows) >= 50
    for row in rows:
        assert "@" in row["source"] and row["framework"] in ("torchtitan", "automodel")
        if row["left_out"] is None:
            assert find_bundled_model(row["model"]) is not None and get_hardware(row["hardware"])
            assert row["seq_length"] and row["tokens_per_s_per_gpu"]
    assert len(fsdp2_calibration_rows()) >= 8


def test_out_of_sample_error_against_fsdp2_runs_is_within_15_percent():
    rows = calibration.calibration_rows()
    shipped = {p: C.BUNDLED_MATMUL_EFFICIENCY[p] for p in calibration.GRID}
    outs = []
    try:
        for held in {calibration.setup(r) for r in rows}:
            calibration.fit([r for r in rows if calibration.setup(r) != held], shipped)
            outs += [calibration.log_error(r) for r in rows if calibration.setup(r) == held]
    finally:
        calibration._set(shipped)
    assert len(outs) == len(rows) >= 10
    assert calibration.median_abs(outs) <= 0.15


@pytest.mark.parametrize("model", ["llama32-1b", "llama32-3b", "llama31-8b", "qwen25-7b", "qwen25-32b", "llama31-70b"])
@pytest.mark.parametrize("gpu_type, gpus", [("h100", 8), ("h200", 8), ("h100", 64)])
@pytest.mark.parametrize("goal, seq", [("pretrain", 4096), ("pretrain", 8192), ("peft", 2048)])
def test_no_hopper_bf16_estimate_promises_more_mfu_than_fsdp2_runs_of_its_class(model, gpu_type, gpus, goal, seq):
    request = make_request(model, gpus, gpu_type, goal=goal, seq_length=seq, engine="bundled", precision="bf16",
                           global_batch_size=gpus * 4)
    result = plan(request)
    ceiling = mfu_ceiling(model_shape(request.model), request.model.id, request.hardware, "bf16")
    assert ceiling is not None and ceiling <= 0.45
    for row in result.fitting[:10]:
        assert row.time.mfu <= ceiling + 1e-9


def test_the_ceiling_keeps_fitting_layouts_ahead_of_those_that_do_not_fit():
    result = plan(make_request("llama31-8b", 8, "h100", seq_length=8192, engine="bundled", precision="bf16",
                               global_batch_size=8))
    fits = [row.fits for row in result.layouts]
    assert fits == sorted(fits, reverse=True)  # every fitting row before every other
    assert result.best.time.mfu == pytest.approx(mfu_ceiling(model_shape(result.request.model), "llama31-8b",
                                                             result.request.hardware, "bf16"), rel=1e-6)


def test_a_measurement_of_this_trainer_raises_the_ceiling_for_its_model_only():
    h200 = get_hardware("h200")
    own = mfu_ceiling(model_shape(find_bundled_model("llama32-1b")), "llama32-1b", h200, "bf16")
    other = mfu_ceiling(model_shape(find_bundled_model("llama32-3b")), "llama32-3b", h200, "bf16")
    assert own >= other > 0
    assert mfu_ceiling(model_shape(find_bundled_model("llama31-8b")), "llama31-8b", h200, "fp8") is None


def test_every_bundled_answer_says_what_its_estimates_are_calibrated_on():
    rec = recommend("llama31-8b", 8, "h100", engine="bundled", goal="sft")
    line = next(note for note in rec.notes if note.startswith("estimates calibrated on: "))
    assert "FSDP2 published runs: automodel, torchtitan" in line and rec.to_dict()["calibration"] in line
    measured = recommend("llama32-1b", 1, "h200", engine="bundled")
    assert measured.to_dict()["calibration"].startswith("measured on this trainer")
    megatron = recommend("llama31-8b", 8, "h100")
    assert megatron.to_dict()["calibration"].startswith("Megatron published runs")
    client = TestClient(create_app())
    planned = client.post("/v1/plan", json={"model": "llama31-8b", "gpus": 8, "gpu_type": "h100", "engine": "bundled"})
    assert planned.status_code == 200 and planned.json()["calibration"].startswith("FSDP2 published runs")
    page = client.get("/recommend", params={"model": "llama31-8b", "gpus": 8, "gpu_type": "h100",
                                            "engine": "bundled", "goal": "sft"})
    assert page.status_code == 200 and "estimates calibrated on: FSDP2 published runs" in page.text


def test_compiled_blocks_are_faster_by_what_torchtitan_measured():
    card, hw = find_bundled_model("llama31-8b"), get_hardware("h100")
    from service.estimate.steptime import StepTimeModel
    from service.facts import Layout

    speeds = [StepTimeModel(model_shape(card), hw, world_size=8, seq_length=8192, global_batch_size=16,
                            engine="bundled", compiled=compiled).estimate(
        Layout(micro_batch_size=2, recompute="selective"), "full").tokens_per_s_per_gpu for compiled in (False, True)]
    assert math.isclose(speeds[1] / speeds[0], 6667 / 5762, rel_tol=0.03)
