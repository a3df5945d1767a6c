"""The convergence contract recommend keeps, as diff sees it: labels and precision, the scaled LR, CPU
precision, and the recipe the values come from."""

from __future__ import annotations

import json

import pytest
import yaml

from recipe_index import load_recipe_text
from service.cli.app import main
from service.configs.changes import diff
from service.configs.yamlio import load_yaml
from service.recommend.contract import contract_defaults
from service.recommend.recommendation import recommend
from tests.paths import REPO
from tests.service.recommend.test_request_overrides import BODY


def convergence_keys(changes) -> set[str]:
    return {c.key for c in changes if c.layer == "convergence"}


@pytest.mark.parametrize("model, gpus, gpu_type, goal, engine, precision", [
    ("qwen3-30b-a3b", 16, "h100", "pretrain", "megatron", None),
    ("llama3-8b", 8, "h100", "sft", "megatron", None),
    ("llama3-70b", 64, "b200", "peft", "megatron", None),
    ("llama3-8b", 8, "b200", "pretrain", "megatron", "fp8"),  # an fp8 recipe: its scaling label stays
    ("llama3-8b", 8, "h100", "pretrain", "megatron", "fp16"),  # no fp16 recipe: recommend changes the precision
    ("qwen3-600m", 2, "cpu", "sft", "bundled", None),
    ("tiny-llama", 2, "cpu", "pretrain", "bundled", None),
])
def test_diff_of_the_index_recipe_and_the_advised_config_agrees_with_recommend(model, gpus, gpu_type, goal, engine,
                                                                                precision):
    rec = recommend(model, gpus, gpu_type, goal=goal, engine=engine, precision=precision)
    base = load_yaml(load_recipe_text(rec.recipe.name)).data  # what GET /v1/recipes/<id> serves as YAML
    advised = load_yaml(rec.config_yaml).data
    assert convergence_keys(diff(base, advised)) == convergence_keys(rec.changes)
    label = base["metadata"].get("precision_recipe")
    if rec.config["precision"] == base.get("precision", "bf16"):
        assert rec.config["metadata"].get("precision_recipe") == label
        assert "metadata.precision_recipe" not in convergence_keys(rec.changes)
    if rec.recipe.megatron_recipe:
        assert rec.config["metadata"]["megatron_recipe"] == rec.recipe.megatron_recipe


def test_an_unchanged_experiment_is_the_same_experiment_for_diff_too(tmp_path, capsys):
    # `diff` called every recommendation a new convergence experiment.
    out, base = tmp_path / "q.yaml", tmp_path / "qbase.yaml"
    # 32 GPUs: the recipe (sized for 16) is re-planned, so the execution layer changes and the experiment does not.
    assert main(["recommend", "--model", "qwen3-30b-a3b", "--gpus", "32", "--gpu-type", "h100", "-o", str(out)]) == 0
    assert "(same experiment, new execution mapping" in capsys.readouterr().out
    base.write_text(load_recipe_text(yaml.safe_load(out.read_text())["metadata"]["source"].split()[-1]))
    assert main(["diff", str(base), str(out)]) == 0
    assert "0 convergence" in capsys.readouterr().out


def test_a_changed_precision_changes_its_label_in_both_tools(client):
    r = client.post("/v1/recommend", json={**BODY, "precision": "fp16"})
    assert r.status_code == 200, r.text
    rec = r.json()
    base = client.get(f"/v1/recipes/{rec['recipe']['name']}", headers={"Accept": "application/yaml"}).text
    d = client.post("/v1/diff", json={"base": base, "new": rec["config_yaml"]}).json()
    listed = {c["key"] for c in rec["changes"] if c["layer"] == "convergence"}
    assert listed == {c["key"] for c in d["changes"] if c["layer"] == "convergence"}
    assert listed == {"precision", "metadata.precision_recipe"}
    assert rec["config"]["metadata"]["precision_recipe"] == "fp16"


def test_the_scaled_min_lr_is_rounded():
    rec = recommend("llama3-8b", 8, "h100", engine="bundled")
    assert rec.config["lr_scheduler"]["min_lr"] == 3e-05
    assert "min_lr: 3.0e-05\n" in rec.config_yaml


def test_cpu_recommendations_train_in_fp32_unless_asked():
    from trainer.fused.runtime import cpu_precision_warning

    rec = recommend("qwen3-600m", 2, "cpu", engine="bundled", goal="sft")  # its library recipe says bf16
    assert rec.config["precision"] == "fp32" == rec.plan.request.precision
    assert cpu_precision_warning(rec.config["precision"], "cpu", flags=set()) is None
    assert any("bf16 -> fp32 on cpu" in n for n in rec.notes)
    assert contract_defaults("qwen3-600m", 2, "cpu", engine="bundled", goal="sft")[2] == "fp32"  # plan agrees
    asked = recommend("qwen3-600m", 2, "cpu", engine="bundled", goal="sft", precision="bf16")
    assert asked.config["precision"] == "bf16" and not any("-> fp32" in n for n in asked.notes)
    assert recommend("qwen3-600m", 8, "h100", engine="bundled", goal="sft").config["precision"] == "bf16"


def test_a_local_config_on_gpus_keeps_the_library_contract_on_the_bundled_engine(capsys):
    """A local config.json took the CPU smoke recipe's contract (fp32, seq 64) onto an H100."""
    local = str(REPO / "recipe_index" / "models" / "llama31-8b.json")
    contracts = []
    for model in (local, "llama31-8b"):
        assert main(["recommend", "--model", model, "--gpus", "8", "--gpu-type", "h100", "--engine", "bundled",
                     "--format", "json"]) == 0
        config = json.loads(capsys.readouterr().out)["config"]
        contracts.append((config["precision"], config["dataset"]["seq_length"],
                          config["step_scheduler"]["global_batch_size"]))
    assert contracts[0] == contracts[1] == ("bf16", 8192, 512)


def test_a_fine_tune_whose_contract_is_a_pretraining_recipe_says_so():
    """Llama2-7b has only a pretraining library recipe; its values carried silently."""
    rec = recommend("llama2-7b", 8, "h100", engine="bundled", goal="sft")
    assert any(n.startswith("llama2_7b_pretrain") and "is a pretrain recipe (the index has no sft recipe for "
               "llama2-7b): its LR, steps, warmup and global batch are pretrain values" in n for n in rec.notes)
    same_goal = recommend("qwen25-7b", 8, "h100", engine="bundled", goal="sft")  # a library SFT recipe exists
    assert not [n for n in same_goal.notes if "is a pretrain recipe" in n]


def test_a_recorded_precision_change_of_a_bridge_recipe_says_so_in_ra_c005():
    from service.recommend.recommendation import recommend

    rec = recommend("llama3-8b", 8, "h100", precision="fp16")
    [finding] = [f for f in rec.findings if f.code == "RA-C005"]
    assert finding.message.startswith("metadata.megatron_recipe llama3_8b_pretrain_2gpu_h100_bf16_config is Megatron "
                                      "Bridge's bf16 recipe, and this config trains in fp16 "
                                      "(metadata.precision_recipe: fp16)")
    assert finding.fix.startswith("set precision: bf16 (and metadata.precision_recipe: bf16) to train as the recipe")
