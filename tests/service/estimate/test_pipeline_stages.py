"""Estimates of uneven pipelines and expert layouts as Megatron places them: its stage split, the fullest
stage, the LM head's stage, the experts a rank holds, and the planner's fast totals."""

from __future__ import annotations

import pytest

from recipe_index import find_bundled_model, get_hardware
from service.estimate import constants as C
from service.estimate.memory import MemoryModel, model_shape
from service.estimate.steptime import StepTimeModel
from service.facts import Layout
from service.layouts.arithmetic import stage_split
from service.plan.planner import make_request, plan

GIB = 1024 ** 3


def shape(model_id: str):
    return model_shape(find_bundled_model(model_id))


@pytest.mark.parametrize("layers, pp, vp, split", [
    (80, 8, 1, (10, 10, 10)),   # even
    (126, 16, 1, (7, 8, 7)),    # embedding and loss counted as layers: 128 / 16
    (27, 16, 1, (6, 1, 7)),     # uneven first and last stages, middle stages of 1
    (61, 16, 1, (2, 4, 3)),
    (32, 1, 1, (32, 0, 32)),
    (30, 2, 1, (15, 0, 15)),    # two stages: no middle one
    (31, 2, 1, (15, 0, 16)),    # the embedding counted as a layer: 32 / 2
])
def test_stage_split_is_megatrons(layers, pp, vp, split):
    assert stage_split(layers, pp, vp) == split
    assert sum((split[0], split[1] * max(pp - 2, 0), split[2])) == layers or pp == 1
    if pp > 1:
        assert stage_split(layers, pp, vp, explicit=True) == (-(-layers // pp),) * 3


def test_an_uneven_pipeline_is_sized_by_its_fullest_stage():
    lite = shape("deepseek-v2-lite")  # 27 layers
    stages = MemoryModel(lite, world_size=16, seq_length=4096).state_bytes(1, 16, 1, 1, 1, "optimizer")
    assert max(stage.fraction for stage in stages) == pytest.approx(7 / 27)
    result = plan(make_request("deepseek-v2-lite", 16, "l40s"))
    seven_layers = lite.layer_dense_params * 7 / 27 * C.MEGATRON_WEIGHT_BYTES / GIB
    for row in (r for r in result.layouts if r.layout.pp == 16 and (r.layout.vp or 1) == 1):
        assert row.memory.weights >= seven_layers
    assert result.fitting[0].layout.pp != 16  # it was chosen at 45.2 of 45.6 GiB sized for 2 layers


def test_megatron_fsdp_gathers_only_the_ranks_own_experts():
    qwen = shape("qwen3-235b-a22b")
    model = MemoryModel(qwen, world_size=64, seq_length=4096)
    weights = {ep: model.estimate(Layout(ep=ep, etp=1, recompute="full"), "full").weights for ep in (8, 64)}
    assert weights[64] < weights[8]
    # Qwen3-235B: 128 experts of 3 x 4096 x 1536 per MoE layer; an EP 8 rank gathers 16 of them
    assert qwen.block_expert_params == 128 * 3 * 4096 * 1536
    assert qwen.unsharded_block_params(1, 8) - qwen.unsharded_block_params(1, 1) == pytest.approx(
        -112 * 3 * 4096 * 1536)
    dense = shape("llama3-8b")
    assert dense.unsharded_block_params(2, 4) == dense.largest_block_params / 2  # nothing to shard over EP


def test_the_lm_head_weighs_on_the_last_stage_unless_a_layout_string_balances_it():
    llama = shape("llama3-8b")
    times = [StepTimeModel(llama, get_hardware("h100"), world_size=16, seq_length=8192, global_batch_size=64,
                           precision="fp8").step_seconds(Layout(tp=8, pp=2, sp=True, recompute=rc))
             for rc in ("none", "selective", "full")]
    assert times == sorted(times)  # selective was 2 % faster than none: the head rounded to a whole layer
    dsv3 = shape("deepseek-v3")
    h100, h200 = [StepTimeModel(dsv3, get_hardware(hw), world_size=16, seq_length=4096, global_batch_size=64,
                                precision="fp32").step_seconds(Layout(tp=4, pp=2, ep=2, etp=1, sp=True,
                                                                      micro_batch_size=4))
                  for hw in ("h100", "h200")]
    assert h200 <= h100  # more HBM bandwidth, same FLOPs
    seventy = shape("llama3-70b")
    strict, balanced = [StepTimeModel(seventy, get_hardware("h100"), world_size=64, seq_length=8192,
                                      global_batch_size=128, explicit_layout=explicit)
                        .components(4, 8, 1, 1, 1, 4, True, 1, "selective", "optimizer")[1]
                        for explicit in (False, True)]
    assert strict > balanced  # 10 layers and the head on the last stage, against a balanced layout string


@pytest.mark.parametrize("model, world, layout", [
    ("gemma2-2b", 64, Layout(pp=8, recompute="selective")),            # 26 layers: 1 / 6 x 4 / 1 (middle fullest)
    ("deepseek-v2-lite", 16, Layout(pp=16, recompute="none")),         # 27 layers: 6 / 14 x 1 / 7
    ("llama31-405b", 256, Layout(tp=8, pp=16, sp=True, recompute="full")),  # 126 layers: 7 / 8 / 7
])
def test_the_planners_fast_totals_equal_the_estimate_on_uneven_splits(model, world, layout):
    """MemoryModel.totals (the planner's inner loop) and estimate() on splits with a middle stage."""
    model_memory = MemoryModel(shape(model), world_size=world, seq_length=4096)
    for micro_batches in (1, 4, 64):
        [[total]] = model_memory.totals(layout, [(1, micro_batches)], ("optimizer",), (layout.recompute,))
        assert total == pytest.approx(model_memory.estimate(layout, "optimizer", micro_batches).total, rel=1e-12)
