"""The step-time model: FLOPs per token, compute, bubble, communication placement, throughput and MFU."""

from __future__ import annotations

import pytest

from recipe_index import find_bundled_model, get_hardware
from service.estimate import constants as C
from service.estimate.memory import model_shape
from service.estimate.steptime import StepTimeModel, estimate_step_time, model_flops_per_token, pipeline_bubble
from service.facts import Layout


@pytest.fixture(scope="module")
def llama8b():
    return model_shape(find_bundled_model("llama3-8b"))


@pytest.fixture(scope="module")
def dsv3():
    return model_shape(find_bundled_model("deepseek-v3"))


def step(shape, layout, gpu="h100", world=8, seq=8192, gbs=128, **kw):
    return estimate_step_time(shape, get_hardware(gpu), layout, world_size=world, seq_length=seq,
                              global_batch_size=gbs, **kw)


def test_flops_per_token_is_6n_plus_attention(llama8b):
    n = llama8b.total_params - llama8b.embedding_params  # the embedding lookup does no matmul
    attention = 12 * 32 * 4096 * 8192 / 2  # 12·L·h·s, halved for causal masking
    assert model_flops_per_token(llama8b, 8192) == pytest.approx(6 * n + attention, rel=1e-6)


def test_moe_counts_active_parameters(dsv3):
    active = dsv3.layer_dense_params + dsv3.active_expert_params + dsv3.head_params
    assert model_flops_per_token(dsv3, 0) == pytest.approx(6 * active)
    assert 6 * 30e9 < model_flops_per_token(dsv3, 0) < 6 * 45e9  # DeepSeek-V3: 37B activated


def test_throughput_and_mfu_are_consistent(llama8b):
    t = step(llama8b, Layout(micro_batch_size=1))
    assert t.tokens_per_s_per_gpu * 8 * t.step_time_s == pytest.approx(128 * 8192)
    peak = get_hardware("h100").bf16_tflops * 1e12
    assert t.mfu == pytest.approx(model_flops_per_token(llama8b, 8192) * t.tokens_per_s_per_gpu / peak)
    assert 0.2 < t.mfu < C.MATMUL_EFFICIENCY["bf16"]


def test_step_is_the_sum_of_its_parts(llama8b):
    t = step(llama8b, Layout(tp=2, pp=2, cp=2, sp=True, micro_batch_size=1), world=16)
    parts = t.compute_s + t.bubble_s + t.tp_comm_s + t.cp_comm_s + t.ep_comm_s + t.pp_comm_s + t.dp_comm_s
    assert t.step_time_s == pytest.approx(parts + t.optimizer_s)
    assert t.tp_comm_s > 0 and t.cp_comm_s > 0 and t.pp_comm_s > 0 and t.ep_comm_s == 0
    assert t.moe_unattributed_s == 0  # dense: every second is attributed


def test_moe_step_carries_the_measured_factor_as_its_own_term(dsv3):
    lay = Layout(pp=8, vp=4, ep=64, micro_batch_size=1)
    t = step(dsv3, lay, gpu="gb200", world=512, seq=4096, gbs=4096)
    attributed = (t.compute_s + t.bubble_s + t.tp_comm_s + t.cp_comm_s + t.ep_comm_s + t.pp_comm_s + t.dp_comm_s
                  + t.optimizer_s)
    assert t.moe_unattributed_s == pytest.approx(attributed * (C.MOE_MEASURED_STEP_FACTOR - 1))
    assert t.step_time_s == pytest.approx(attributed + t.moe_unattributed_s)
    # Calibrated on Megatron only: the bundled trainer's estimate keeps its attributed terms.
    bundled = step(dsv3, lay, gpu="gb200", world=512, seq=4096, gbs=4096, engine="bundled")
    assert bundled.moe_unattributed_s == 0


