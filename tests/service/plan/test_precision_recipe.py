"""`--precision` takes Megatron Bridge's FP8 recipe tokens (fp8cs, fp8ds, fp8mx, fp8sc): fp8 with that scaling.

MXFP8 and NVFP4 rank Megatron-FSDP after the other layouts of its tie band
(``service.plan.ranking._preference``); the estimates themselves do not change.
"""

from __future__ import annotations

import copy
import json
from types import SimpleNamespace
from typing import get_args

import pytest
import yaml

from recipe_index import get_recipe, resolve_model
from service.cli.app import main
from service.configs.yamlio import OverrideError
from service.estimate import constants as C
from service.facts import Layout
from service.http import web
from service.http.schemas import requests as api_requests
from service.plan.planner import PlanError, make_request, plan
from service.plan.ranking import rank
from service.recommend.bridge_command import bridge_gaps
from service.recommend.recipe_choice import _pick, choose_recipe
from service.recommend.recommendation import recommend
from service.validate.document import validate_text
from service.validate.rules.precision import PRECISION_CHOICES

# NVIDIA's published Llama 3 70B layouts on 64 GB300: Megatron-FSDP (TP1, no PP) for BF16 and FP8 current
# scaling, TP1 x PP4 x VP5 with the distributed optimizer for MXFP8 and NVFP4 (reference/mbridge_recipes.json).
LLAMA70B_64_GB300 = dict(seq_length=8192, global_batch_size=256)


def _plan(precision: str):
    return plan(make_request("llama3-70b", 64, "gb300", precision=precision, **LLAMA70B_64_GB300))


# fsdp_last: MXFP8 and NVFP4, whose published layouts never use Megatron-FSDP; blockwise FP8 (fp8sc) has none.
@pytest.mark.parametrize("value, precision, fp8_recipe, fsdp_last", [
    ("fp8cs", "fp8", "fp8cs", False), ("fp8ds", "fp8", "fp8ds", False), ("fp8mx", "fp8", "fp8mx", True),
    ("fp8sc", "fp8", "fp8sc", False), ("nvfp4", "nvfp4", None, True), ("bf16", "bf16", None, False),
    ("fp8", "fp8", None, False)])
def test_a_token_is_fp8_with_its_scaling(value, precision, fp8_recipe, fsdp_last):
    req = make_request("llama3-70b", 64, "gb300", precision=value)
    assert (req.precision, req.fp8_recipe, req.fsdp_last) == (precision, fp8_recipe, fsdp_last)


def test_every_entry_point_offers_the_same_choices():
    assert get_args(api_requests.PRECISION) == PRECISION_CHOICES
    assert sorted(web.PRECISIONS) == sorted(PRECISION_CHOICES)


def test_mxfp8_ranks_megatron_fsdp_after_the_distributed_optimizer():
    per_tensor, per_block = _plan("fp8cs"), _plan("fp8mx")
    first = per_tensor.layouts[0]
    assert (first.sharding, first.structure.pp) == ("full", 1)  # Megatron-FSDP wins the tie at per-tensor scales
    best = per_block.layouts[0]
    assert best.sharding == "optimizer" and best.structure.pp > 1

    def rows(p):
        return sorted((repr(r.structure), r.micro_batch_size, r.sharding, r.tokens_per_s) for r in p.layouts
                      if r.fits)
    # Only the order among ties changes: the same rows, the same estimates, and the FSDP row is still offered.
    assert rows(per_tensor) == rows(per_block)
    fsdp = next(r for r in per_block.layouts if r.sharding == "full" and r.fits)
    assert fsdp.tokens_per_s == first.tokens_per_s
    assert best.tokens_per_s >= (1 - C.ESTIMATE_TIE_TOLERANCE) * fsdp.tokens_per_s


def _row(tps, sharding, strategy="megatron", tp=1):
    return SimpleNamespace(structure=Layout(tp=tp, pp=1), fits=True, tokens_per_s=tps, memory_total_gib=10.0,
                           sharding=sharding, strategy=strategy)


