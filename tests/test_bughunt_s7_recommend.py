"""Bug hunt s7 (#1, #3, #4, #5, #6, #14c, #14g): recommend's section overrides, recipe labels, model
override, hardware counts, scaled LR and CPU precision."""

from __future__ import annotations

import pytest
import yaml

from recipe_index import load_recipe_text
from service.changes import diff
from service.cli import main
from service.recommend import contract_defaults, recommend
from service.yamlio import OverrideError, load_yaml

LLAMA = ["recommend", "--model", "llama3-8b", "--gpus", "8", "--gpu-type", "h100"]
BODY = {"model": "llama3-8b", "gpus": 8, "gpu_type": "h100"}


def _convergence(changes) -> set[str]:
    return {c.key for c in changes if c.layer == "convergence"}


# ------------------------------------------------- #1 a whole section given as a scalar or a list


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


# ------------------------------------------------- #3 `diff base advised` agrees with recommend


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
    assert _convergence(diff(base, advised)) == _convergence(rec.changes)
    label = base["metadata"].get("precision_recipe")
    if rec.config["precision"] == base.get("precision", "bf16"):
        assert rec.config["metadata"].get("precision_recipe") == label
        assert "metadata.precision_recipe" not in _convergence(rec.changes)
    if rec.recipe.megatron_recipe:
        assert rec.config["metadata"]["megatron_recipe"] == rec.recipe.megatron_recipe


def test_an_unchanged_experiment_is_the_same_experiment_for_diff_too(tmp_path, capsys):
    # bughunt s7 #3: `diff` called every recommendation a new convergence experiment.
    out, base = tmp_path / "q.yaml", tmp_path / "qbase.yaml"
    assert main(["recommend", "--model", "qwen3-30b-a3b", "--gpus", "16", "--gpu-type", "h100", "-o", str(out)]) == 0
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


# ------------------------------------------------- #4 the model name is --model


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


# ------------------------------------------------- #5 the recipe labels are the advisor's


@pytest.mark.parametrize("override, key", [
    ("--metadata.megatron_recipe=llama3_70b_pretrain_config", "metadata.megatron_recipe"),
    ("--metadata.precision_recipe=fp8mx", "metadata.precision_recipe"),  # the recipe's is fp8cs
    ("--metadata={precision_recipe: fp8mx}", "metadata.precision_recipe"),
])
def test_overrides_of_the_recipe_labels_are_refused(override, key):
    # bughunt s7 #5: the commands ignored them and the change list left them out.
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
        assert _convergence(rec.changes) == set() and "megatron_bridge" in rec.commands
    assert renamed.config["metadata"]["name"] == "mine"
    other = {"metadata.megatron_recipe": "llama3_70b_pretrain_config"}
    r = client.post("/v1/recommend", json={**BODY, "overrides": other})
    assert r.status_code == 400 and r.json()["field"] == "overrides"


# ------------------------------------------------- #6 a hardware section keeps the request's counts


def test_a_hardware_section_override_keeps_the_gpu_counts(client):
    rec = recommend("llama3-8b", 8, "h100", nodes=2, overrides=["--hardware={gpu_type: H100-SXM}"])
    assert rec.config["hardware"] == {"gpu_type": "h100", "gpus_per_node": 8, "num_nodes": 2}
    assert not [f for f in rec.findings if f.code == "RA-C006"]
    r = client.post("/v1/recommend", json={**BODY, "nodes": 2, "overrides": {"hardware": "{gpu_type: h100}"}})
    assert r.status_code == 200 and r.json()["config"]["hardware"] == rec.config["hardware"]
    cpu = recommend("tiny-llama", 2, "cpu", engine="bundled", global_batch_size=64,
                    overrides=["--hardware={gpu_type: cpu}"])
    assert cpu.config["hardware"] == {"gpu_type": "cpu", "gpus_per_node": 2, "num_nodes": 1}


# ------------------------------------------------- #14c, #14g the bundled stand-in schedule and CPU runs


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
