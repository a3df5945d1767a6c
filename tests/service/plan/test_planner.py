"""The planner: enumeration obeys the rules and the engine, fit and ranking, impossible requests, the CLI."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from recipe_index.errors import UnknownHardwareError
from service.cli.app import main
from service.estimate import constants as C
from service.facts import Layout
from service.plan.planner import PlanError, explain_layout, facts_for, make_request, plan, rank
from service.plan.sizing import gpus_needed
from service.validate.checks import check_layout
from service.validate.rules.memory_fit import memory_fits
from tests.service.estimate.test_pipeline_stages import shape
from trainer.contract.capabilities import CAPABILITIES

LAYOUT_KEYS = {"tp", "pp", "vp", "cp", "ep", "etp", "dp", "sp", "micro_batch_size", "grad_accumulation_steps",
               "recompute", "sharding", "memory_gib", "memory_stage", "fits", "step_time_s", "tokens_per_s_per_gpu",
               "mfu", "needs_pipeline_layout_string"}


@pytest.fixture(scope="module")
def llama70b_64():
    return plan(make_request("llama3-70b", 64, "h100", seq_length=8192, global_batch_size=128))


@pytest.fixture(scope="module")
def qwen_moe_16():
    return plan(make_request("qwen3-30b-a3b", 16, "h100", seq_length=4096, global_batch_size=256))


def test_every_layout_divides_the_world_and_passes_the_rules(llama70b_64):
    req = llama70b_64.request
    assert llama70b_64.layouts
    for row in llama70b_64.layouts[::7]:
        lay = row.layout
        assert lay.tp * lay.pp * lay.cp * row.dp == req.world_size
        assert row.grad_accumulation_steps * lay.micro_batch_size * row.dp == req.global_batch_size
        errors = [f for f in check_layout(facts_for(req, lay, row.strategy)) if f.severity == "error"]
        assert not errors, (lay, errors)


def test_fitting_layouts_come_first_ranked_by_throughput(llama70b_64):
    rows = llama70b_64.layouts
    fits = [r.fits for r in rows]
    assert fits[0] and fits == sorted(fits, reverse=True)
    fitting = llama70b_64.fitting
    best = max(r.tokens_per_s for r in fitting)
    # Ties within ESTIMATE_TIE_TOLERANCE may reorder; nothing clearly faster is ranked below.
    assert fitting[0].tokens_per_s >= best * (1 - C.ESTIMATE_TIE_TOLERANCE)
    usable = llama70b_64.usable_gib
    assert all(r.memory.total <= usable + 1e-9 for r in fitting)
    assert all(r.memory_total_gib > usable for r in rows if not r.fits)


def test_megatron_fsdp_is_planned_only_without_pipeline(llama70b_64):
    rows = llama70b_64.layouts
    fsdp = [r for r in rows if r.sharding == "full"]
    assert fsdp and any(r.layout.pp > 1 for r in rows)
    assert all(r.layout.pp == 1 for r in fsdp)


def _tied(tps: float, pp: int, vp=None, tp: int = 1, memory: float = 40.0):
    return SimpleNamespace(structure=Layout(tp=tp, pp=pp, vp=vp), fits=True, tokens_per_s=tps, memory_total_gib=memory)


def test_ties_avoid_thin_stages_and_pipelines_without_vp():
    # 64 layers: PP 32 leaves 2 per stage. All four are within the tie tolerance of the fastest.
    thin, no_vp, interleaved, tp2 = _tied(1000, 32, 2), _tied(990, 4), _tied(960, 4, vp=2), _tied(995, 1, tp=2)
    order = rank([thin, no_vp, interleaved, tp2], layers=64)
    assert order == [interleaved, no_vp, tp2, thin]
    # Outside the tolerance the estimate decides.
    clearly_faster = _tied(1000 / (1 - 2 * C.ESTIMATE_TIE_TOLERANCE), 32)
    assert rank([interleaved, clearly_faster], layers=64)[0] is clearly_faster


def test_plan_json_has_the_design_keys(llama70b_64):
    data = llama70b_64.to_dict(top=3)
    assert {"model", "hardware", "layouts"} <= set(data) and data["model"] == "llama3-70b"
    assert len(data["layouts"]) == 3
    for layout in data["layouts"]:
        assert set(layout) == LAYOUT_KEYS
        assert set(layout["memory_gib"]) == {"weights", "grads", "optimizer", "activations", "other", "total"}
    json.dumps(data)


def test_moe_layouts_use_expert_parallel(qwen_moe_16):
    assert any(r.layout.ep > 1 for r in qwen_moe_16.fitting)
    for row in qwen_moe_16.layouts:
        lay = row.layout
        assert 128 % lay.ep == 0 and 16 % (lay.pp * lay.ep * lay.etp) == 0
        assert lay.etp == (1 if lay.ep > 1 else lay.tp)  # Bridge's default


def test_bundled_engine_uses_only_declared_capabilities():
    result = plan(make_request("llama3-8b", 8, "h100", seq_length=4096, global_batch_size=64, engine="bundled"))
    assert result.fitting
    strategies = set(CAPABILITIES["strategies"])
    for row in result.layouts:
        lay = row.layout
        assert lay.ep == 1
        assert row.strategy in strategies
        if lay.tp > 1:
            assert row.strategy == "fsdp2"  # the trainer refuses TP with DDP
        if lay.pp > 1:  # the bundled pipeline: FSDP2 within each stage, neither TP nor CP (RA-E008)
            assert row.strategy == "fsdp2" and lay.tp == lay.cp == 1
    assert {r.layout.tp for r in result.layouts} > {1}
    assert {r.layout.pp for r in result.layouts} > {1} and {r.layout.vp for r in result.layouts} > {None}


def test_bundled_engine_rejects_an_unbuilt_moe_family_with_the_rule_reason():
    result = plan(make_request("olmoe-7b", 8, "h100", engine="bundled"))
    assert not result.layouts and "RA-E002" in result.rejections


def test_bundled_engine_plans_ep_for_qwen3_moe_and_rejects_tp_on_its_moe_layers():
    result = plan(make_request("qwen3-30b-a3b", 8, "h100", engine="bundled"))
    assert result.fitting and all(r.layout.tp == 1 and r.layout.etp == 1 for r in result.layouts)
    assert {r.layout.ep for r in result.layouts} > {1}
    assert "RA-E007" in result.rejections  # TP > 1 (and selective recompute with EP), with the reason


def test_bundled_expert_parallel_rows_pass_the_rules_with_the_recompute_they_carry():
    # The rules are checked on each parallel shape; the recompute is picked per row afterwards, so a row
    # must not pick one the trainer refuses for that shape (selective with EP: RA-E007).
    result = plan(make_request("moonlight-16b", 16, "h100", engine="bundled", seq_length=4096, global_batch_size=1024))
    ep_rows = [r for r in result.layouts if r.layout.ep > 1]
    assert ep_rows and any(r.layout.recompute == "selective" for r in result.layouts if r.layout.ep == 1)
    for row in ep_rows:
        errors = [f for f in check_layout(facts_for(result.request, row.layout, row.strategy))
                  if f.severity == "error"]
        assert row.layout.recompute != "selective" and not errors, (row.layout, errors)


def test_bundled_fp8_plans_data_parallel_on_hopper_and_nothing_on_cpu(capsys):
    hopper = plan(make_request("tiny-llama", 2, "h100", engine="bundled", precision="fp8"))
    assert hopper.fitting and {r.layout.tp for r in hopper.layouts} == {1}
    assert "RA-E003" in hopper.rejections  # the TP=2 shape, with its reason
    cpu = plan(make_request("tiny-llama", 2, "cpu", engine="bundled", precision="fp8"))
    assert not cpu.layouts and "RA-E003" in cpu.rejections
    assert main(["plan", "--model", "tiny-llama", "--gpus", "2", "--gpu-type", "cpu", "--goal", "pretrain",
                 "--engine", "bundled", "--precision", "fp8"]) == 0
    out = capsys.readouterr().out
    assert "no layout on 2 x cpu passes the rules" in out and "RA-E003" in out
    assert "GPU count" not in out  # more GPUs of a type without fp8 would not help


def test_megatron_dimensions_all_appear(llama70b_64):
    rows = llama70b_64.layouts
    assert {r.layout.tp for r in rows} >= {1, 2, 4, 8}
    assert {r.layout.pp for r in rows} >= {1, 2, 4, 8}
    assert any(r.layout.vp for r in rows) and {r.layout.cp for r in rows} >= {1, 2}
    assert {r.layout.recompute for r in rows} >= {"none", "selective", "full"}
    assert {r.sharding for r in rows} == {"optimizer", "full"}


def test_tiny_model_on_cpu_fits():
    result = plan(make_request("tiny-llama", 2, "cpu", seq_length=64, global_batch_size=16, engine="bundled"))
    assert result.best is not None and result.best.dp == 2


def test_nothing_fits_and_gpus_needed_finds_a_count_that_does():
    req = make_request("llama3-70b", 1, "h100", seq_length=8192, global_batch_size=512)
    assert plan(req).best is None
    needed = gpus_needed(req)
    assert needed is not None and needed >= 8
    assert plan(req.with_world(needed)).best is not None
    assert plan(req.with_world(needed - 8)).best is None  # the fewest: one node less does not fit
    small = make_request("llama3-8b", 1, "h100")  # fits inside one node: the count is not rounded to 8
    assert plan(small).best is None and gpus_needed(small) == 2 and plan(small.with_world(2)).best is not None


def test_explicit_pipeline_layouts_for_models_whose_recipes_use_them():
    """DeepSeek-V3's 61 layers do not split over PP=4 x VP=4; its recipes place them explicitly."""
    req = make_request("deepseek-v3", 256, "gb200", seq_length=4096, global_batch_size=4096)
    result = plan(req)
    row = result.find(Layout(pp=4, vp=4, ep=64, micro_batch_size=1))
    assert row is not None
    llama = make_request("llama3-70b", 64, "h100")
    errors = [f.code for f in explain_layout(llama, Layout(pp=3, micro_batch_size=1)) if f.severity == "error"]
    assert "RA-L011" in errors or "RA-L006" in errors