def test_the_tie_break_only_acts_inside_the_tie_band_and_on_megatron_fsdp():
    fsdp, optimizer = _row(1000, "full"), _row(960, "optimizer")
    assert rank([fsdp, optimizer], layers=32, fsdp_last=True) == [optimizer, fsdp]
    assert rank([fsdp, optimizer], layers=32, fsdp_last=False)[0] is fsdp  # the faster estimate
    clearly_faster = _row(1500, "full")
    assert rank([clearly_faster, optimizer], layers=32, fsdp_last=True)[0] is clearly_faster
    # The bundled trainer's FSDP2 is another engine: not demoted; and rows without FSDP keep their order.
    fsdp2, ddp = _row(1000, "full", strategy="fsdp2"), _row(960, "none", strategy="ddp")
    assert rank([fsdp2, ddp], layers=32, fsdp_last=True) == [fsdp2, ddp]
    tp1, tp2 = _row(960, "optimizer"), _row(1000, "optimizer", tp=2)
    assert rank([tp2, tp1], layers=32, fsdp_last=True) == rank([tp2, tp1], layers=32) == [tp1, tp2]


def test_plan_json_and_text_name_the_fp8_recipe(capsys):
    args = ["plan", "--model", "llama3-70b", "--gpus", "64", "--gpu-type", "gb300", "--seq-length", "8192",
            "--global-batch-size", "256", "--top", "1"]
    assert main(args + ["--precision", "fp8mx", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["precision"], data["fp8_recipe"]) == ("fp8", "fp8mx")
    assert data["layouts"][0]["sharding"] == "optimizer"
    assert main(args + ["--precision", "fp8cs"]) == 0
    assert ", fp8cs, megatron engine" in capsys.readouterr().out
    assert main(args + ["--precision", "bf16", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["fp8_recipe"] is None


def test_a_plain_fp8_plans_the_scaling_the_chosen_recipe_runs(capsys):
    # qwen3-30b-a3b's only FP8 pretraining recipe is an MXFP8 one: plan and recommend both rank for it.
    rec = recommend("qwen3-30b-a3b", 8, "b200", precision="fp8")
    assert rec.plan.request.fp8_recipe == rec.config["metadata"]["precision_recipe"] == "fp8mx"
    assert rec.plan.request.fsdp_last
    assert main(["plan", "--model", "qwen3-30b-a3b", "--gpus", "8", "--gpu-type", "b200", "--precision", "fp8",
                 "--format", "json", "--top", "1"]) == 0
    assert json.loads(capsys.readouterr().out)["fp8_recipe"] == "fp8mx"
    # Where the recipe is BF16, a plain fp8 names no scaling.
    assert recommend("llama3-70b", 64, "gb300", precision="fp8").plan.request.fp8_recipe is None


def test_the_bundled_engine_refuses_a_bridge_fp8_recipe_in_plan_and_recommend(client):
    for call in (lambda: make_request("llama3-8b", 8, "h100", precision="fp8mx", engine="bundled"),
                 lambda: recommend("llama3-8b", 8, "b200", precision="fp8mx", engine="bundled")):
        with pytest.raises(PlanError) as err:
            call()
        assert err.value.field == "precision" and "--precision fp8" in err.value.fix
        assert "kernels" not in str(err.value)
    got = client.post("/v1/recommend", json={"model": "llama3-8b", "gpus": 8, "gpu_type": "h100",
                                             "engine": "bundled", "precision": "fp8cs"})
    assert got.status_code == 400 and got.json()["field"] == "precision"
    assert "--precision fp8 with --engine bundled" in got.json()["detail"]


@pytest.mark.parametrize("gpu, token, code", [("h100", "fp8mx", "RA-P003"), ("l40s", "fp8sc", "RA-P004")])
def test_an_fp8_recipe_the_gpu_lacks_is_refused_naming_the_precision(gpu, token, code):
    result = plan(make_request("llama3-8b", 8, gpu, precision=token))
    assert not result.layouts and set(result.rejections) == {code}
    assert plan(make_request("llama3-8b", 8, gpu, precision="fp8cs")).fitting
    with pytest.raises(PlanError) as err:
        recommend("llama3-8b", 8, gpu, precision=token)
    assert err.value.field == "precision" and "--precision fp8cs (API: precision fp8cs)" in err.value.fix


def test_the_recipe_with_the_asked_fp8_scaling_is_chosen():
    card = resolve_model("gpt-oss-20b")
    for token in ("fp8mx", "fp8cs"):
        chosen, _ = choose_recipe(card, "pretrain", "megatron", "b200", 16, None, token)
        assert chosen.name == f"gpt_oss_20b_pretrain_16gpu_h100_{token}"


def test_the_asked_precision_beats_the_recipes_gpu_name():
    # qwen3-30b-a3b has a gb200 MXFP8 test recipe and an h100 BF16 one: bf16 starts from the BF16 recipe.
    rec = recommend("qwen3-30b-a3b", 8, "gb200", precision="bf16")
    assert rec.recipe.name == "qwen3_30b_a3b_pretrain_8gpu_h100_bf16"
    assert not [f for f in rec.findings if f.code == "RA-C005" and f.severity != "info"]


def test_recommend_keeps_the_asked_fp8_recipe_and_validates():
    rec = recommend("gpt-oss-20b", 16, "b200", precision="fp8mx")
    meta = rec.config["metadata"]
    assert rec.config["precision"] == "fp8" and meta["precision_recipe"] == "fp8mx"
    assert meta["megatron_recipe"].endswith("_fp8mx_config") and meta["name"].endswith("_fp8mx")
    assert not [f for f in rec.findings if f.severity == "error" or f.code == "RA-C005"]
    assert "megatron_bridge" in rec.commands  # the recipe runs MXFP8 itself: nothing the command cannot carry
    assert "--recipe gpt_oss_20b_pretrain_16gpu_h100_fp8mx_config" in rec.commands["megatron_bridge"]


def test_the_name_follows_the_written_fp8_label():
    plain = recommend("llama3-8b", 8, "b200", precision="fp8").config["metadata"]
    token = recommend("llama3-8b", 8, "b200", precision="fp8cs").config["metadata"]
    assert plain["precision_recipe"] == token["precision_recipe"] == "fp8cs"
    assert plain["name"] == token["name"] == "llama3_8b_pretrain_8gpu_b200_fp8cs"


def test_a_precision_override_takes_the_token_and_an_fp8_restating_it():
    assert recommend("gpt-oss-20b", 16, "b200", overrides=["--precision=fp8mx"]).config["metadata"][
        "precision_recipe"] == "fp8mx"
    kept = recommend("gpt-oss-20b", 16, "b200", precision="fp8mx", overrides=["--precision=fp8"])
    assert kept.config["metadata"]["precision_recipe"] == "fp8mx"
    with pytest.raises(OverrideError, match="contradicts --precision fp8mx"):
        recommend("gpt-oss-20b", 16, "b200", precision="fp8mx", overrides=["--precision=fp8cs"])
    # In either order: an fp8 given first keeps the token named after it.
    for kwargs in (dict(precision="fp8", overrides=["--precision=fp8mx"]),
                   dict(overrides=["--precision=fp8", "--precision=fp8mx"])):
        rec = recommend("gpt-oss-20b", 16, "b200", **kwargs)
        assert rec.config["metadata"]["precision_recipe"] == rec.plan.request.fp8_recipe == "fp8mx"


def test_another_fp8_scaling_than_the_bridge_recipe_is_a_warning_with_a_fix_that_applies():
    # Nemotron Nano 12B v2's recipe is named bf16 upstream but trains in fp8cs (the index records it).
    rec = recommend("nemotron-nano-12b-v2", 8, "b200", precision="fp8mx")
    report = validate_text(rec.config_yaml, "c.yaml")
    finding = next(f for f in report.findings if f.code == "RA-C005")
    assert finding.severity == "warning" and "trains as the recipe does" not in finding.message
    assert "fp8cs" in finding.message and "fp8mx" in finding.message and "rename" not in finding.fix
    assert "megatron_bridge" not in rec.commands  # the command would run fp8cs
    # The recipe's own scaling is the upstream-name info it always was.
    same = validate_text(recommend("nemotron-nano-12b-v2", 8, "b200").config_yaml, "c.yaml")
    assert [f.severity for f in same.findings if f.code == "RA-C005"] == ["info"]


def test_another_fp8_scaling_than_the_recipe_has_no_bridge_command():
    base = {"precision": "fp8", "metadata": {"precision_recipe": "fp8cs",
                                             "megatron_recipe": "llama3_8b_pretrain_2gpu_h100_fp8cs_config"}}
    config = copy.deepcopy(base)
    config["metadata"]["precision_recipe"] = "fp8mx"
    gap = next(g for g in bridge_gaps(base, config, []) if g == "metadata.precision_recipe")
    assert "fp8cs" in gap.reason and "fp8mx" in gap.reason
    assert "metadata.precision_recipe" not in bridge_gaps(base, copy.deepcopy(base), [])
    # A base without the label: its Bridge recipe's name says the scaling.
    unlabelled = {"precision": "fp8", "metadata": {"megatron_recipe": "llama3_8b_pretrain_2gpu_h100_fp8cs_config"}}
    assert "metadata.precision_recipe" in bridge_gaps(unlabelled, config, [])
    # A BF16 base: the precision itself changes (another gap), not the FP8 scaling.
    bf16 = {"precision": "bf16", "metadata": {"precision_recipe": "bf16"}}
    assert "metadata.precision_recipe" not in bridge_gaps(bf16, config, [])


def test_http_and_web_take_the_token(client):
    body = {"model": "llama3-70b", "gpus": 64, "gpu_type": "gb300", "precision": "fp8mx", "top": 1,
            **LLAMA70B_64_GB300}
    got = client.post("/v1/plan", json=body)
    assert got.status_code == 200 and got.json()["fp8_recipe"] == "fp8mx"
    overridden = client.post("/v1/recommend", json={"model": "gpt-oss-20b", "gpus": 16, "gpu_type": "b200",
                                                    "overrides": {"precision": "fp8mx"}})
    assert overridden.status_code == 200
    assert overridden.json()["config"]["metadata"]["precision_recipe"] == "fp8mx"
    page = client.get("/recommend", params={"model": "gpt-oss-20b", "gpus": 16, "gpu_type": "b200",
                                            "precision": "fp8mx"})
    assert page.status_code == 200 and "fp8mx, engine megatron" in page.text


# ---------------------------------------------------------------- every refusal's fix is answered


def _answered(*args, **kwargs) -> bool:
    try:
        recommend(*args, **kwargs)
        return True
    except PlanError:
        return False


@pytest.mark.parametrize("gpu_type, gpus, precision", [
    ("h100", 8, "nvfp4"), ("l40s", 8, "nvfp4"), ("a100-80gb", 8, "fp8"), ("cpu", 1, "fp8"), ("b200", 8, "nvfp4")])
def test_a_bundled_precision_refusal_offers_megatron_only_where_it_runs_that_precision(gpu_type, gpus, precision):
    with pytest.raises(PlanError) as err:
        recommend("llama3-8b", gpus, gpu_type, engine="bundled", precision=precision)
    assert err.value.field == "precision"
    assert ("--engine megatron" in err.value.fix) == (gpu_type == "b200")
    if gpu_type == "b200":
        assert _answered("llama3-8b", gpus, gpu_type, engine="megatron", precision=precision)
    plain = "fp32" if gpu_type == "cpu" else "bf16"
    assert f"--precision {plain}" in err.value.fix
    assert _answered("llama3-8b", gpus, gpu_type, engine="bundled", precision=plain)


@pytest.mark.parametrize("gpu_type, gpus, fix", [("a100-80gb", 8, "--precision bf16"), ("cpu", 1, "--precision fp32"),
                                                 ("h100", 8, "--precision fp8")])
def test_a_bridge_token_on_the_bundled_engine_names_a_precision_that_runs(gpu_type, gpus, fix):
    with pytest.raises(PlanError) as err:
        recommend("llama3-8b", gpus, gpu_type, engine="bundled", precision="fp8mx")
    assert f"{fix} with --engine bundled" in err.value.fix
    assert _answered("llama3-8b", gpus, gpu_type, engine="bundled", precision=fix.split()[-1])


def test_megatron_on_cpu_is_refused_naming_the_engine():
    for call in (lambda: make_request("llama32-1b", 1, "cpu"), lambda: recommend("llama32-1b", 1, "cpu", goal="sft")):
        with pytest.raises(PlanError) as err:
            call()
        assert err.value.field == "engine" and "--engine bundled" in err.value.fix
    assert _answered("llama32-1b", 1, "cpu", goal="sft", engine="bundled")


def test_a_precision_change_from_a_bridge_recipe_points_at_another_recipe_not_a_rename():
    rec = recommend("qwen3-600m", 1, "h100", goal="sft", precision="fp8")
    finding = next(f for f in rec.findings if f.code == "RA-C005")
    assert "rename" not in finding.fix and "point metadata.megatron_recipe at" in finding.fix
    assert "another experiment than the recipe" in finding.message
    # Bridge has no fp16 recipes: no variant name is made up for one.
    fp16 = next(f for f in recommend("llama3-8b", 8, "h100", precision="fp16").findings if f.code == "RA-C005")
    assert "_fp16_config" not in fp16.fix and "Bridge has no fp16 recipes" in fp16.fix


def test_validate_refuses_megatron_on_the_cpu_card():
    config = recommend("llama32-1b", 1, "h100", goal="sft").config
    config["hardware"]["gpu_type"] = "cpu"
    found = [f for f in validate_text(yaml.safe_dump(config), "c.yaml").findings if f.severity == "error"]
    assert [f.code for f in found] == ["RA-E006"] and "--engine bundled" in found[0].fix


def test_the_recipe_choice_reads_what_a_recipe_trains_in_not_its_name():
    # NemotronH 56B's H100 recipe is named bf16 upstream but trains in fp8cs: it cannot run on an A100 (no FP8),
    # so the choice takes another one; the name alone would call it runnable there.
    slip = get_recipe("nemotronh_56b_pretrain_8gpu_h100_bf16")
    bf16 = get_recipe("nemotronh_56b_pretrain_256gpu_gb300_bf16")
    assert (slip.precision_recipe, bf16.precision_recipe) == ("fp8cs", "bf16")
    assert _pick([slip, bf16], "a100-80gb", 8, None) is bf16
    assert _pick([slip, bf16], "h100", 8, None) is slip
    # The default request (the library recipe's fp8cs) is refused on precision there, naming --precision bf16.
    with pytest.raises(PlanError) as err:
        recommend("nemotronh-56b", 64, "a100-80gb")
    assert err.value.field == "precision" and "--precision bf16" in err.value.fix


@pytest.mark.parametrize("model, gpus", [("nemotronh-56b", 64), ("nemotronh-47b", 64), ("nemotron-nano-12b-v2", 8)])
def test_a_slip_recipe_trained_in_another_precision_says_what_the_recipe_runs(model, gpus):
    # These recipes are named bf16 upstream but train in fp8cs (the index records it): RA-C005 says what runs.
    finding = next(f for f in recommend(model, gpus, "h100", precision="fp16").findings if f.code == "RA-C005")
    assert "run in fp8cs" in finding.message and "Bridge's bf16 recipe" not in finding.message
    assert "set precision: bf16" not in finding.fix and "set precision: fp8 (and metadata.precision_recipe: fp8cs)" \
        in finding.fix


@pytest.mark.parametrize("token", ["fp8ds", "fp8sc"])
def test_no_recipe_name_is_made_up_for_a_scaling_bridge_has_no_recipes_of(token):
    fix = next(f.fix for f in recommend("qwen3-600m", 1, "h100", goal="sft", precision=token).findings
               if f.code == "RA-C005")
    assert f"_{token}_config" not in fix and f"Bridge has no {token} recipes" in fix
    # A variant is named only where the index holds it, and Bridge's recipes only where this model has one.
    fix = next(f.fix for f in recommend("qwen3-600m", 1, "b200", goal="sft", precision="fp8mx").findings
               if f.code == "RA-C005")
    assert "qwen3_600m_sft_1gpu_h100_fp8mx_config" not in fix and "no fp8mx recipe of this model" in fix
    fix = next(f.fix for f in recommend("llama3-70b", 64, "gb300", precision="fp8mx").findings
               if f.code == "RA-C005")
    assert "Bridge's *_fp8mx recipes, the index holds this model's" in fix


# ---------------------------------------------------------------- RA-C005 fixes apply


@pytest.mark.parametrize("label", ["bf16", "fp16", "fp32", "nvfp4"])
def test_a_slip_recipe_with_a_label_that_disagrees_is_not_an_info(label):
    config = recommend("nemotronh-56b", 64, "h100").config
    config["metadata"]["precision_recipe"] = label
    [finding] = [f for f in validate_text(yaml.safe_dump(config), "c.yaml").findings if f.code == "RA-C005"]
    assert finding.severity == "warning" and f"precision config is {label}" not in finding.message
    config["metadata"]["precision_recipe"] = "fp8cs"
    assert [f.severity for f in validate_text(yaml.safe_dump(config), "c.yaml").findings
            if f.code == "RA-C005"] == ["info"]


@pytest.mark.parametrize("label", ["bf16", "fp8ds", "fp8sc"])
def test_the_slip_warnings_fix_applies_whatever_the_label(label):
    config = recommend("nemotronh-56b", 64, "h100", precision="bf16").config
    config["metadata"]["precision_recipe"] = label
    [finding] = [f for f in validate_text(yaml.safe_dump(config), "c.yaml").findings if f.code == "RA-C005"]
    assert "metadata.precision_recipe: fp8cs" in finding.fix
    config["precision"], config["metadata"]["precision_recipe"] = "fp8", "fp8cs"
    assert [f.severity for f in validate_text(yaml.safe_dump(config), "c.yaml").findings
            if f.code == "RA-C005"] == ["info"]


def test_the_keep_clause_never_offers_an_fp8_recipe_the_gpu_cannot_run():
    config = recommend("llama3-8b", 8, "b200", precision="fp8mx").config
    config["hardware"]["gpu_type"] = "h100"
    config["precision"], config["metadata"]["precision_recipe"] = "bf16", "bf16"
    fix = next(f.fix for f in validate_text(yaml.safe_dump(config), "c.yaml").findings if f.code == "RA-C005")
    assert "fp8mx" not in fix.split(", or point")[0]
    fix = next(f.fix for f in recommend("qwen3-600m", 1, "h100", goal="sft", precision="fp8").findings
               if f.code == "RA-C005")
    assert "fp8mx" not in fix


@pytest.mark.parametrize("model, gpus, goal, precision", [("nemotronh-56b", 64, "pretrain", "nvfp4"),
                                                           ("qwen3-600m", 1, "sft", "fp8mx")])
def test_no_pattern_is_offered_for_a_token_the_model_has_no_recipe_of(model, gpus, goal, precision):
    fix = next(f.fix for f in recommend(model, gpus, "b200", goal=goal, precision=precision).findings
               if f.code == "RA-C005")
    assert f"*_{precision} recipes" not in fix and "a recipe function of your own" in fix


def test_the_label_fix_on_a_megatron_config_names_what_the_recipe_runs():
    config = recommend("llama3-8b", 8, "h100", precision="fp8cs").config
    config["metadata"]["precision_recipe"] = "bf16"
    fix = next(f.fix for f in validate_text(yaml.safe_dump(config), "c.yaml").findings if f.code == "RA-C005")
    assert "fp8mx" not in fix and "fp8ds" not in fix and "precision: bf16" not in fix


def test_the_name_says_fix_applies_with_a_label():
    config = recommend("llama3-8b", 8, "h100").config
    del config["metadata"]["megatron_recipe"]
    config["precision"], config["metadata"]["precision_recipe"] = "fp16", "fp16"
    fix = next(f.fix for f in validate_text(yaml.safe_dump(config), "c.yaml").findings if f.code == "RA-C005")
    assert "metadata.precision_recipe: bf16" in fix
