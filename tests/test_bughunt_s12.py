"""Bug hunt s12 (notes/hunt_s12.md): the service's Hub mode and local paths, digits that int() refuses,
`recommend -o` atomicity, `diff` values and sections, `validate` on empty folders, content negotiation."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from recipe_index import find_bundled_model
from service.app import create_app
from service.changes import diff, verdict
from service.cli import main
from tests.test_index_models import _cache_repo, offline_hub  # noqa: F401 (a fixture)

REPO = Path(__file__).resolve().parents[1]
SMALL_LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256,
               "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4,
               "intermediate_size": 512, "vocab_size": 1000, "max_position_embeddings": 2048}


@pytest.fixture
def client() -> TestClient:
    return TestClient(create_app(), raise_server_exceptions=False)


# ---- H13: with the Hub allowed, the service still never reads a folder a client names -----------------------

@pytest.fixture
def hub_mode_beside_a_secret(tmp_path, monkeypatch, offline_hub):  # noqa: F811
    secret = {**SMALL_LLAMA, "hidden_size": "SECRET-API-KEY-abc123"}
    for repo in ("org-s12/leak", "org-s12/cached"):
        (tmp_path / repo).mkdir(parents=True)
        (tmp_path / repo / "config.json").write_text(json.dumps(secret))
    _cache_repo(offline_hub, "org-s12/cached", SMALL_LLAMA)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RECIPE_ADVISOR_ALLOW_HUB", "1")


def test_a_hub_id_that_names_a_server_folder_is_not_read(hub_mode_beside_a_secret, client):
    response = client.post("/v1/plan", json={"model": "org-s12/leak", "gpus": 8, "gpu_type": "h100"})
    assert response.status_code == 404 and "SECRET" not in response.text
    yaml = "model:\n  pretrained_model_name_or_path: org-s12/leak\n"
    response = client.post("/v1/validate", content=yaml, headers={"content-type": "application/yaml"})
    assert response.status_code == 200 and "SECRET" not in response.text
    assert "RA-C009" in response.text  # unknown to the service: not resolvable, said so


def test_a_hub_id_resolves_from_the_cache_not_from_a_folder_of_that_name(hub_mode_beside_a_secret, client):
    response = client.post("/v1/plan", json={"model": "org-s12/cached", "gpus": 8, "gpu_type": "h100"})
    assert response.status_code == 200, response.text
    assert response.json()["model"] == "org-s12/cached" and "SECRET" not in response.text  # the folder's is invalid


# ---- H10, H11: str.isdigit() is true for '²', which int() refuses ----------------------------------------------

@pytest.mark.parametrize("field", ["gpus", "nodes"])
def test_a_superscript_digit_in_the_validate_form_is_a_form_problem(client, field):
    response = client.post("/validate", data={"yaml": "model:\n  pretrained_model_name_or_path: llama3-8b\n",
                                              field: "²"})
    assert response.status_code == 422 and "text/html" in response.headers["content-type"]
    assert "whole number" in response.text


def test_a_superscript_size_in_a_config_json_is_refused_naming_the_field(tmp_path):
    from recipe_index.errors import ModelConfigError
    from recipe_index.models import resolve_model

    (tmp_path / "config.json").write_text(json.dumps({**SMALL_LLAMA, "num_hidden_layers": "²"}))
    with pytest.raises(ModelConfigError, match="num_hidden_layers"):
        resolve_model(str(tmp_path))


# ---- H6: recommend -o replaces the file whole or not at all ------------------------------------------------------

def _recommend_to(out: Path, file_size_limit: int | None = None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "service.cli", "recommend", "--model", "llama3-8b", "--gpus", "8",
           "--gpu-type", "h100", "--goal", "sft", "--engine", "bundled", "-o", str(out)]

    def limit() -> None:  # the disk "fills" after this many bytes
        resource.setrlimit(resource.RLIMIT_FSIZE, (file_size_limit, file_size_limit))

    return subprocess.run(cmd, preexec_fn=limit if file_size_limit else None, capture_output=True, text=True,
                          cwd=REPO, env={**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=120)


def test_a_failed_recommend_write_keeps_the_old_file(tmp_path):
    out = tmp_path / "config.yaml"
    out.write_text("model:\n  pretrained_model_name_or_path: keep-me\n")
    result = _recommend_to(out, file_size_limit=1024)
    assert result.returncode == 2 and "the file is as it was" in result.stderr, result.stderr
    assert out.read_text() == "model:\n  pretrained_model_name_or_path: keep-me\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.yaml"]  # no staging file left behind


def test_recommend_writes_through_a_symlink_and_into_a_device(tmp_path):
    target = tmp_path / "real.yaml"
    target.write_text("old\n")
    (tmp_path / "link.yaml").symlink_to(target)
    assert _recommend_to(tmp_path / "link.yaml").returncode == 0
    assert (tmp_path / "link.yaml").is_symlink() and "pretrained_model_name_or_path" in target.read_text()
    assert _recommend_to(Path(os.devnull)).returncode == 0
    assert Path(os.devnull).is_char_device()


# ---- H1, H7, H9, H12: diff ----------------------------------------------------------------------------------------

def test_adamw_default_betas_written_out_is_no_change():
    base = {"optimizer": {"_target_": "torch.optim.AdamW", "lr": 1e-4}}
    assert diff(base, {"optimizer": {**base["optimizer"], "betas": [0.9, 0.999], "eps": 1e-8}}) == []
    assert [c.key for c in diff(base, {"optimizer": {**base["optimizer"], "betas": [0.9, 0.95]}})] == [
        "optimizer.betas"]


def test_a_bool_or_a_float_for_a_strict_integer_is_a_change_but_not_for_a_float_setting():
    base = {"distributed": {"tp_size": 1}, "step_scheduler": {"global_batch_size": 32},
            "optimizer": {"_target_": "torch.optim.AdamW", "weight_decay": 0}}
    new = {"distributed": {"tp_size": True}, "step_scheduler": {"global_batch_size": 32.0},
           "optimizer": {"_target_": "torch.optim.AdamW", "weight_decay": 0.0}}
    assert {c.key for c in diff(base, new)} == {"distributed.tp_size", "step_scheduler.global_batch_size"}
    assert diff({"model": {"load_weights": True}}, {"model": {"load_weights": 1}}) != []


def test_a_section_replaced_by_a_value_is_one_change_shown_whole():
    [change] = diff({"distributed": {"tp_size": 2}}, {"distributed": 5})
    assert (change.key, change.old, change.new) == ("distributed", {"tp_size": 2}, 5)
    # null is no section: the keys written on the other side are the changes
    [change] = diff({"restore_from": None}, {"restore_from": {"path": "/ckpt/epoch_0_step_4"}})
    assert (change.key, change.old, change.new) == ("restore_from.path", "<absent>", "/ckpt/epoch_0_step_4")


def test_index_metadata_is_not_a_change_except_the_labels_that_are_convergence():
    changes = diff({"metadata": {"name": "a", "description": "x"}}, {"metadata": {"name": "b", "description": "y"}})
    assert changes == [] and verdict(changes) is None
    [change] = diff({"metadata": {"name": "a", "precision_recipe": "fp8cs"}},
                    {"metadata": {"name": "a", "precision_recipe": "fp8mx"}})
    assert (change.key, change.layer) == ("metadata.precision_recipe", "convergence")


# ---- H5: validate on a folder with nothing to check ------------------------------------------------------------

def test_an_empty_folder_beside_a_file_is_an_error_in_every_format(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    good = tmp_path / "a.yaml"
    good.write_text((REPO / "recipe_index" / "recipes" / "bundled" / "tiny_llama_pretrain.yaml").read_text())
    assert main(["validate", str(good), str(tmp_path / "empty"), "--format", "json"]) == 2
    files = {f["path"]: f["findings"] for f in json.loads(capsys.readouterr().out)["files"]}
    assert [f["code"] for f in files[str(tmp_path / "empty")]] == ["RA-F001"]
    assert main(["validate", str(tmp_path / "empty"), "--format", "sarif"]) == 2
    assert json.loads(capsys.readouterr().out)["runs"][0]["results"][0]["ruleId"] == "RA-F001"


# ---- H2, H4, H8 ---------------------------------------------------------------------------------------------------

def test_the_per_node_overflow_fix_offers_only_what_the_next_call_accepts(client):
    detail = client.post("/v1/plan", json={"model": "llama3-8b", "gpus": 9, "nodes": 1, "gpu_type": "h100"}).json()
    assert "without nodes" not in detail["detail"] and "gpus <= 8 with nodes" in detail["detail"]
    detail = client.post("/v1/plan", json={"model": "llama3-8b", "gpus": 16, "nodes": 2, "gpu_type": "h100"}).json()
    assert "the total (32) without nodes" in detail["detail"]
    assert client.post("/v1/plan", json={"model": "llama3-8b", "gpus": 32, "gpu_type": "h100"}).status_code == 200


@pytest.mark.parametrize("size", ["8B", "70B", "405B"])
def test_llama31_is_found_by_its_current_hub_id(size):
    card = find_bundled_model(f"meta-llama/Llama-3.1-{size}")
    assert card is not None and card.id == f"llama31-{size.lower()}"


@pytest.mark.parametrize("accept, yaml", [
    ("application/yaml", True), ("application/yaml;q=0, application/json", False),
    ("application/json, application/yaml;q=0.5", False), ("*/*", False), ("text/yaml;q=0.9, */*;q=0.1", True),
    ("application/yaml;q=abc", False)])
def test_recipe_negotiation_honours_q_values_and_varies_on_accept(client, accept, yaml):
    response = client.get("/v1/recipes/llama3_8b_pretrain_config", headers={"accept": accept})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/yaml" if yaml else "application/json")
    assert response.headers["vary"] == "Accept"
