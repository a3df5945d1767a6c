"""recommend --emit automodel: the advised recipe as a NeMo AutoModel YAML that validates in its dialect."""

from __future__ import annotations

import yaml

from service.configs.changes import effective, flatten
from service.recommend.automodel_emit import automodel_runs, checkpoint_cadence, launch_command
from service.recommend.recommendation import recommend
from service.validate.automodel.dialect import AUTOMODEL, detect
from service.validate.document import validate_text
from tests.cli import run_cli


def _errors(text: str, **flags) -> list:
    return [f for f in validate_text(text, "emitted.yaml", dialect=AUTOMODEL, **flags).findings
            if f.severity == "error"]


def test_llama_sft_on_8_h100_validates_in_automodels_dialect():
    rec = recommend("llama32-1b", 8, "h100", goal="sft", emit="automodel")
    assert rec.emit == "automodel" and rec.errors == 0
    data = yaml.safe_load(rec.config_yaml)
    assert detect(data) == AUTOMODEL and data["recipe"] == "TrainFinetuneRecipeForNextTokenPrediction"
    assert data["model"]["pretrained_model_name_or_path"] == "meta-llama/Llama-3.2-1B"
    assert data["distributed"]["strategy"] == "fsdp2"
    lay = rec.best.layout
    assert (data["distributed"]["tp_size"], data["step_scheduler"]["local_batch_size"]) == (lay.tp,
                                                                                          lay.micro_batch_size)
    assert rec.commands == {"automodel": "automodel config.yaml --nproc-per-node 8\n"}
    assert "#   automodel config.yaml --nproc-per-node 8" in rec.config_yaml  # the world validate reads
    assert _errors(rec.config_yaml) == []
    assert rec.to_dict()["emit"] == "automodel"


def test_qwen3_moe_on_16_h100_takes_a_layout_automodel_runs():
    rec = recommend("qwen3-30b-a3b", 16, "h100", goal="sft", emit="automodel")
    assert rec.errors == 0 and automodel_runs(rec.best, rec.model)
    data = yaml.safe_load(rec.config_yaml)
    dist = data["distributed"]
    assert dist["ep_size"] > 1 and "vp_size" not in dist and "etp_size" not in dist
    assert (dist["pp_size"] > 1) == ("pipeline" in dist)
    assert "--nnodes=2 --nproc-per-node=8" in rec.commands["automodel"]
    assert _errors(rec.config_yaml) == [] and _errors(rec.config_yaml, gpus=16) == []
    chosen = recommend("qwen3-30b-a3b", 16, "h100", goal="sft").best  # the layout recommend applies
    if not automodel_runs(chosen, rec.model):  # the switch is said, not silent
        assert any("not one AutoModel runs" in note for note in rec.notes)


def test_peft_and_pretrain_emit_their_sections():
    peft = yaml.safe_load(recommend("llama32-1b", 8, "h100", goal="peft", emit="automodel").config_yaml)
    assert peft["peft"]["_target_"].endswith("PeftConfig")
    pretrain = recommend("llama32-1b", 8, "h100", goal="pretrain", emit="automodel")
    data = yaml.safe_load(pretrain.config_yaml)
    assert data["model"]["_target_"].endswith(".from_config") and data["dataset"]["_target_"].endswith(
        "MockIterableDataset")
    assert _errors(pretrain.config_yaml) == []


def test_checkpoints_at_automodels_own_cadence():
    """AutoModel's recipes save every 500 steps on long runs and halfway through short ones, never only at the end."""
    assert [checkpoint_cadence(n) for n in (1, 100, 1000, 2000, 9500, 300_000)] == [1, 50, 500, 500, 500, 500]
    rec = recommend("llama32-1b", 8, "h100", goal="pretrain", emit="automodel")
    steps = yaml.safe_load(rec.config_yaml)["step_scheduler"]
    assert steps["max_steps"] > 1000 and steps["ckpt_every_steps"] == 500


def test_the_change_list_says_what_the_automodel_yaml_says():
    advised = recommend("llama3-8b", 8, "h100", goal="sft")
    rec = recommend("llama3-8b", 8, "h100", goal="sft", emit="automodel")
    written = flatten(yaml.safe_load(rec.config_yaml))
    assert any(c.key == "distributed.use_megatron_fsdp" for c in advised.changes)  # the Megatron config's knob
    for change in rec.changes:
        if not change.key.startswith("hardware."):  # the GPU count is the launch command's
            assert change.key in written and written[change.key] == change.new, change
    strategy = [c for c in rec.changes if c.key == "distributed.strategy"]
    assert [(c.old, c.new) for c in strategy] == [("megatron", "fsdp2")]
    # What the advised config trains with and the YAML does not change is not dropped: AdamW's default decay.
    assert written["optimizer.weight_decay"] == effective(advised.config, "optimizer.weight_decay") == 0.01


def test_the_default_answer_keeps_its_keys():
    rec = recommend("llama32-1b", 8, "h100", goal="sft")
    assert "emit" not in rec.to_dict() and "automodel" not in rec.commands


def test_launch_command_quotes_the_path():
    assert launch_command("my config.yaml", 4, 1) == "automodel 'my config.yaml' --nproc-per-node 4"
    assert "-m nemo_automodel.cli.app c.yaml" in launch_command("c.yaml", 8, 3)


def test_cli_writes_the_automodel_yaml(capsys, tmp_path):
    out = tmp_path / "am.yaml"
    code, stdout, _ = run_cli(capsys, "recommend", "--model", "llama32-1b", "--gpus", "8", "--gpu-type", "h100",
                              "--goal", "sft", "--emit", "automodel", "-o", str(out))
    assert code == 0 and f"automodel {out} --nproc-per-node 8" in stdout
    code, stdout, _ = run_cli(capsys, "validate", str(out))
    assert code == 0 and "0 error(s)" in stdout


def test_api_emits_automodel(client):
    r = client.post("/v1/recommend", json={"model": "llama32-1b", "gpus": 8, "gpu_type": "h100", "goal": "sft",
                                           "emit": "automodel"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["commands"]["automodel"].startswith("automodel ") and "recipe: Train" in body["config_yaml"]
    v = client.post("/v1/validate", json={"yaml": body["config_yaml"], "dialect": "automodel"})
    assert v.status_code == 200 and v.json()["summary"]["errors"] == 0
