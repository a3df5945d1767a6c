"""Bug hunt s8b (#9): a fix joined to its message with a full stop, and diff JSON for values JSON cannot
hold (YAML's .inf / .nan)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from fastapi.testclient import TestClient

from service.app import create_app
from service.facts import Finding, with_fix
from service.planner import PlanError, make_request
from recipe_index import resolve_model


def test_a_fix_follows_its_message_after_a_full_stop():
    assert with_fix("64 > the 8 of one h100 node", "pass gpus <= 8") == "64 > the 8 of one h100 node. Fix: pass gpus <= 8"
    assert with_fix("ends a sentence.", "do this") == "ends a sentence. Fix: do this"
    assert with_fix("no fix", None) == "no fix"
    assert Finding("RA-X", "error", "why", fix="how").text == "why. Fix: how"
    with pytest.raises(PlanError, match=r"node\. Fix: "):
        make_request(resolve_model("llama3-8b"), 64, "h100", nodes=1)


def test_diff_json_writes_infinite_and_nan_values_as_strings(tmp_path):
    base, new = tmp_path / "a.yaml", tmp_path / "b.yaml"
    base.write_text("optimizer: {lr: 1.0, eps: 1.0}\n")
    new.write_text("optimizer: {lr: .inf, eps: .nan}\n")
    out = subprocess.run([sys.executable, "-m", "service.cli", "diff", str(base), str(new), "--format", "json"],
                         capture_output=True, text=True, check=True).stdout
    changes = {c["key"]: c["new"] for c in json.loads(out)["changes"]}  # strict JSON: no Infinity / NaN tokens
    assert changes == {"optimizer.lr": "inf", "optimizer.eps": "nan"}
    body = TestClient(create_app()).post("/v1/diff", json={"base": base.read_text(), "new": new.read_text()}).json()
    assert {c["key"]: c["new"] for c in body["changes"]} == changes


def test_diff_reads_two_names_of_one_bundled_model_as_the_same_model():
    from service.changes import diff

    def config(name: str) -> dict:
        return {"model": {"pretrained_model_name_or_path": name}}

    assert diff(config("llama3-8b"), config("meta-llama/Meta-Llama-3-8B")) == []
    [change] = diff(config("llama3-8b"), config("llama31-8b"))  # another model: a new experiment
    assert change.layer == "convergence"
    [unknown] = diff(config("org/unknown-a"), config("org/unknown-b"))  # not bundled: compared as written
    assert unknown.layer == "convergence"


def test_a_recorded_precision_change_of_a_bridge_recipe_says_so_in_ra_c005():
    from service.recommend import recommend

    rec = recommend("llama3-8b", 8, "h100", precision="fp16")
    [finding] = [f for f in rec.findings if f.code == "RA-C005"]
    assert finding.message.startswith("metadata.megatron_recipe llama3_8b_pretrain_2gpu_h100_bf16_config is Megatron "
                                      "Bridge's bf16 recipe, and this config trains in fp16 "
                                      "(metadata.precision_recipe: fp16)")
    assert finding.fix.startswith("set precision: bf16 (and metadata.precision_recipe: bf16) to train as the recipe")


def test_an_override_too_deep_for_the_written_config_is_a_400_not_a_500():
    """Review s8 #1: 63 levels pass the override's own limit; under `metadata` the config is 65 deep."""
    deep = "[" * 63 + "]" * 63  # read as YAML, as the CLI reads it
    response = TestClient(create_app()).post("/v1/recommend", json={
        "model": "tiny-llama", "gpus": 2, "gpu_type": "cpu", "engine": "bundled", "overrides": {"metadata.deep": deep}})
    assert response.status_code == 400, response.text
    body = response.json()
    assert body["field"] == "overrides" and "would not read back as a config" in body["detail"]
