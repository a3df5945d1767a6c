"""Overrides of what the request decides (sequence length, batch, precision, model, hardware): planned as if
given as flags, or refused naming the flag they contradict."""

from __future__ import annotations

import pytest

from service.cli.app import main
from service.configs.yamlio import OverrideError
from service.recommend.recommendation import recommend
from trainer.contract.dotted import get_dotted


def _plan_matches_config(rec) -> None:
    """The layout shown is the layout of the config written: batch math and sequence agree."""
    row, req = rec.best, rec.plan.request
    gbs = get_dotted(rec.config, "step_scheduler.global_batch_size")
    assert req.global_batch_size == gbs
    assert row.layout.micro_batch_size * row.dp * row.grad_accumulation_steps == gbs
    assert req.seq_length == get_dotted(rec.config, "dataset.seq_length")
    assert rec.config["hardware"]["gpu_type"] == req.hardware.name


LLAMA = ["recommend", "--model", "llama3-8b", "--gpus", "8", "--gpu-type", "h100"]


BODY = {"model": "llama3-8b", "gpus": 8, "gpu_type": "h100"}


@pytest.mark.parametrize("override, field, value", [
    ("--dataset.seq_length=32768", "seq_length", 32768),
    ("--step_scheduler.global_batch_size=64", "global_batch_size", 64),
    ("--precision=fp8", "precision", "fp8"),
])
def test_overrides_of_request_keys_are_planned(override, field, value):
    # The plan, estimates and commands used to describe the run before the override.
    rec = recommend("llama3-8b", 8, "h100", overrides=[override])
    assert getattr(rec.plan.request, field) == value
    _plan_matches_config(rec)
    assert rec.errors == 0


def test_an_override_that_agrees_with_the_flag_is_fine_and_one_that_contradicts_it_is_refused():
    rec = recommend("llama3-8b", 8, "h100", seq_length=4096, overrides=["--dataset.seq_length=4096"])
    assert rec.plan.request.seq_length == 4096
    with pytest.raises(OverrideError, match=r"--dataset.seq_length 8192 contradicts --seq-length 4096"):
        recommend("llama3-8b", 8, "h100", seq_length=4096, overrides=["--dataset.seq_length=8192"])
    with pytest.raises(OverrideError, match=r"--hardware.gpu_type a100-40gb contradicts --gpu-type h100"):
        recommend("llama3-8b", 8, "h100", overrides=["--hardware.gpu_type=a100-40gb"])
    with pytest.raises(OverrideError, match=r"expected an integer from 2 to 4,194,304, got .long."):
        recommend("llama3-8b", 8, "h100", overrides=["--dataset.seq_length=long"])


def test_http_overrides_of_request_keys_are_planned():
    from fastapi.testclient import TestClient

    from service.http.app import app

    body = {"model": "llama3-8b", "gpus": 8, "gpu_type": "h100", "overrides": {"dataset.seq_length": 32768}}
    answer = TestClient(app).post("/v1/recommend", json=body)
    assert answer.status_code == 200, answer.text
    data = answer.json()
    assert get_dotted(data["config"], "dataset.seq_length") == 32768
    assert data["layout"]["memory_gib"]["total"] < 80  # the planned layout, at 32K
    assert TestClient(app).post("/v1/recommend",
                                json={**body, "overrides": {"hardware.num_nodes": 2}}).status_code == 400


def test_request_keys_inside_a_whole_section_override_are_planned_too():
    # `--dataset "{seq_length: 32768}"` planned at the recipe's length but wrote 32768.
    rec = recommend("llama3-8b", 8, "h100", overrides=["--dataset={seq_length: 32768}"])
    assert rec.plan.request.seq_length == 32768
    _plan_matches_config(rec)
    with pytest.raises(OverrideError, match="set by --gpus and --nodes"):
        recommend("llama3-8b", 8, "h100", overrides=["--hardware={gpus_per_node: 4}"])


def test_override_values_are_bounded_and_checked_like_the_fields():
    # `none` clears a key; bounds and choices as the API's fields; GPU aliases agree.
    assert recommend("llama3-8b", 8, "h100", overrides=["--dataset.seq_length=none"]).plan.request.seq_length == 8192
    with pytest.raises(OverrideError, match=r"expected an integer from 2 to 4,194,304, got 1000000000000"):
        recommend("llama3-8b", 8, "h100", overrides=["--dataset.seq_length=1000000000000"])
    with pytest.raises(OverrideError, match=r"'fp7' is not one of bf16"):
        recommend("llama3-8b", 8, "h100", overrides=["--precision=fp7"])
    rec = recommend("llama3-8b", 8, "h100", overrides=["--hardware.gpu_type=H100-SXM"])
    assert rec.plan.request.hardware.name == "h100"


@pytest.mark.parametrize("override", [
    "--model.pretrained_model_name_or_path=meta-llama/Meta-Llama-3-70B",
    "--model={pretrained_model_name_or_path: qwen3-8b}",
])
def test_another_model_by_override_is_refused_naming_both(override):
    with pytest.raises(OverrideError, match=r"--model.pretrained_model_name_or_path \S+ contradicts --model llama3-8b"
                                            r".*give it once, as --model"):
        recommend("llama3-8b", 8, "h100", overrides=[override])
    with pytest.raises(OverrideError, match="contradicts --model llama3-8b"):
        recommend("llama3-8b", 8, "h100", engine="bundled", overrides=[override])


def test_another_model_by_override_exits_2_and_is_400_over_http(client, capsys):
    key = "model.pretrained_model_name_or_path"
    assert main(LLAMA + [f"--{key}", "meta-llama/Meta-Llama-3-70B"]) == 2
    assert "give it once, as --model" in capsys.readouterr().err
    r = client.post("/v1/recommend", json={**BODY, "overrides": {key: "meta-llama/Meta-Llama-3-70B"}})
    assert r.status_code == 400 and r.json()["field"] == "overrides" and "contradicts --model" in r.json()["detail"]


@pytest.mark.parametrize("name", ["llama3-8b", "Meta-Llama-3-8B", "meta-llama/Meta-Llama-3-8B"])
def test_the_same_model_by_another_name_keeps_the_planned_name(name):
    plain = recommend("llama3-8b", 8, "h100")
    rec = recommend("llama3-8b", 8, "h100", overrides=[f"--model.pretrained_model_name_or_path={name}"])
    assert rec.config["model"] == plain.config["model"]
    assert not [c for c in rec.changes if c.key.startswith("model.")]
    assert "megatron_bridge" in rec.commands


def test_a_hardware_section_override_keeps_the_gpu_counts(client):
    rec = recommend("llama3-8b", 8, "h100", nodes=2, overrides=["--hardware={gpu_type: H100-SXM}"])
    assert rec.config["hardware"] == {"gpu_type": "h100", "gpus_per_node": 8, "num_nodes": 2}
    assert not [f for f in rec.findings if f.code == "RA-C006"]
    r = client.post("/v1/recommend", json={**BODY, "nodes": 2, "overrides": {"hardware": "{gpu_type: h100}"}})
    assert r.status_code == 200 and r.json()["config"]["hardware"] == rec.config["hardware"]
    cpu = recommend("tiny-llama", 2, "cpu", engine="bundled", global_batch_size=64,
                    overrides=["--hardware={gpu_type: cpu}"])
    assert cpu.config["hardware"] == {"gpu_type": "cpu", "gpus_per_node": 2, "num_nodes": 1}
