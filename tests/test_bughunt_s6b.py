"""Bug hunt s6b: the Megatron Bridge command runs the advised layout or is withheld with the reason."""

from __future__ import annotations

import subprocess

import pytest

from service.bridge_command import FSDP_SHARDING, bridge_gaps, bridge_overrides
from service.recommend import recommend

BASE = {"metadata": {"model": "llama3-70b"},
        "distributed": {"tp_size": 4, "pp_size": 4, "vp_size": 5, "etp_size": 1, "ep_size": 1,
                        "activation_checkpointing": "full", "use_distributed_optimizer": True,
                        "use_megatron_fsdp": True}}


def _config(**distributed) -> dict:
    config = {"metadata": dict(BASE["metadata"]), "distributed": dict(BASE["distributed"])}
    for key, value in distributed.items():
        if value is None:
            config["distributed"].pop(key)
        else:
            config["distributed"][key] = value
    return config


def test_keys_the_config_drops_are_reset_in_the_command():
    # PP 4 -> 1 with VP dropped: Bridge kept VP 5 and Megatron-Core raised.
    out = bridge_overrides(BASE, _config(pp_size=1, vp_size=None, etp_size=None, use_megatron_fsdp=None))
    assert "model.pipeline_model_parallel_size=1" in out
    assert "model.virtual_pipeline_model_parallel_size=null" in out
    assert "model.expert_tensor_parallel_size=null" in out  # Bridge's default: ETP = TP, as planned
    assert "ddp.use_megatron_fsdp=False" in out  # a flag is turned off, not nulled


def test_leaving_full_recompute_clears_its_method_and_layer_count():
    for new in ("selective", "none"):
        out = bridge_overrides(BASE, _config(activation_checkpointing=new))
        assert "model.recompute_method=null" in out and "model.recompute_num_layers=null" in out


def test_megatron_fsdp_shards_everything_as_the_plan_assumes():
    out = bridge_overrides(_config(use_megatron_fsdp=None), BASE)
    assert FSDP_SHARDING in out and "ddp.use_megatron_fsdp=True" in out


@pytest.mark.parametrize("model, pp, vp, expressible", [
    ("deepseek-v3", 8, 2, True), ("deepseek-v3", 32, 1, False), ("kimi-k2", 2, 8, True),
    ("olmoe-7b", 2, 4, False), ("llama3-70b", 32, 1, True),
])
def test_a_pipeline_the_recipes_layout_table_lacks_withholds_the_command(model, pp, vp, expressible):
    base = {"metadata": {"model": model}, "distributed": {"pp_size": 4, "vp_size": 4}}
    config = {"metadata": {"model": model}, "distributed": {"pp_size": pp, "vp_size": vp}}
    gaps = bridge_gaps(base, config, [])
    assert (not any("pipeline_model_parallel_layout" in g for g in gaps)) == expressible, gaps


