"""Section and label overrides: a section must be a mapping and keeps the planned values it leaves out,
numbers read as in a file, the recipe's labels stay the recipe's, a mistyped value is refused."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from service.cli.app import main
from service.configs.yamlio import OverrideError
from service.recommend.recommendation import recommend
from tests.service.recommend.test_recommend_contract import convergence_keys
from tests.service.recommend.test_request_overrides import BODY, LLAMA


@pytest.mark.parametrize("argv, section", [
    (LLAMA + ["--dataset", "x"], "dataset"),
    (LLAMA + ["--step_scheduler", "7"], "step_scheduler"),
    (LLAMA + ["--dataset", "[1,2]"], "dataset"),
    (LLAMA + ["--distributed=[1]"], "distributed"),
    (["recommend", "--model", "tiny-llama", "--gpus", "2", "--gpu-type", "cpu", "--engine", "bundled",
      "--step_scheduler", "7"], "step_scheduler"),
])
def test_a_section_that_is_not_a_mapping_exits_2_naming_it(tmp_path, capsys, argv, section):
    out = tmp_path / "c.yaml"
    assert main(argv + ["-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"--{section}: expected a mapping" in err and "Traceback" not in err
    assert not out.exists()


@pytest.mark.parametrize("overrides", [{"dataset": "x"}, {"step_scheduler": "7"}, {"dataset": "[1, 2]"},
                                       {"model": "llama3-70b"}])
def test_a_section_that_is_not_a_mapping_is_400_over_http(client, overrides):
    r = client.post("/v1/recommend", json={**BODY, "overrides": overrides})
    assert r.status_code == 400, r.text
    assert r.json()["field"] == "overrides" and "expected a mapping" in r.json()["detail"]
    assert client.get("/healthz").status_code == 200  # the connection survives


def test_a_section_given_as_a_mapping_still_keeps_the_planned_values():
    rec = recommend("llama3-8b", 8, "h100", overrides=["--dataset={preset: mock}"])
    assert rec.config["dataset"] == {"preset": "mock", "seq_length": rec.plan.request.seq_length}
    assert rec.errors == 0


@pytest.mark.parametrize("override, key", [
    ("--metadata.megatron_recipe=llama3_70b_pretrain_config", "metadata.megatron_recipe"),
    ("--metadata.precision_recipe=fp8mx", "metadata.precision_recipe"),  # the recipe's is fp8cs
    ("--metadata={precision_recipe: fp8mx}", "metadata.precision_recipe"),
])
def test_overrides_of_the_recipe_labels_are_refused(override, key):
    # The commands ignored them and the change list left them out.
    with pytest.raises(OverrideError, match=rf"--{key} .*the advisor derives this label"):
        recommend("llama3-8b", 8, "b200", precision="fp8", overrides=[override])


def test_label_overrides_that_restate_or_leave_out_the_labels_are_kept(client):
    plain = recommend("llama3-8b", 8, "h100")
    labels = {k: plain.config["metadata"][k] for k in ("megatron_recipe", "precision_recipe")}
    restate = f"--metadata.precision_recipe={labels['precision_recipe']}"
    restated = recommend("llama3-8b", 8, "h100", overrides=[restate])
    renamed = recommend("llama3-8b", 8, "h100", overrides=["--metadata={name: mine}"])
    for rec in (restated, renamed):
        assert {k: rec.config["metadata"][k] for k in labels} == labels
        assert convergence_keys(rec.changes) == set() and "megatron_bridge" in rec.commands
    assert renamed.config["metadata"]["name"] == "mine"
    other = {"metadata.megatron_recipe": "llama3_70b_pretrain_config"}
    r = client.post("/v1/recommend", json={**BODY, "overrides": other})
    assert r.status_code == 400 and r.json()["field"] == "overrides"


def test_a_whole_section_override_keeps_the_planned_values_it_leaves_out():
    rec = recommend("llama3-8b", 8, "h100", overrides=['--dataset={preset: mock}'])
    assert rec.config["dataset"]["seq_length"] == rec.plan.request.seq_length
    assert rec.config["step_scheduler"]["global_batch_size"] == rec.plan.request.global_batch_size


@pytest.mark.parametrize("goal, overrides", [
    ("pretrain", ["--lr_scheduler.decay_steps=abc", "--lr_scheduler.warmup_steps=100"]),
    ("pretrain", ["--lr_scheduler", "{warmup_steps: 100, decay_steps: abc}"]),
    ("sft", ["--distributed.cp_size", "abc"]),
])
def test_a_mistyped_override_is_refused_not_a_traceback(capsys, goal, overrides):
    """The Bridge command was built from the invalid config before the findings refused it."""
    flags = ["recommend", "--model", "llama3-8b", "--gpus", "8", "--gpu-type", "h100", "--goal", goal, "-o", "-"]
    assert main(flags + overrides) == 2
    err = capsys.readouterr().err
    assert "RA-C002 error" in err and "nothing written" in err and "Traceback" not in err


def test_the_api_answers_400_for_the_same_override():
    from service.http.app import create_app

    response = TestClient(create_app(), raise_server_exceptions=False).post("/v1/recommend", json={
        "model": "llama3-8b", "gpus": 8, "gpu_type": "h100",
        "overrides": {"lr_scheduler.decay_steps": "abc", "lr_scheduler.warmup_steps": 100}})
    assert response.status_code == 400 and "RA-C002" in response.json()["detail"]


def test_numbers_inside_a_section_override_are_read_as_in_a_file():
    """`{lr: 3e-3}` was the string '3e-3', so recommend called the recipe's own 0.003 a convergence change."""
    rec = recommend("tiny-llama", 2, "cpu", engine="bundled", overrides=[
        "--optimizer", "{_target_: torch.optim.AdamW, lr: 3e-3, betas: [0.9, 0.95], weight_decay: 0.01}"])
    assert rec.config["optimizer"]["lr"] == 0.003
    assert not [c for c in rec.changes if c.key == "optimizer.lr"]
    quoted = recommend("tiny-llama", 2, "cpu", engine="bundled",
                       overrides=["--optimizer", "{_target_: torch.optim.AdamW, lr: '1e-3'}"])
    assert quoted.config["optimizer"]["lr"] == "1e-3"  # quoted: text, as in a file


def test_recommend_json_holds_a_nan_override_as_a_string(client, capsys):
    def refuse(constant):
        raise ValueError(constant)

    args = ["recommend", "--model", "llama3-8b", "--gpus", "8", "--gpu-type", "h100", "--goal", "pretrain",
            "--model.layernorm_epsilon", ".nan", "--format", "json"]
    assert main(args) == 0
    data = json.loads(capsys.readouterr().out, parse_constant=refuse)
    assert data["config"]["model"]["layernorm_epsilon"] == "nan"
    answer = client.post("/v1/recommend", json={"model": "llama3-8b", "gpus": 8, "gpu_type": "h100",
                                                "overrides": {"model.layernorm_epsilon": ".nan"}}).json()
    assert answer["config"]["model"]["layernorm_epsilon"] == "nan"


def test_an_octal_looking_override_is_refused_like_the_file(client):
    answer = client.post("/v1/recommend", json={"model": "llama3-8b", "gpus": 8, "gpu_type": "h100",
                                                "overrides": {"step_scheduler.global_batch_size": "0100"}})
    assert answer.status_code == 400 and "octal" in answer.text
