"""The recommender: decision tree, convergence contract, validated config, commands, impossible requests."""

from __future__ import annotations

import json

import pytest
import yaml

from service.cli.app import main
from service.plan.planner import PlanError, plan
from service.plan.shown import shown_rows
from service.recommend.bridge_command import BRIDGE_KEYS
from service.recommend.recommendation import Impossible, recommend
from service.validate.document import validate_text
from trainer.contract.dotted import get_dotted


@pytest.fixture(scope="module")
def llama_16():
    return recommend("llama3-8b", 16, "h100")


def test_tiny_llama_bundled_config_validates_with_zero_errors(tmp_path, capsys):
    config = tmp_path / "c.yaml"
    assert main(["recommend", "--model", "tiny-llama", "--gpus", "2", "--gpu-type", "cpu", "--goal", "pretrain",
                 "--engine", "bundled", "-o", str(config)]) == 0
    out = capsys.readouterr().out
    assert "validate: 0 error(s)" in out and "recipe-advisor train" in out
    data = yaml.safe_load(config.read_text())
    assert data["distributed"]["strategy"] in ("fsdp2", "ddp")
    assert data["dataset"]["_target_"] == "trainer.data.MockDataset"
    assert data["model"]["pretrained_model_name_or_path"] == "tiny-llama"
    assert data["hardware"] == {"gpu_type": "cpu", "gpus_per_node": 2, "num_nodes": 1}
    assert data["checkpoint"]["checkpoint_dir"].startswith("checkpoints/")
    assert main(["validate", str(config), "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["summary"]["errors"] == 0


def test_convergence_contract_is_kept(llama_16):
    rec = llama_16
    base = yaml.safe_load(open(rec.recipe.path).read())
    for key in ("global_batch_size",):
        assert rec.config["step_scheduler"][key] == base["step_scheduler"][key]
    assert rec.config["dataset"]["seq_length"] == base["dataset"]["seq_length"]
    assert rec.config["precision"] == base["precision"]
    assert rec.config["optimizer"] == base["optimizer"]
    assert not [c for c in rec.changes if c.layer == "convergence"]
    assert rec.errors == 0


def test_layout_is_the_plans_choice_and_is_applied(llama_16):
    rec, lay = llama_16, llama_16.best.layout
    dist = rec.config["distributed"]
    assert dist["tp_size"] == lay.tp and dist.get("pp_size", 1) == lay.pp and dist["cp_size"] == lay.cp
    assert rec.config["step_scheduler"]["local_batch_size"] == lay.micro_batch_size
    assert rec.config["hardware"] == {"gpu_type": "h100", "gpus_per_node": 8, "num_nodes": 2}
    assert rec.best.fits and rec.best.tokens_per_s >= rec.plan.best.tokens_per_s * 0.94
    assert {c.key for c in rec.changes} >= {"hardware.gpus_per_node", "hardware.num_nodes"}


def test_launch_commands(llama_16):
    cmds = llama_16.commands
    assert set(cmds) == {"torchrun_multinode", "sbatch", "megatron_bridge"}
    assert "--rdzv-backend=c10d" in cmds["torchrun_multinode"] and "--nnodes=2" in cmds["torchrun_multinode"]
    assert "#SBATCH --nodes=2" in cmds["sbatch"] and "#SBATCH --gpus-per-node=8" in cmds["sbatch"]
    bridge = cmds["megatron_bridge"]
    assert "run_recipe.py" in bridge and f"--recipe {llama_16.recipe.megatron_recipe}" in bridge
    assert "--dataset mock" in bridge
    single = recommend("llama3-8b", 8, "h100").commands["torchrun"]
    assert "--standalone --nproc-per-node=8" in single


def test_user_overrides_are_convergence_changes():
    rec = recommend("llama3-8b", 8, "h100", seq_length=4096, overrides=["--optimizer.lr", "1e-4"])
    layers = {c.key: c.layer for c in rec.changes}
    assert layers["dataset.seq_length"] == "convergence" and layers["optimizer.lr"] == "convergence"
    assert rec.config["optimizer"]["lr"] == pytest.approx(1e-4) and rec.errors == 0


def test_one_gpu_switches_to_peft():
    rec = recommend("llama3-8b", 1, "h100", goal="pretrain")
    assert rec.goal == "peft" and rec.config.get("peft") and rec.recipe.mode == "peft"
    assert any("only PEFT" in note for note in rec.notes)


def test_peft_without_a_peft_recipe_says_which_recipe_it_fell_back_to():
    rec = recommend("deepseek-v3", 256, "h100", goal="peft")
    note = " ".join(rec.notes)
    assert "no PEFT recipe for deepseek-v3" in note and rec.recipe.name in note
    assert rec.config["peft"]["method"] == "lora"
    assert any(c.key.startswith("peft.") and c.layer == "convergence" for c in rec.changes)


def test_closest_size_when_the_model_has_no_recipe():
    rec = recommend("tiny-qwen3", 1, "h100", goal="pretrain")
    assert any("closest size" in note for note in rec.notes) and rec.recipe.model != "tiny-qwen3"
    assert rec.config["model"]["pretrained_model_name_or_path"] == "tiny-qwen3" and rec.errors == 0


def test_long_context_plans_context_parallel():
    rec = recommend("llama3-8b", 8, "h100", seq_length=65536)
    assert rec.best.layout.cp > 1 and any("long context" in note for note in rec.notes)


def test_model_that_cannot_fit_says_how_many_gpus_it_needs(capsys):
    with pytest.raises(Impossible) as err:
        recommend("llama3-70b", 1, "h100", goal="pretrain")
    needed = err.value.gpus_needed
    assert needed and needed > 1 and f"The fewest h100 GPUs found to fit it: {needed}" in str(err.value)
    assert main(["recommend", "--model", "llama3-70b", "--gpus", "1", "--gpu-type", "h100"]) == 2
    assert "found to fit it" in capsys.readouterr().err


def test_unknown_gpu_type_lists_the_known_ones(capsys):
    assert main(["recommend", "--model", "llama3-8b", "--gpus", "8", "--gpu-type", "h1000"]) == 2
    err = capsys.readouterr().err
    assert "unknown GPU type 'h1000'" in err and "h100" in err and "b300" in err


def test_bundled_engine_refuses_an_moe_family_it_does_not_build_with_the_reason():
    with pytest.raises(PlanError) as err:
        recommend("olmoe-7b", 8, "h100", engine="bundled")
    assert "MoE model of type 'olmoe'" in str(err.value) and "megatron" in str(err.value)


def test_bundled_engine_plans_expert_parallel_for_qwen3_moe():
    rec = recommend("qwen3-30b-a3b", 8, "h100", goal="sft", engine="bundled")
    d = rec.config["distributed"]
    assert d["strategy"] == "fsdp2" and d["ep_size"] > 1 and d["tp_size"] == 1 and d["etp_size"] == 1
    assert d["activation_checkpointing"] != "selective"  # not with expert parallel (RA-E007)
    assert not [f for f in validate_text(rec.config_yaml).findings if f.severity == "error"]


def test_json_output_has_config_layout_and_commands(capsys):
    assert main(["recommend", "--model", "tiny-llama", "--gpus", "2", "--gpu-type", "cpu", "--engine", "bundled",
                 "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {"config", "config_yaml", "layout", "changes", "findings", "commands", "notes"} <= set(data)
    assert yaml.safe_load(data["config_yaml"]) == data["config"]
    report = validate_text(data["config_yaml"])
    assert report.errors == 0


@pytest.mark.parametrize("gpu_type, gpus, expected", [
    ("h100", 8, {"compile.enabled": True, "model.kernels": "auto", "loss_fn.chunked": "auto",
                 "optimizer.fused": True, "model.attn_implementation": "sdpa"}),
    ("cpu", 2, {"compile.enabled": False, "model.kernels": "torch", "loss_fn.chunked": "auto",
                "optimizer.fused": True, "model.attn_implementation": "sdpa"}),
])
def test_bundled_config_turns_on_the_fast_paths_of_its_hardware(gpu_type, gpus, expected):
    from trainer.contract.config import parse_config

    rec = recommend("tiny-llama", gpus, gpu_type, engine="bundled")
    assert {key: get_dotted(rec.config, key) for key in expected} == expected
    assert rec.errors == 0 and validate_text(rec.config_yaml).errors == 0
    parse_config(yaml.safe_load(rec.config_yaml))  # the trainer's own schema reads it
    # Fast paths are execution settings: the change list says so.
    layers = {c.key: c.layer for c in rec.changes if c.key in expected}
    assert layers and set(layers.values()) == {"execution"}


def test_user_overrides_win_over_the_fast_paths():
    rec = recommend("tiny-llama", 1, "h100", engine="bundled",
                    overrides=["--compile.enabled", "false", "--model.kernels", "reference", "--loss_fn.chunked=false"])
    assert get_dotted(rec.config, "compile.enabled") is False and get_dotted(rec.config, "model.kernels") == "reference"
    assert get_dotted(rec.config, "loss_fn.chunked") is False and rec.errors == 0


def test_megatron_configs_get_no_bundled_fast_paths(llama_16):
    assert "kernels" not in llama_16.config.get("model", {}) and "loss_fn" not in llama_16.config


def test_bundled_fp8_is_kept_where_the_trainer_runs_it():
    rec = recommend("tiny-llama", 2, "h100", engine="bundled", precision="fp8")
    assert rec.config["precision"] == "fp8"
    assert any(("torchao" in n) for n in rec.notes)  # the extra to install
    assert rec.best.layout.tp == 1  # torchao float8 runs with data parallel only
    assert not [f for f in rec.findings if f.severity == "error"]


@pytest.mark.parametrize("gpu_type, precision", [("a100-40gb", "fp8"), ("cpu", "fp8"), ("b200", "nvfp4")])
def test_bundled_refuses_a_precision_asked_for_that_it_cannot_train_in(gpu_type, precision):
    # It used to train in bf16 with a note and exit 0, while the megatron engine and
    # `plan` refuse the same request naming --precision.
    with pytest.raises(PlanError) as err:
        recommend("tiny-llama", 2, gpu_type, engine="bundled", precision=precision)
    # Megatron is offered only where it trains that precision on that GPU (a100 has no FP8, cpu no Megatron)
    assert err.value.field == "precision" and ("--engine megatron" in err.value.fix) == (gpu_type == "b200")


# ------------------------------------------------------- the Megatron Bridge command runs the config's experiment


def _no_bridge(rec, *keys):
    """No command runs run_recipe.py, and a note names every key Bridge cannot take as an override."""
    assert "megatron_bridge" not in rec.commands
    assert not any("run_recipe.py" in command for command in rec.commands.values())
    note = next(n for n in rec.notes if n.startswith("no Megatron Bridge command"))
    assert all(key in note for key in keys), note
    return note


def test_bridge_command_is_withheld_when_the_precision_changes():
    rec = recommend("llama3-8b", 8, "h100", precision="fp16")  # no fp16 recipe: bf16 -> fp16
    assert rec.config["precision"] == "fp16"
    # The precision label changes with it, listed as `diff` lists it
    assert [c.key for c in rec.changes if c.layer == "convergence"] == ["metadata.precision_recipe", "precision"]
    assert rec.config["metadata"]["precision_recipe"] == "fp16"
    _no_bridge(rec, "precision")


def test_bridge_command_is_withheld_when_the_model_is_swapped():
    rec = recommend("tiny-llama", 2, "h100")
    assert rec.recipe.model != "tiny-llama" and rec.recipe.megatron_recipe
    _no_bridge(rec, "model.pretrained_model_name_or_path")


def test_bridge_command_is_withheld_when_lora_is_added_to_a_pretrain_recipe():
    rec = recommend("llama2-7b", 8, "h100", goal="peft")
    assert rec.recipe.mode == "pretrain" and rec.config["peft"]["method"] == "lora"
    _no_bridge(rec, "peft.method", "peft.rank")


def test_bridge_command_is_withheld_when_the_pipeline_split_needs_settings():
    rec = recommend("llama3-8b", 24, "h100")  # 32 layers over PP 3: a split Megatron needs settings for
    # the config writes them, so no RA-L011; run_recipe.py cannot take them as overrides
    assert not [f for f in rec.findings if f.code == "RA-L011"]
    settings = [key for key in rec.config["model"] if key.endswith("_pipeline_split") or "_pipeline_stage" in key]
    assert settings
    _no_bridge(rec, *settings)


def test_uneven_split_keeps_the_recipes_explicit_layout():
    """DeepSeek-V3's 61 layers over PP=16: its Bridge recipe places them with an explicit layout; the
    config keeps it, so no RA-L011 on our own output and the Bridge command is emitted."""
    rec = recommend("deepseek-v3", 8, "h100", nodes=32)
    dist = rec.config["distributed"]
    assert 61 % (dist["pp_size"] * (dist.get("vp_size") or 1)) != 0  # the premise: an uneven split
    assert dist["pipeline_layout"] == "explicit"
    assert not any(f.code == "RA-L011" for f in rec.findings)
    assert "megatron_bridge" in rec.commands


def test_bridge_command_carries_every_change_it_can_express(llama_16):
    bridge = llama_16.commands["megatron_bridge"]
    mapped = [c for c in llama_16.changes if c.key in BRIDGE_KEYS and c.new is not None]
    assert mapped and all(f"{BRIDGE_KEYS[c.key]}=" in bridge for c in mapped)
    assert not any(n.startswith("no Megatron Bridge command") for n in llama_16.notes)
    rec = recommend("llama3-8b", 8, "h100", global_batch_size=256)
    assert "train.global_batch_size=256" in rec.commands["megatron_bridge"]


# ------------------------------------------------------- recipe choice, contract, errors, data


def test_requested_precision_picks_the_matching_recipe():
    rec = recommend("gpt-oss-20b", 8, "h100", goal="sft", precision="fp8")
    assert rec.recipe.name == "gpt_oss_20b_sft_8gpu_h100_fp8cs"
    assert not [c for c in rec.changes if c.key == "precision"]
    assert not [f for f in rec.findings if f.code == "RA-C005"]
    assert "--recipe gpt_oss_20b_sft_8gpu_h100_fp8cs_config" in rec.commands["megatron_bridge"]
    assert recommend("gpt-oss-20b", 8, "h100", goal="sft").recipe.name == "gpt_oss_20b_sft_8gpu_h100_bf16"


def test_one_gpu_peft_switch_keeps_the_peft_recipes_contract(capsys):
    assert main(["recommend", "--model", "llama3-8b", "--gpus", "1", "--gpu-type", "h100", "--goal", "pretrain",
                 "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["goal"] == "peft" and data["recipe"]["name"] == "llama3_8b_peft_1gpu_h100_bf16"
    base = yaml.safe_load(open(recommend("llama3-8b", 1, "h100", goal="peft").recipe.path).read())
    assert get_dotted(data["config"], "dataset.seq_length") == base["dataset"]["seq_length"]
    assert get_dotted(data["config"], "step_scheduler.global_batch_size") == base["step_scheduler"]["global_batch_size"]
    keys = {c["key"] for c in data["changes"]}
    assert not keys & {"dataset.seq_length", "step_scheduler.global_batch_size"}
    # What the user did give still carries into the PEFT request.
    rec = recommend("llama3-8b", 1, "h100", goal="pretrain", seq_length=2048)
    assert rec.goal == "peft" and rec.config["dataset"]["seq_length"] == 2048


@pytest.mark.parametrize("kwargs, field, says", [
    ({"model": "llama3-8b", "gpus": 8, "gpu_type": "a100-80gb", "precision": "fp8"}, "precision", "RA-P001"),
    ({"model": "olmoe-7b", "gpus": 8, "gpu_type": "h100", "engine": "bundled"}, "engine", "--engine megatron"),
])
def test_rule_rejections_name_the_request_field(kwargs, field, says):
    with pytest.raises(PlanError) as err:
        recommend(**kwargs)
    assert err.value.field == field and says in str(err.value)
    assert "strategy: megatron" not in str(err.value)


def test_peft_fallback_trains_on_fine_tuning_data_not_mock():
    rec = recommend("llama2-7b", 8, "h100", goal="peft")
    assert rec.config["dataset"]["preset"] == "squad"
    assert any("dataset.preset mock -> squad" in n for n in rec.notes)
    assert not [f for f in validate_text(rec.config_yaml).findings if f.code == "RA-C007"]
    user = recommend("llama2-7b", 8, "h100", goal="peft", overrides=["--dataset.preset", "tulu3"])
    assert user.config["dataset"]["preset"] == "tulu3"


def test_overrides_that_break_the_config_exit_2_and_write_nothing(tmp_path, capsys):
    out = tmp_path / "c.yaml"
    assert main(["recommend", "--model", "tiny-llama", "--gpus", "2", "--gpu-type", "cpu", "--engine", "bundled",
                 "-o", str(out), "--distributed.tp_size", "3"]) == 2
    err = capsys.readouterr().err
    # keyed, not located in the file that was not written
    assert "distributed.tp_size: RA-L006 error" in err and "nothing written" in err and str(out) not in err
    assert not out.exists()


def test_bundled_stand_in_recipe_takes_lr_and_steps_from_the_models_library_recipe():
    rec = recommend("llama3-8b", 8, "h100", goal="peft", engine="bundled")
    assert rec.recipe.model != "llama3-8b"  # a tiny stand-in recipe, tuned for a tiny model
    cfg = rec.config
    # llama3_8b_peft_1gpu_h100_bf16
    assert cfg["optimizer"]["lr"] == 1e-4 and cfg["step_scheduler"]["max_steps"] == 1000
    assert cfg["lr_scheduler"]["min_lr"] < cfg["optimizer"]["lr"]  # the schedule keeps its shape
    assert any("point dataset.path" in n for n in rec.notes)
    assert {c.key for c in rec.changes if c.layer == "convergence"} >= {"optimizer.lr", "step_scheduler.max_steps"}
    tiny = recommend("tiny-llama", 2, "cpu", goal="peft", engine="bundled")  # its own recipe: unchanged
    assert not any(c.key == "optimizer.lr" for c in tiny.changes)


def test_layout_overrides_are_flagged_against_the_planned_estimates():
    rec = recommend("llama3-8b", 8, "h100", overrides=["--distributed.tp_size", "4"])
    assert rec.config["distributed"]["tp_size"] == 4
    assert any("distributed.tp_size" in n and "before them" in n for n in rec.notes)
    plain = recommend("llama3-8b", 8, "h100", overrides=["--optimizer.lr", "1e-4"])
    assert not any("change the layout" in n for n in plain.notes)


def test_one_gpu_peft_switch_keeps_only_the_peft_notes():
    rec = recommend("llama3-8b", 1, "h100", goal="pretrain", engine="bundled")
    assert rec.goal == "peft" and rec.notes[0].startswith("1 GPU: pretrain does not fit")
    assert not any("_pretrain_" in n for n in rec.notes)  # the abandoned pretrain recipe and contract
    assert any("llama3_8b_peft_" in n for n in rec.notes)


def test_own_bundled_recipe_gets_no_carried_schedule_note():
    rec = recommend("tiny-llama", 2, "cpu", goal="pretrain", engine="bundled")
    assert not any(" steps from " in n or n.startswith("LR ") for n in rec.notes)


def test_cpu_sbatch_asks_for_cpus_not_gpus():
    sbatch = recommend("tiny-llama", 2, "cpu", engine="bundled").commands["sbatch"]
    assert "#SBATCH --cpus-per-task=2" in sbatch and "--gpus-per-node" not in sbatch
    assert "#SBATCH --gpus-per-node=8" in recommend("llama3-8b", 16, "h100").commands["sbatch"]


def test_a_stand_in_recipes_sequence_is_capped_at_the_models_context():
    """tiny-llama (256 positions) planned from Qwen2.5-0.5B's recipe (4096) must not exceed its context."""
    rec = recommend("tiny-llama", 2, "h100")
    assert rec.recipe.model != "tiny-llama"
    assert rec.config["dataset"]["seq_length"] == 256
    assert not [f for f in rec.findings if f.code == "RA-C011"]


@pytest.mark.parametrize("model, gpus, gpu_type, goal, seq", [
    ("nemotronh-8b", 16, "a100-40gb", "peft", None),
    ("deepseek-v3", 128, "b200", "pretrain", 4096),
])
def test_recommend_applies_the_plans_first_layout(model, gpus, gpu_type, goal, seq):
    # Recommend re-picked for memory headroom, so `plan` and `recommend` named two bests. The first row `plan`
    # shows is the candidate sources' choice (DeepSeek-V3 on 128 B200: a transferred layout), as recommend's is.
    rec = recommend(model, gpus, gpu_type, goal=goal, seq_length=seq)
    first = shown_rows(plan(rec.plan.request), 1)[0].row
    assert rec.best.layout == first.layout and rec.best.sharding == first.sharding


@pytest.mark.parametrize("model, gpus", [("kimi-k2", 512), ("moonlight-16b", 64)])
def test_recommend_prefers_a_pipeline_the_library_recipe_can_launch(model, gpus):
    """Kimi K2 on 512 H100 was recommended at PP 32, which its recipe's builder refuses."""
    from service.layouts.bridge_tables import PIPELINE_LAYOUT_TABLES
    from service.recommend.recommendation import recommend

    rec = recommend(model, gpus, "h100")
    lay = rec.best.layout
    assert lay.pp == 1 or (lay.pp, lay.vp_or_1) in PIPELINE_LAYOUT_TABLES[model], lay
    assert not [f for f in rec.findings if f.code == "RA-L019"]
    assert "megatron_bridge" in rec.commands


def test_an_moe_model_on_the_cpu_card_is_sent_to_a_gpu_type_too(capsys):
    """The fix said --engine megatron, which the cpu card refuses in turn."""
    assert main(["recommend", "--model", "olmoe-7b", "--gpus", "2", "--gpu-type", "cpu", "--engine", "bundled"]) == 2
    fix = capsys.readouterr().err.split("Fix:")[-1]
    assert "--engine megatron" in fix and "--gpu-type" in fix
