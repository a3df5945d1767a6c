"""POST /v1/recommend and /v1/diff over HTTP: the CLI's answers, cached, and bad input as 4xx."""

from __future__ import annotations

import json
import time

import pytest
import yaml

from service.cli.app import main
from service.http.routes import advise as api_advise

BODY = {"model": "llama3-8b", "gpus": 8, "gpu_type": "h100"}
BASE = "distributed:\n  tp_size: 2\nstep_scheduler:\n  global_batch_size: 64\n  local_batch_size: 1\n"
NEW = "distributed:\n  tp_size: 4\nstep_scheduler:\n  global_batch_size: 128\n  local_batch_size: 1\n"


@pytest.fixture(scope="module")
def llama(client):
    r = client.post("/v1/recommend", json=BODY)
    assert r.status_code == 200, r.text
    return r.json()


def test_recommend_matches_the_cli(llama, capsys):
    assert main(["recommend", "--model", "llama3-8b", "--gpus", "8", "--gpu-type", "h100", "--format", "json"]) == 0
    cli = json.loads(capsys.readouterr().out)
    for key in ("model", "hardware", "goal", "engine", "recipe", "notes", "layout", "changes", "findings", "commands",
                "config_yaml"):
        assert llama[key] == cli[key], key
    assert llama["config"] == cli["config"]


def test_recommend_answer_holds_what_the_page_shows(llama):
    assert llama["recipe"]["name"] and llama["why"]
    layout = llama["layout"]
    assert layout["fits"] and layout["tp"] * layout["pp"] * layout["cp"] * layout["dp"] == 8
    assert layout["memory_gib"]["total"] <= llama["hardware"]["memory_gib"]
    assert 0 < layout["mfu"] < 1 and layout["tokens_per_s_per_gpu"] > 0
    assert 1 <= len(llama["other_layouts"]) <= 5 and layout not in llama["other_layouts"]
    assert {"torchrun", "sbatch"} <= set(llama["commands"])
    assert all(c["layer"] in ("convergence", "execution", "benchmark-only") for c in llama["changes"])
    # The YAML is the config, and it passes the rules.
    assert yaml.safe_load(llama["config_yaml"]) == llama["config"]
    assert not [f for f in llama["findings"] if f["severity"] == "error"]


def test_recommend_overrides_are_convergence_changes(client):
    r = client.post("/v1/recommend",
                    json={**BODY, "overrides": {"optimizer.lr": 0.0001, "step_scheduler.max_steps": 50}})
    assert r.status_code == 200
    got = r.json()
    assert got["config"]["optimizer"]["lr"] == 0.0001 and got["config"]["step_scheduler"]["max_steps"] == 50
    lr = [c for c in got["changes"] if c["key"] == "optimizer.lr"]
    assert lr and lr[0]["layer"] == "convergence"


def test_recommend_one_gpu_sft_switches_to_peft_and_says_so(client):
    r = client.post("/v1/recommend", json={**BODY, "gpus": 1, "goal": "sft"})
    assert r.status_code == 200
    assert r.json()["goal"] == "peft"
    assert any("PEFT" in note for note in r.json()["notes"])


def test_recommend_is_served_from_the_cache(client):
    api_advise.responses.clear()
    body = {**BODY, "model": "Meta-Llama-3-8B", "top": 2}
    first = client.post("/v1/recommend", json=body)
    start = time.perf_counter()
    second = client.post("/v1/recommend", json={**body, "model": "llama3_8b"})
    assert time.perf_counter() - start < 0.1
    assert first.content == second.content
    assert (api_advise.responses.misses, api_advise.responses.hits) == (1, 1)


def test_impossible_request_is_400_saying_what_would_work(client):
    r = client.post("/v1/recommend", json={"model": "deepseek-v3", "gpus": 1, "gpu_type": "h100"})
    assert r.status_code == 400
    body = r.json()
    assert body["field"] == "gpus"
    assert "GPUs found to fit it" in body["detail"]
    again = client.post("/v1/recommend", json={"model": "deepseek-v3", "gpus": 1, "gpu_type": "h100"})
    assert again.status_code == 400 and again.content == r.content


@pytest.mark.parametrize(
    "change, loc",
    [
        ({"gpus": None}, ["body", "gpus"]),
        ({"nodes": -1}, ["body", "nodes"]),
        ({"seq_length": "long"}, ["body", "seq_length"]),
        ({"overrides": {"optimizer lr": 1}}, ["body", "overrides", "optimizer lr", "[key]"]),
        ({"overrides": {"optimizer.lr": [1, 2]}}, None),
        ({"overrides": "optimizer.lr=1"}, ["body", "overrides"]),
    ],
)
def test_recommend_bad_fields_are_422_naming_the_field(client, change, loc):
    r = client.post("/v1/recommend", json={**BODY, **change})
    assert r.status_code == 422
    locs = [e["loc"] for e in r.json()["detail"]]
    if loc is not None:
        assert loc in locs, locs
    else:
        assert all(loc[:2] == ["body", "overrides"] for loc in locs)