def test_lora_skips_the_weight_gradient_gemms_and_reduces_only_adapters(llama8b):
    full = step(llama8b, Layout(micro_batch_size=1), world=8)
    lora = step(llama8b, Layout(micro_batch_size=1), world=8, peft=True)
    # GEMMs are 4N instead of 6N; attention and element-wise kernels are the same work.
    assert 0.6 < lora.compute_s / full.compute_s < 0.8
    assert lora.dp_comm_s < 0.05 * full.dp_comm_s and lora.optimizer_s < 0.05 * full.optimizer_s
    assert model_flops_per_token(llama8b, 0, peft=True) == pytest.approx(4 / 6 * model_flops_per_token(llama8b, 0))
    # Full recompute adds the forward: 2N on the 4N GEMMs (6/4), 1 on attention's 3 (4/3).
    recomputed = step(llama8b, Layout(micro_batch_size=1, recompute="full"), world=8, peft=True)
    assert 4 / 3 < recomputed.compute_s / lora.compute_s < 6 / 4


def test_lora_under_fsdp_still_gathers_the_frozen_base(llama8b):
    """FSDP shards the frozen base as the memory model does, so every forward and backward gathers it;
    only the gradient reduce-scatter and the optimizer shrink to the adapters."""
    kw = dict(world_size=16, seq_length=4096, global_batch_size=16)
    full = StepTimeModel(llama8b, get_hardware("h100"), engine="bundled", **kw)._dp_costs(
        1, 1, 1, 1, 1, "full", 16, 1.0)
    lora = StepTimeModel(llama8b, get_hardware("h100"), engine="bundled", peft=True, **kw)._dp_costs(
        1, 1, 1, 1, 1, "full", 16, 1.0)
    assert 0.4 * full[0] < lora[0] < full[0]  # the gathers stay; the fp32 gradient reduce is gone
    assert lora[2] < 0.05 * full[2]  # optimizer step over the adapters only
    ddp_full = StepTimeModel(llama8b, get_hardware("h100"), engine="bundled", **kw)._dp_costs(
        1, 1, 1, 1, 1, "none", 16, 1.0)
    ddp_lora = StepTimeModel(llama8b, get_hardware("h100"), engine="bundled", peft=True, **kw)._dp_costs(
        1, 1, 1, 1, 1, "none", 16, 1.0)
    assert ddp_lora[0] < 0.05 * ddp_full[0]  # a replicated base is never communicated


def test_pipeline_bubble_is_pp_minus_1_over_vp_micro_batches(llama8b):
    plain = step(llama8b, Layout(pp=4, micro_batch_size=1), world=8)
    interleaved = step(llama8b, Layout(pp=4, vp=2, micro_batch_size=1), world=8)
    m = 128 // 2  # DP = 8 / 4 = 2
    per_micro_batch = (plain.compute_s + plain.tp_comm_s + plain.cp_comm_s + plain.ep_comm_s + plain.pp_comm_s) / m
    assert plain.bubble_s == pytest.approx(3 * per_micro_batch)
    assert interleaved.bubble_s < plain.bubble_s * 0.6


def test_too_few_micro_batches_never_fill_the_pipeline(llama8b):
    """One micro batch per step still crosses every stage: PP2 with m=1 costs a whole model pass,
    whatever VP, so context parallelism (half the tokens per GPU, no bubble) beats it."""
    assert pipeline_bubble(4, 1, 8) == pytest.approx(3)
    assert pipeline_bubble(4, 2, 4) == pytest.approx(1.5)  # m == PP: both formulas agree
    assert pipeline_bubble(2, 12, 1) == pytest.approx(1)  # interleaving cannot help a lone micro batch
    assert pipeline_bubble(8, 4, 2) == pytest.approx(6 + 1 / 4)
    piped = step(llama8b, Layout(pp=2, vp=4, micro_batch_size=1), world=8, gbs=4, seq=4096)
    split = step(llama8b, Layout(cp=2, micro_batch_size=1), world=8, gbs=4, seq=4096)
    per_micro_batch = piped.compute_s + piped.pp_comm_s
    assert piped.bubble_s == pytest.approx(per_micro_batch)
    assert split.step_time_s < piped.step_time_s


def test_full_recompute_costs_a_forward(llama8b):
    none = step(llama8b, Layout(recompute="none"))
    full = step(llama8b, Layout(recompute="full"))
    assert full.compute_s / none.compute_s == pytest.approx(8 / 6, rel=0.05)  # Korthikanti et al. 2022: 8N vs 6N


