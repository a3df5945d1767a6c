"""`--precision` takes Megatron Bridge's FP8 recipe tokens (fp8cs, fp8ds, fp8mx, fp8sc): fp8 with that scaling.

Per-block scales (MXFP8, blockwise FP8) and NVFP4 rank Megatron-FSDP after the distributed optimizer among
near-equal layouts (``service.ranking._preference``); the estimates themselves do not change.
"""

from __future__ import annotations

import copy
import json
from types import SimpleNamespace

import pytest

from recipe_index import resolve_model
from service import constants as C
from service.bridge_command import bridge_gaps
from service.cli import main
from service.facts import Layout
from service.planner import PlanError, make_request, plan
from service.ranking import rank
from service.recipe_choice import choose_recipe
from service.recommend import recommend

# NVIDIA's published Llama 3 70B layouts on 64 GB300: Megatron-FSDP (TP1, no PP) for BF16 and FP8 current
# scaling, TP1 x PP4 x VP5 with the distributed optimizer for MXFP8 and NVFP4 (reference/mbridge_recipes.json).
LLAMA70B_64_GB300 = dict(seq_length=8192, global_batch_size=256)


def _plan(precision: str):
    return plan(make_request("llama3-70b", 64, "gb300", precision=precision, **LLAMA70B_64_GB300))


@pytest.mark.parametrize("token, precision, block_scaled", [
    ("fp8cs", "fp8", False), ("fp8ds", "fp8", False), ("fp8mx", "fp8", True), ("fp8sc", "fp8", True),
    ("nvfp4", "nvfp4", True), ("bf16", "bf16", False), ("fp8", "fp8", False)])
def test_a_token_is_fp8_with_its_scaling(token, precision, block_scaled):
    req = make_request("llama3-70b", 64, "gb300", precision=token)
    assert (req.precision, req.block_scaled) == (precision, block_scaled)
    assert req.precision_recipe == (token if token.startswith("fp8") and token != "fp8" else None)


def test_block_scaled_fp8_ranks_megatron_fsdp_after_the_distributed_optimizer():
    per_tensor, per_block = _plan("fp8cs"), _plan("fp8mx")
    first = per_tensor.layouts[0]
    assert (first.sharding, first.structure.pp) == ("full", 1)  # Megatron-FSDP wins the tie at per-tensor scales
    best = per_block.layouts[0]
    assert best.sharding == "optimizer" and best.structure.pp > 1
    # Only the order among ties changes: the same rows, the same estimates, and the FSDP row is still offered.
    def rows(p):
        return sorted((repr(r.structure), r.micro_batch_size, r.sharding, r.tokens_per_s) for r in p.layouts
                      if r.fits)
    assert rows(per_tensor) == rows(per_block)
    fsdp = next(r for r in per_block.layouts if r.sharding == "full" and r.fits)
    assert fsdp.tokens_per_s == first.tokens_per_s  # still there, and within the tie band of the new first
    assert best.tokens_per_s >= (1 - C.ESTIMATE_TIE_TOLERANCE) * fsdp.tokens_per_s


def test_the_tie_break_only_acts_inside_the_tie_band():
    def row(tps, sharding):
        return SimpleNamespace(structure=Layout(tp=1, pp=1), fits=True, tokens_per_s=tps, memory_total_gib=10.0,
                               sharding=sharding, strategy="megatron")
    fsdp, optimizer = row(1000, "full"), row(960, "optimizer")
    assert rank([fsdp, optimizer], layers=32, block_scaled=True) == [optimizer, fsdp]
    assert rank([fsdp, optimizer], layers=32, block_scaled=False)[0] is fsdp  # the faster estimate
    clearly_faster = row(1500, "full")
    assert rank([clearly_faster, optimizer], layers=32, block_scaled=True)[0] is clearly_faster


def test_plan_json_and_text_name_the_fp8_recipe(capsys):
    args = ["plan", "--model", "llama3-70b", "--gpus", "64", "--gpu-type", "gb300", "--seq-length", "8192",
            "--global-batch-size", "256", "--top", "1"]
    assert main(args + ["--precision", "fp8mx", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["precision"], data["precision_recipe"]) == ("fp8", "fp8mx")
    assert data["layouts"][0]["sharding"] == "optimizer"
    assert main(args + ["--precision", "fp8cs"]) == 0
    assert ", fp8cs, megatron engine" in capsys.readouterr().out
    assert main(args + ["--precision", "bf16", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["precision_recipe"] is None


def test_the_bundled_engine_refuses_a_bridge_fp8_recipe():
    with pytest.raises(PlanError) as err:
        make_request("llama3-8b", 8, "h100", precision="fp8mx", engine="bundled")
    assert err.value.field == "precision" and "--precision fp8" in err.value.fix


def test_mxfp8_on_hopper_is_rejected_by_its_rule():
    result = plan(make_request("llama3-8b", 8, "h100", precision="fp8mx"))
    assert not result.layouts and set(result.rejections) == {"RA-P003"}
    assert result.layouts == [] and plan(make_request("llama3-8b", 8, "h100", precision="fp8cs")).fitting


def test_the_recipe_with_the_asked_fp8_scaling_is_chosen():
    card = resolve_model("gpt-oss-20b")
    for token in ("fp8mx", "fp8cs"):
        chosen, _ = choose_recipe(card, "pretrain", "megatron", "b200", 16, None, token)
        assert chosen.name == f"gpt_oss_20b_pretrain_16gpu_h100_{token}"


def test_recommend_keeps_the_asked_fp8_recipe_and_validates():
    rec = recommend("gpt-oss-20b", 16, "b200", precision="fp8mx")
    meta = rec.config["metadata"]
    assert rec.config["precision"] == "fp8" and meta["precision_recipe"] == "fp8mx"
    assert meta["megatron_recipe"].endswith("_fp8mx_config") and meta["name"].endswith("_fp8mx")
    assert not [f for f in rec.findings if f.severity == "error"]
    assert "megatron_bridge" in rec.commands  # the recipe runs MXFP8 itself: nothing the command cannot carry
    assert "--recipe gpt_oss_20b_pretrain_16gpu_h100_fp8mx_config" in rec.commands["megatron_bridge"]


def test_another_fp8_scaling_than_the_recipe_has_no_bridge_command():
    base = {"precision": "fp8", "metadata": {"precision_recipe": "fp8cs",
                                             "megatron_recipe": "llama3_8b_pretrain_2gpu_h100_fp8cs_config"}}
    config = copy.deepcopy(base)
    config["metadata"]["precision_recipe"] = "fp8mx"
    gaps = bridge_gaps(base, config, [])
    gap = next(g for g in gaps if g == "metadata.precision_recipe")
    assert "fp8cs" in gap.reason and "fp8mx" in gap.reason
    assert "metadata.precision_recipe" not in bridge_gaps(base, copy.deepcopy(base), [])


def test_http_plan_takes_the_token_and_recommend_refuses_it_for_bundled(client):
    body = {"model": "llama3-70b", "gpus": 64, "gpu_type": "gb300", "precision": "fp8mx", "top": 1,
            **LLAMA70B_64_GB300}
    got = client.post("/v1/plan", json=body)
    assert got.status_code == 200 and got.json()["precision_recipe"] == "fp8mx"
    refused = client.post("/v1/recommend", json={"model": "llama3-8b", "gpus": 2, "gpu_type": "cpu",
                                                 "engine": "bundled", "precision": "fp8mx"})
    assert refused.status_code in (400, 422) and "precision" in refused.text