def _memory_violation(result, row):
    facts = facts_for(result.request, row.layout, row.strategy)
    facts.extra = {"sharding": row.sharding}  # what the validator reads from the config
    return memory_fits(facts)


def test_memory_fit_rule_agrees_with_the_plan(llama70b_64):
    """The rule uses the planner's estimator: it flags exactly the layouts above the warning line,
    and an estimate above the GPU says "exceeds" (a warning for Megatron configs, whose recipes may
    carry memory savers the schema does not state)."""
    capacity = llama70b_64.request.hardware.memory_gib
    for row in (llama70b_64.fitting[0], llama70b_64.layouts[-1]):
        violation = _memory_violation(llama70b_64, row)
        assert (violation is not None) == (row.memory.total > capacity * C.MEMORY_WARNING_FRACTION)
    over = _memory_violation(llama70b_64, llama70b_64.layouts[-1])
    assert over.severity == "warning" and "exceeds" in over.message and "offload" in over.message


def test_memory_fit_rule_is_an_error_for_the_bundled_trainer():
    # 4 GPUs: with its fused loss the bundled trainer's worst 8-GPU layout no longer passes 80 GiB
    result = plan(make_request("llama3-8b", 4, "h100", seq_length=8192, global_batch_size=64, engine="bundled"))
    worst = result.layouts[-1]
    assert not worst.fits and worst.memory.total > 80
    violation = _memory_violation(result, worst)
    assert violation.severity is None and "exceeds the 80 GiB" in violation.message  # the rule's default: error
    assert "local_batch_size" in violation.fix or "activation_checkpointing" in violation.fix
    assert _memory_violation(result, result.best) is None or result.best.memory.total > 72