def test_tp_beyond_the_nvlink_domain_is_slower(llama8b):
    """Per layer TP collectives over 16 GPUs: twice the hops of TP=8, at network latency and NIC bandwidth."""
    inside = step(llama8b, Layout(tp=8, sp=True), world=16, gbs=64)
    across = step(llama8b, Layout(tp=16, sp=True), world=16, gbs=64)
    model = StepTimeModel(llama8b, get_hardware("h100"), world_size=16, seq_length=8192, global_batch_size=64)
    assert model._link(16, 1)[0] < model._link(8, 1)[0] and model._link(16, 1)[1] > model._link(8, 1)[1]
    assert across.tp_comm_s > 1.5 * inside.tp_comm_s


def test_ring_bandwidth_counts_the_members_per_domain(llama8b):
    model = StepTimeModel(llama8b, get_hardware("h100"), world_size=64, seq_length=8192, global_batch_size=128)
    hw = get_hardware("h100")
    nvlink, _ = model._link(8, 1)
    one_nic, _ = model._link(8, 8)  # one member per node (TP=8): one NIC each
    all_nics, _ = model._link(64, 1)  # eight members per node share eight NICs
    assert nvlink == pytest.approx(hw.intra_node_gbps * 1e9 * C.NCCL_BUS_EFFICIENCY_NVLINK)
    assert one_nic == pytest.approx(hw.inter_node_gbps * 1e9 * C.NCCL_BUS_EFFICIENCY_NETWORK)
    assert all_nics == pytest.approx(min(nvlink, 8 * one_nic))


def test_expert_all_to_all_inside_nvlink_is_cheaper(dsv3):
    inside = step(dsv3, Layout(pp=16, ep=8, micro_batch_size=1, recompute="full"), world=128, seq=4096, gbs=512)
    across = step(dsv3, Layout(pp=16, ep=8, etp=2, tp=2, sp=True, micro_batch_size=1, recompute="full"),
                  world=256, seq=4096, gbs=512)
    wide = step(dsv3, Layout(pp=2, ep=64, micro_batch_size=1, recompute="full"), world=128, seq=4096, gbs=512)
    assert inside.ep_comm_s > 0
    assert across.ep_comm_s > inside.ep_comm_s  # EP x ETP = 16 spans two H100 nodes
    assert wide.ep_comm_s / wide.compute_s > inside.ep_comm_s / inside.compute_s


def test_fsdp_hides_behind_compute_on_nvl72_not_behind_one_nic(llama8b):
    """Megatron-FSDP gathers and reduces every micro batch: cheap inside an NVL72 rack, costly
    when each DP member has only its own NIC (TP = 8 per node)."""
    nvl72 = step(llama8b, Layout(micro_batch_size=1), gpu="gb200", world=64, gbs=256, sharding="full")
    one_nic = step(llama8b, Layout(tp=8, sp=True, micro_batch_size=1), gpu="h100", world=64, gbs=256, sharding="full")
    assert nvl72.dp_comm_s < 0.1 * nvl72.compute_s
    assert one_nic.dp_comm_s > 0.1 * one_nic.compute_s


def test_fp8_is_faster_but_not_twice(llama8b):
    bf16 = step(llama8b, Layout(), precision="bf16")
    fp8 = step(llama8b, Layout(), precision="fp8")
    assert 1.1 < bf16.step_time_s / fp8.step_time_s < 2.0


@pytest.mark.parametrize("model, gpu, precision, seq", [("llama3-8b", "h100", "bf16", 131072),
                                                       ("llama32-1b", "cpu", "fp32", 131072)])
def test_mfu_stays_below_the_efficiency_the_model_assumes(model, gpu, precision, seq):
    from service.plan.planner import make_request, plan

    result = plan(make_request(model, 8 if gpu != "cpu" else 2, gpu, seq_length=seq, global_batch_size=16,
                               precision=precision, engine="megatron" if gpu != "cpu" else "bundled"))
    ceiling = max(C.MATMUL_EFFICIENCY[precision], C.ATTENTION_EFFICIENCY)
    assert result.layouts and all(0 < r.time.mfu <= ceiling for r in result.layouts)
