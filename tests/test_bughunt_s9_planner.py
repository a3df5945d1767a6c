"""Bug hunt s9 (notes/bughunt_s9_planner.md): the planner's models against Megatron's placement.

- #1 layers that do not divide over PP are sized by the split Megatron uses (stage_split), not
  ceil(L/PP): 27 layers over 16 stages put 7 on the last one;
- #2 a (PP, VP) pair outside a library recipe's layout table is said (RA-L019);
- #3 Megatron-FSDP gathers only an EP rank's own experts;
- #4 the LM head sits on the last stage unless a layout string balances it: no jump of a whole layer;
- #6 CP does not shard weights (RA-M001); #7 the bundled engine times DDP next to FSDP2.
"""

from __future__ import annotations

import pytest
import yaml

from recipe_index import find_bundled_model, get_hardware
from service import constants as C
from service.facts import Layout
from service.memory import MemoryModel, model_shape
from service.planner import make_request, plan
from service.rules.sizes import stage_split
from service.steptime import StepTimeModel
from service.validate import validate_text

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
                        .components(4, 8, 1, 1, 1, 4, True, 1, "selective", "optimizer")[1] for explicit in (False, True)]
    assert strict > balanced  # 10 layers and the head on the last stage, against a balanced layout string


def _megatron(model: str, pp: int, vp=None, gpus: int = 512) -> str:
    return yaml.safe_dump({
        "model": {"pretrained_model_name_or_path": model},
        "distributed": {"strategy": "megatron", "tp_size": 1, "pp_size": pp, "vp_size": vp, "ep_size": 16,
                        "pipeline_layout": "explicit"},
        "dataset": {"seq_length": 4096},
        "step_scheduler": {"global_batch_size": 4096, "local_batch_size": 1},
        "hardware": {"gpu_type": "h100", "gpus_per_node": 8, "num_nodes": gpus // 8},
    })


@pytest.mark.parametrize("model, pp, vp, warned", [
    ("kimi-k2", 32, None, True),      # the pair recommend picked: Bridge's builder raises for it
    ("kimi-k2", 16, None, False),     # in the table
    ("kimi-k2", 8, 2, False),
    ("deepseek-v3", 2, None, True),   # its setter leaves the layout unset: 61 layers need one
    ("glm-45v", 2, None, False),      # so does GLM-4.5V's, and 46 layers split evenly over 2
])
def test_a_pipeline_outside_the_library_recipes_table_is_said(model, pp, vp, warned):
    found = [f for f in validate_text(_megatron(model, pp, vp), "c.yaml").findings if f.code == "RA-L019"]
    assert bool(found) is warned
    if warned:
        assert found[0].severity == "warning" and "(16, 1)" in found[0].fix
        assert "pipeline_model_parallel_layout" in found[0].fix
        assert ("raises ValueError" in found[0].message) is (model == "kimi-k2")


def test_context_parallel_does_not_shard_the_weights():
    text = yaml.safe_dump({
        "model": {"pretrained_model_name_or_path": "llama3-70b"},
        "distributed": {"strategy": "megatron", "tp_size": 1, "pp_size": 1, "cp_size": 2},
        "dataset": {"seq_length": 8192},
        "step_scheduler": {"global_batch_size": 8, "local_batch_size": 1},
        "hardware": {"gpu_type": "h100", "gpus_per_node": 2, "num_nodes": 1},
    })
    [finding] = [f for f in validate_text(text, "c.yaml").findings if f.code == "RA-M001"]
    assert finding.severity == "error" and "131.4 GiB for its weights alone" in finding.message


def test_the_bundled_engine_times_ddp_next_to_fsdp2():
    result = plan(make_request("llama32-1b", 64, "l40s", engine="bundled", global_batch_size=4096, seq_length=4096))
    best = result.fitting[0]
    assert best.sharding == "none"  # DDP: fits here and communicates less than FSDP2
    fsdp2 = [r for r in result.fitting if r.sharding == "full"]
    assert fsdp2 and best.tokens_per_s > max(r.tokens_per_s for r in fsdp2)


@pytest.mark.parametrize("model, gpus", [("kimi-k2", 512), ("moonlight-16b", 64)])
def test_recommend_prefers_a_pipeline_the_library_recipe_can_launch(model, gpus):
    """Review s9 #2: Kimi K2 on 512 H100 was recommended at PP 32, which its recipe's builder refuses."""
    from service.recommend import recommend
    from service.rules.layout import PIPELINE_LAYOUT_TABLES

    rec = recommend(model, gpus, "h100")
    lay = rec.best.layout
    assert lay.pp == 1 or (lay.pp, lay.vp_or_1) in PIPELINE_LAYOUT_TABLES[model], lay
    assert not [f for f in rec.findings if f.code == "RA-L019"]
    assert "megatron_bridge" in rec.commands


def test_plan_rows_equal_fresh_estimates_of_their_layout():
    """Review s9 #1: the data-parallel cost was cached per (TP, PP, CP, EP, ETP), so a VP 2 row reused VP 1's."""
    from service.steptime import estimate_step_time

    request = make_request("gemma2-2b", 64, "h100")
    result = plan(request)
    rows = [r for r in result.fitting if r.layout.pp > 1][:40]
    assert any((r.layout.vp or 1) > 1 for r in rows)
    for row in rows:
        fresh = estimate_step_time(shape("gemma2-2b"), request.hardware, row.layout, world_size=64,
                                   seq_length=request.seq_length, global_batch_size=request.global_batch_size,
                                   precision=request.precision, sharding=row.sharding)
        assert row.time.step_time_s == pytest.approx(fresh.step_time_s, rel=1e-12), row.layout


@pytest.mark.parametrize("model, world, layout", [
    ("gemma2-2b", 64, Layout(pp=8, recompute="selective")),            # 26 layers: 1 / 6 x 4 / 1 (middle fullest)
    ("deepseek-v2-lite", 16, Layout(pp=16, recompute="none")),         # 27 layers: 6 / 14 x 1 / 7
    ("llama31-405b", 256, Layout(tp=8, pp=16, sp=True, recompute="full")),  # 126 layers: 7 / 8 / 7
])
def test_the_planners_fast_totals_equal_the_estimate_on_uneven_splits(model, world, layout):
    """Review s9 #9: MemoryModel.totals (the planner's inner loop) and estimate() on splits with a middle stage."""
    model_memory = MemoryModel(shape(model), world_size=world, seq_length=4096)
    for micro_batches in (1, 4, 64):
        [[total]] = model_memory.totals(layout, [(1, micro_batches)], ("optimizer",), (layout.recompute,))
        assert total == pytest.approx(model_memory.estimate(layout, "optimizer", micro_batches).total, rel=1e-12)


def test_expert_parallelism_shards_only_the_experts_weights():
    """Review s9 #12: RA-M001 skipped every layout with EP > 1, whatever its dense part."""
    def m001(model: str, ep: int, gpus: int):
        text = yaml.safe_dump({
            "model": {"pretrained_model_name_or_path": model},
            "distributed": {"strategy": "megatron", "tp_size": 1, "pp_size": 1, "ep_size": ep},
            "dataset": {"seq_length": 4096},
            "step_scheduler": {"global_batch_size": gpus, "local_batch_size": 1},
            "hardware": {"gpu_type": "h100", "gpus_per_node": 8, "num_nodes": gpus // 8},
        })
        return [f for f in validate_text(text, "c.yaml").findings if f.code == "RA-M001"]

    [finding] = m001("deepseek-v3", 8, 8)  # 1/8 of 256 experts is still over 150 GiB
    assert "1/8 of the routed experts" in finding.message
    assert m001("deepseek-v3", 64, 64) == []  # its dense part and 4 experts a layer fit
    assert m001("qwen3-30b-a3b", 8, 8) == []


@pytest.mark.parametrize("model, gpus, gpu_type, goal", [
    ("moonlight-16b", 8, "h100", "sft"),     # PP 1 on the recipe's own hardware
    ("moonlight-16b", 64, "l40s", "pretrain"),  # PP 4, a pair of its table, over 27 layers
    ("glm-45v", 256, "h100", "sft"),         # PP 1, which GLM-4.5V's table does not list
])
def test_a_pipeline_the_recipes_builder_places_gets_its_bridge_command(model, gpus, gpu_type, goal):
    """Bug hunt s9d #1/#2: a changed pipeline_layout marker withheld the command even where the library
    recipe's layout builder places the pipeline itself."""
    from service.recommend import recommend

    rec = recommend(model, gpus, gpu_type, goal=goal)
    assert "megatron_bridge" in rec.commands, rec.notes
    assert "pipeline_layout" not in rec.commands["megatron_bridge"]
    assert not any("layout string for PP 1" in note for note in rec.notes)


def test_an_uneven_pipeline_outside_a_falling_back_table_is_said():
    """Bug hunt s9d #3: GLM-4.5V's builder leaves the layout unset outside its table; 46 layers over 4 x 12."""
    [finding] = [f for f in validate_text(_megatron("glm-45v", 4, 12, gpus=128), "c.yaml").findings
                 if f.code == "RA-L019"]
    assert "leaves the layout unset" in finding.message and "46 decoder layers" in finding.message


@pytest.mark.parametrize("gpus, where", [(32, "fit on these 32 h100 GPUs"), (16, "fit on 32 h100 GPUs")])
def test_a_length_cp_and_sp_cannot_split_is_named_as_what_stands_in_the_way(gpus, where):
    """Bug hunt s9d #4: 131,070 tokens (2 x 3 x 5 x 17 x 257) sent users to 15,360 GPUs; 131,072 fit on 32."""
    from service.recommend import Impossible, recommend

    with pytest.raises(Impossible) as err:
        recommend("llama3-70b", gpus, "h100", seq_length=131070)
    assert err.value.field == "seq_length"
    assert f"131072 tokens {where}" in str(err.value) and "e.g. 131072" in err.value.fix
    with pytest.raises(Impossible) as err:
        recommend("llama3-70b", 8, "h100", seq_length=131072)  # a splittable length: the GPU count it is
    assert err.value.field == "gpus" and err.value.gpus_needed == 32
