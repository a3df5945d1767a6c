"""GPU counts that fit, where the rules make fit non-monotonic in the GPU count, and the CLI answers
built on them; plus the CLI's own argument errors."""

from __future__ import annotations

import json

import pytest

from service.cli.app import main
from service.plan.planner import PlanError, make_request, plan
from service.plan.sizing import counts_that_fit, gpus_needed, gpus_that_fit_below
from service.recommend.recommendation import recommend


def test_counts_the_global_batch_does_not_split_over_are_skipped_not_believed():
    """Bundled fp8 is data parallel only: 24, 40, 48 GPUs have no valid layout for a batch of 512,
    yet 32 fits. Doubling from 16 probes 24 first; it must not conclude that nothing fits."""
    req = make_request("llama3-70b", 16, "h100", engine="bundled", precision="fp8", seq_length=8192,
                       global_batch_size=512)
    assert not plan(req.with_world(24)).layouts and plan(req.with_world(32)).best is not None
    assert gpus_needed(req) == 32


def test_fewer_gpus_are_offered_when_the_rules_reject_the_requested_count(capsys):
    req = make_request("qwen3-1p7b", 6, "l40s", goal="sft", engine="bundled", global_batch_size=8)
    assert not plan(req).layouts
    assert gpus_that_fit_below(req) == 4 and counts_that_fit(req) == [4, 8]
    with pytest.raises(PlanError) as err:
        recommend("qwen3-1p7b", 6, "l40s", goal="sft", engine="bundled", global_batch_size=8)
    assert err.value.field == "gpus" and "4 or 8 l40s GPUs work" in str(err.value)
    assert "does not fit" not in str(err.value)  # a divisibility problem, not memory
    assert err.value.fix.startswith("request --gpus 4 or --gpus 8")
    assert main(["plan", "--model", "qwen3-1p7b", "--gpus", "6", "--gpu-type", "l40s", "--goal", "sft",
                 "--engine", "bundled", "--global-batch-size", "8"]) == 0
    assert "4 or 8 GPUs of that type work" in capsys.readouterr().out


def test_weights_that_fit_no_gpu_are_still_a_memory_answer():
    """RA-M001 (the weights alone exceed one GPU) rejects every layout on 1 GPU: still 'needs N'."""
    with pytest.raises(PlanError) as err:
        recommend("llama3-70b", 1, "h100", goal="pretrain")
    assert "found to fit it" in str(err.value) and err.value.field == "gpus"


def test_plan_json_keeps_significant_digits(capsys):
    """A tiny model's step is under a millisecond: rounding to 4 decimals lost 5 % of the batch."""
    assert main(["plan", "--model", "tiny-moe", "--gpus", "2", "--gpu-type", "vr200", "--goal", "peft",
                 "--format", "json", "--top", "3"]) == 0
    got = json.loads(capsys.readouterr().out)
    tokens = got["global_batch_size"] * got["seq_length"]
    for row in got["layouts"]:
        assert row["step_time_s"] < 0.01
        assert row["tokens_per_s_per_gpu"] * row["step_time_s"] * got["hardware"]["world_size"] == \
            pytest.approx(tokens, rel=1e-4)


def test_an_unknown_flag_shows_the_commands_own_usage(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["models", "--colour", "x"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "usage: recipe-advisor models" in err and "unrecognized arguments: --colour x" in err


def test_recipes_filters_are_checked(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["recipes", "--num-gpus", "-3"])
    assert exit_.value.code == 2 and "at least 1" in capsys.readouterr().err
    assert main(["recipes", "--hardware", "gb20"]) == 2
    assert "Did you mean gb200" in capsys.readouterr().err
    assert main(["recipes", "--hardware", "gb200-nvl72", "--num-gpus", "8", "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows and {(r["hardware"], r["num_gpus"]) for r in rows} == {("gb200", 8)}


def test_partly_used_nodes_grow_by_the_users_nodes():
    """--gpus 4 --nodes 4: 20 GPUs (5 nodes of 4) fit llama3-70b, and that is what to say, in that spelling."""
    req = make_request("llama3-70b", 4, "h100", nodes=4)
    assert plan(req).best is None
    assert gpus_needed(req) == 20
    with pytest.raises(PlanError) as err:
        recommend("llama3-70b", 4, "h100", nodes=4)
    assert err.value.fix == "request --gpus 4 --nodes 5"


def test_label_only_fp8_on_ampere_fix_names_the_label():
    from service.validate.document import validate_text

    text = ("model:\n  pretrained_model_name_or_path: llama3-8b\nprecision: bf16\ndistributed:\n  strategy: megatron\n"
            "metadata:\n  name: x\n  precision_recipe: fp8cs\nhardware:\n  gpu_type: a100-80gb\n  gpus_per_node: 8\n")
    [finding] = [f for f in validate_text(text, "c.yaml").findings if f.code == "RA-P001"]
    assert finding.key == "metadata.precision_recipe" and finding.fix.startswith("point metadata.precision_recipe")


def test_plan_json_and_http_carry_the_counts_that_fit(client, capsys):
    """The text output said which GPU counts would fit; the JSON and the API said nothing."""
    assert main(["plan", "--model", "qwen3-1p7b", "--gpus", "6", "--gpu-type", "l40s", "--goal", "sft",
                 "--engine", "bundled", "--global-batch-size", "8", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["gpus_that_fit"] == [4, 8]
    body = {"model": "llama3-70b", "gpus": 16, "gpu_type": "h100", "engine": "bundled", "precision": "fp8",
            "seq_length": 8192, "global_batch_size": 512}
    assert client.post("/v1/plan", json=body).json()["gpus_that_fit"] == [32]
    fits = client.post("/v1/plan", json={"model": "llama3-8b", "gpus": 8, "gpu_type": "h100", "top": 1}).json()
    assert fits["layouts"][0]["fits"] and fits["gpus_that_fit"] == []


@pytest.mark.parametrize("gpus, where", [(32, "fit on these 32 h100 GPUs"), (16, "fit on 32 h100 GPUs")])
def test_a_length_cp_and_sp_cannot_split_is_named_as_what_stands_in_the_way(gpus, where):
    """131,070 tokens (2 x 3 x 5 x 17 x 257) sent users to 15,360 GPUs; 131,072 fit on 32."""
    from service.recommend.recommendation import Impossible, recommend

    with pytest.raises(Impossible) as err:
        recommend("llama3-70b", gpus, "h100", seq_length=131070)
    assert err.value.field == "seq_length"
    assert f"131072 tokens {where}" in str(err.value) and "e.g. 131072" in err.value.fix
    with pytest.raises(Impossible) as err:
        recommend("llama3-70b", 8, "h100", seq_length=131072)  # a splittable length: the GPU count it is
    assert err.value.field == "gpus" and err.value.gpus_needed == 32