def test_recommend_unknown_model_is_404_with_closest_ids(client):
    r = client.post("/v1/recommend", json={**BODY, "model": "llama-3-8b-instruct-typo"})
    assert r.status_code == 404
    assert r.json()["field"] == "model" and r.json()["suggestions"]


def test_recommend_escapes_nothing_it_should_not(client):
    # JSON carries text as text: an override with markup comes back as the same string.
    markup = "<script>alert(1)</script>"
    r = client.post("/v1/recommend", json={**BODY, "overrides": {"metadata.description": markup}})
    assert r.status_code == 200
    assert r.json()["config"]["metadata"]["description"] == markup


# ------------------------------------------------------------------ diff


def test_diff_matches_the_cli(client, tmp_path, capsys):
    r = client.post("/v1/diff", json={"base": BASE, "new": NEW})
    assert r.status_code == 200
    (tmp_path / "base.yaml").write_text(BASE)
    (tmp_path / "new.yaml").write_text(NEW)
    assert main(["diff", str(tmp_path / "base.yaml"), str(tmp_path / "new.yaml"), "--format", "json"]) == 0
    cli = json.loads(capsys.readouterr().out)
    got = r.json()
    assert got["changes"] == cli["changes"] and got["summary"] == cli["summary"]
    layers = {c["key"]: c["layer"] for c in got["changes"]}
    assert layers == {"distributed.tp_size": "execution", "step_scheduler.global_batch_size": "convergence"}
    assert got["verdict"].startswith("new convergence experiment")


def test_diff_identical_configs(client):
    got = client.post("/v1/diff", json={"base": BASE, "new": BASE}).json()
    assert got["changes"] == [] and got["verdict"] is None


@pytest.mark.parametrize("field", ["base", "new"])
def test_diff_unusable_yaml_is_400_naming_the_side(client, field):
    body = {"base": BASE, "new": NEW, field: "a: [1, 2\nb: 3\n"}
    r = client.post("/v1/diff", json=body)
    assert r.status_code == 400
    assert r.json()["field"] == field and r.json()["line"] == 2


def test_diff_alias_bomb_is_400_fast(client):
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(8))
    start = time.perf_counter()
    r = client.post("/v1/diff", json={"base": BASE, "new": bomb})
    assert r.status_code == 400 and time.perf_counter() - start < 1.0


@pytest.mark.parametrize("body", [{}, {"base": BASE}, {"base": 1, "new": NEW}])
def test_diff_missing_or_wrong_fields_are_422(client, body):
    r = client.post("/v1/diff", json=body)
    assert r.status_code == 422
    assert all(e["loc"][0] == "body" for e in r.json()["detail"])


@pytest.mark.parametrize("body, field", [
    ({"model": "llama3-8b", "gpus": 8, "gpu_type": "a100-80gb", "precision": "fp8"}, "precision"),
    ({"model": "olmoe-7b", "gpus": 8, "gpu_type": "h100", "engine": "bundled"}, "engine"),
])
def test_rule_rejection_is_400_naming_the_request_field(client, body, field):
    r = client.post("/v1/recommend", json=body)
    assert r.status_code == 400 and r.json()["field"] == field
    assert "strategy: megatron" not in r.json()["detail"]


@pytest.mark.parametrize("overrides, code", [
    ({"optimizer._target_": "os.system"}, "RA-S001"),
    ({"step_scheduler.local_batch_size": 3}, "RA-B001"),
    ({"optimizer.lr": "abc"}, "RA-C002"),
])
def test_recommend_overrides_that_break_the_config_are_400_as_in_the_cli(client, overrides, code):
    body = {"model": "tiny-llama", "gpus": 2, "gpu_type": "cpu", "engine": "bundled", "overrides": overrides}
    r = client.post("/v1/recommend", json=body)
    assert r.status_code == 400, r.text
    assert r.json()["field"] == "overrides" and code in r.json()["detail"]


def test_recommend_cache_tells_true_from_1(client):
    """True == 1 == 1.0 in Python; as overrides they emit different YAML, so they are different requests."""
    body = {"model": "tiny-llama", "gpus": 2, "gpu_type": "cpu", "engine": "bundled",
            "overrides": {"dataloader.pin_memory": True}}
    first = client.post("/v1/recommend", json=body).json()["config_yaml"]
    second = client.post("/v1/recommend", json={**body, "overrides": {"dataloader.pin_memory": 1}}).json()
    assert "pin_memory: true" in first and "pin_memory: 1\n" in second["config_yaml"]