def test_bad_request_values_name_the_field():
    with pytest.raises(PlanError) as err:
        make_request("llama3-8b", 8, "h100", goal="finetune")
    assert err.value.field == "goal"
    with pytest.raises(UnknownHardwareError) as hw:
        make_request("llama3-8b", 8, "h200x")
    assert "h100" in str(hw.value)


def test_cli_plan_json_and_text(capsys):
    assert main(["plan", "--model", "llama3-8b", "--gpus", "8", "--gpu-type", "h100", "--format", "json",
                 "--top", "4"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert len(data["layouts"]) == 4 and data["layouts"][0]["fits"]
    assert data["seq_length"] == 8192  # the recipe's convergence contract fills what the flags leave out
    assert main(["plan", "--model", "llama3-70b", "--gpus", "2", "--gpu-type", "h100"]) == 0
    out = capsys.readouterr().out
    assert "does not fit" in out and "found to fit it" in out


def test_cli_plan_unknown_gpu_exits_2(capsys):
    assert main(["plan", "--model", "llama3-8b", "--gpus", "8", "--gpu-type", "tpu-v5"]) == 2
    err = capsys.readouterr().err
    assert "unknown GPU type" in err and "h100" in err and "gb200" in err


def test_cli_plan_without_a_precision_reports_the_rule_not_a_missing_precision(capsys):
    # olmoe-7b has no bundled recipe: the precision comes from its contract, and the bundled trainer's
    # MoE-family rule is what the user reads.
    assert main(["plan", "--model", "olmoe-7b", "--gpus", "2", "--gpu-type", "cpu", "--engine", "bundled"]) == 0
    captured = capsys.readouterr()
    assert "unknown precision" not in captured.err + captured.out
    assert "RA-E002" in captured.out and "MoE" in captured.out and ", fp32," in captured.out


@pytest.mark.parametrize("flag, field, least", [("--seq-length", "seq_length", 2),
                                                ("--global-batch-size", "global_batch_size", 1)])
@pytest.mark.parametrize("command", ["plan", "recommend"])
def test_cli_zero_is_rejected_like_a_negative_value(capsys, command, flag, field, least):
    assert main([command, "--model", "tiny-llama", "--gpus", "2", "--gpu-type", "cpu", "--engine", "bundled", flag,
                 "0"]) == 2
    err = capsys.readouterr().err
    assert f"error: {flag}: {field} must be at least {least}" in err and ", got 0" in err


@pytest.mark.parametrize("gpus, nodes, fix", [(12, None, "multiple of 8 (8 or 16)"), (16, 2, "the total (32)")])
def test_gpus_that_do_not_fit_the_node_are_refused_naming_the_field(gpus, nodes, fix):
    with pytest.raises(PlanError) as err:
        make_request("llama3-8b", gpus, "h100", nodes=nodes)
    assert err.value.field == "gpus" and fix in str(err.value)
    assert make_request("llama3-8b", 24, "h100").num_nodes == 3  # a whole number of nodes is the total


def test_the_bundled_engine_times_ddp_next_to_fsdp2():
    result = plan(make_request("llama32-1b", 64, "l40s", engine="bundled", global_batch_size=4096, seq_length=4096))
    best = result.fitting[0]
    assert best.sharding == "none"  # DDP: fits here and communicates less than FSDP2
    fsdp2 = [r for r in result.fitting if r.sharding == "full"]
    assert fsdp2 and best.tokens_per_s > max(r.tokens_per_s for r in fsdp2)


def test_plan_rows_equal_fresh_estimates_of_their_layout():
    """The data-parallel cost was cached per (TP, PP, CP, EP, ETP), so a VP 2 row reused VP 1's."""
    from service.estimate.steptime import estimate_step_time

    request = make_request("gemma2-2b", 64, "h100")
    result = plan(request)
    rows = [r for r in result.fitting if r.layout.pp > 1][:40]
    assert any((r.layout.vp or 1) > 1 for r in rows)
    for row in rows:
        fresh = estimate_step_time(shape("gemma2-2b"), request.hardware, row.layout, world_size=64,
                                   seq_length=request.seq_length, global_batch_size=request.global_batch_size,
                                   precision=request.precision, sharding=row.sharding)
        assert row.time.step_time_s == pytest.approx(fresh.step_time_s, rel=1e-12), row.layout