def test_peft_commands_ask_for_the_base_checkpoint_bridge_asserts(tmp_path):
    rec = recommend("llama3-8b", 8, "h100", goal="peft")
    command = rec.commands["megatron_bridge"]
    assert 'checkpoint.pretrained_checkpoint="${PRETRAINED_CHECKPOINT:?' in command
    script = tmp_path / "bridge.sh"
    script.write_text("uv() { echo \"$@\"; }\n" + command)
    missing = subprocess.run(["bash", str(script)], capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"})
    assert missing.returncode != 0 and "set PRETRAINED_CHECKPOINT" in missing.stderr
    given = subprocess.run(["bash", str(script)], capture_output=True, text=True,
                           env={"PATH": "/usr/bin:/bin", "PRETRAINED_CHECKPOINT": "/ckpt/llama3-8b"})
    assert given.returncode == 0 and "checkpoint.pretrained_checkpoint=/ckpt/llama3-8b" in given.stdout


def test_optimizer_schedule_and_seed_overrides_reach_the_command():
    # bughunt s6b #5: these withheld the whole command as if Bridge could not take them.
    rec = recommend("llama3-8b", 8, "h100", overrides=[
        "--optimizer.weight_decay=0.05", "--optimizer.betas=[0.9, 0.95]", "--lr_scheduler.warmup_steps=100",
        "--lr_scheduler.min_lr=3e-5", "--clip_grad_norm.max_norm=0.5", "--rng.seed=7"])
    command = rec.commands["megatron_bridge"]
    for override in ("optimizer.weight_decay=0.05", "optimizer.adam_beta1=0.9", "optimizer.adam_beta2=0.95",
                     "scheduler.lr_warmup_iters=100", "optimizer.min_lr=3e-05", "optimizer.clip_grad=0.5",
                     "rng.seed=7"):
        assert override in command, override
    assert not any(n.startswith("no Megatron Bridge command") for n in rec.notes)


def test_recipe_filters_are_checked_as_the_cli_checks_them():
    # bughunt s6b #6: an unknown GPU type listed nothing (200 []), a misspelt filter listed everything.
    from fastapi.testclient import TestClient

    from service.app import app

    client = TestClient(app)
    unknown = client.get("/v1/recipes?hardware=hopper")
    assert unknown.status_code == 404 and unknown.json()["field"] == "hardware" and "h100" in unknown.json()["suggestions"]
    misspelt = client.get("/v1/recipes?familly=llama")
    assert misspelt.status_code == 422 and misspelt.json()["detail"][0]["loc"] == ["query", "familly"]
    alias = client.get("/v1/recipes?hardware=h100-sxm&mode=sft")
    assert alias.status_code == 200 and alias.json() and {r["hardware"] for r in alias.json()} == {"h100"}


def test_the_multi_node_bridge_command_guards_its_rendezvous_like_torchrun():
    # bughunt s6b #11
    command = recommend("llama3-70b", 8, "h100", nodes=4).commands["megatron_bridge"]
    assert "export MASTER_ADDR=${MASTER_ADDR:?set MASTER_ADDR" in command
    assert "--nnodes=4" in command and "--rdzv-id=llama3_70b_pretrain_32gpu_h100_bf16" in command
    assert subprocess.run(["bash", "-n"], input=command, text=True).returncode == 0


@pytest.mark.parametrize("layers, pp, vp, first, last", [(92, 8, 1, 10, 10), (61, 16, 1, 2, 3), (100, 6, 2, 14, 14)])
def test_the_uneven_split_offered_is_the_most_balanced(layers, pp, vp, first, last):
    # bughunt s6b #9: the first split found put 15 layers on each middle stage of 92 over PP 8.
    from service.rules.sizes import megatron_split

    split = megatron_split(layers, pp, vp)
    assert split == f"num_layers_in_first_pipeline_stage={first} and num_layers_in_last_pipeline_stage={last}"
    middle = (layers - first - last) // (pp - 2)
    assert middle * (pp - 2) + first + last == layers and middle % vp == 0 and first % vp == 0


def test_recipes_filter_by_the_family_models_lists_too():
    # bughunt s6b #7: `models` shows "Llama 3", recipes carry Bridge's package name "llama".
    import recipe_index as index

    by_card = index.list_recipes(family="Llama 3")
    assert by_card and all(r.model and index.find_bundled_model(r.model).family == "Llama 3" for r in by_card)
    assert {r.name for r in by_card} < {r.name for r in index.list_recipes(family="llama")}


def test_validate_reads_a_config_piped_in():
    # bughunt s6b #13: `validate -` said "no such file".
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    bad = "model:\n  pretrained_model_name_or_path: tiny-llama\ndistributed:\n  tp_size: 3\n"
    run = subprocess.run([sys.executable, "-m", "service.cli", "validate", "-"], input=bad, text=True,
                         capture_output=True, cwd=repo)
    assert run.returncode == 1 and "<stdin>:4:3: RA-L001 error" in run.stdout
    good = (repo / "recipe_index/recipes/bundled/tiny_llama_peft.yaml").read_text()
    run = subprocess.run([sys.executable, "-m", "service.cli", "validate", "-", "--format", "json"], input=good,
                         text=True, capture_output=True, cwd=repo)
    assert run.returncode == 0 and '"path": "<stdin>"' in run.stdout


# ---- review s6b ---------------------------------------------------------------------------------

def test_weight_decay_and_the_distributed_optimizer_reach_every_bridge_key_that_sets_them():
    # Bridge's scheduler rewrites weight decay from start/end_weight_decay, and syncs the DDP flag from
    # the optimizer's: one key alone is undone.
    out = bridge_overrides({"optimizer": {"weight_decay": 0.1}, "distributed": {"use_distributed_optimizer": True}},
                           {"optimizer": {"weight_decay": 0.01}, "distributed": {"use_distributed_optimizer": False}})
    for override in ("optimizer.weight_decay=0.01", "scheduler.start_weight_decay=0.01",
                     "scheduler.end_weight_decay=0.01", "ddp.use_distributed_optimizer=False",
                     "optimizer.use_distributed_optimizer=False"):
        assert override in out, override


def test_cleared_keys_map_to_what_bridge_reads_or_withhold_the_command():
    base = {"step_scheduler": {"global_batch_size": 512, "local_batch_size": 2}, "optimizer": {"lr": 3e-4},
            "clip_grad_norm": {"max_norm": 1.0}, "lr_scheduler": {"warmup_steps": 100}}
    # `max_norm: null` is "no clipping" (Bridge: clip_grad 0); a dropped micro batch is the schema's 1.
    no_clip = {**base, "clip_grad_norm": {"max_norm": None}, "step_scheduler": {"global_batch_size": 512}}
    out = bridge_overrides(base, no_clip)
    assert "optimizer.clip_grad=0.0" in out and "train.micro_batch_size=1" in out
    assert not any(o.endswith("=null") for o in out)
    # A dropped LR has no default the trainer would read: no command rather than optimizer.lr=null.
    no_lr = {**base, "optimizer": {"weight_decay": 0.1}}
    assert "optimizer.lr" in bridge_gaps(base, no_lr, []) and "optimizer.lr=null" not in bridge_overrides(base, no_lr)


def test_decay_steps_count_from_step_zero_in_bridge():
    out = bridge_overrides({"lr_scheduler": {"warmup_steps": 100}},
                           {"lr_scheduler": {"warmup_steps": 100, "decay_steps": 900}})
    assert "scheduler.lr_decay_iters=1000" in out and "scheduler.lr_warmup_iters=100" in out


def test_fine_tuning_commands_need_the_base_checkpoint_sft_too():
    assert "PRETRAINED_CHECKPOINT" in recommend("llama3-8b", 8, "h100", goal="sft").commands["megatron_bridge"]
    assert "PRETRAINED_CHECKPOINT" not in recommend("llama3-8b", 8, "h100").commands["megatron_bridge"]


def test_a_recipe_with_an_explicit_layout_and_no_table_withholds_a_new_pipeline():
    base = {"metadata": {"model": "qwen3-next-80b-a3b"},
            "distributed": {"pp_size": 4, "vp_size": 2, "pipeline_layout": "explicit"}}
    config = {"metadata": {"model": "qwen3-next-80b-a3b"}, "distributed": {"pp_size": 8, "vp_size": 1}}
    assert any("pipeline_model_parallel_layout" in g for g in bridge_gaps(base, config, []))
    glm = {"metadata": {"model": "glm-45v"}, "distributed": {"pp_size": 4, "vp_size": 6}}
    assert any("pipeline_model_parallel_layout" in g for g in bridge_gaps({"metadata": {"model": "glm-45v"}}, glm, []))


def test_a_whole_section_override_keeps_the_planned_values_it_leaves_out():
    rec = recommend("llama3-8b", 8, "h100", overrides=['--dataset={preset: mock}'])
    assert rec.config["dataset"]["seq_length"] == rec.plan.request.seq_length
    assert rec.config["step_scheduler"]["global_batch_size"] == rec.plan.request.global_batch_size
