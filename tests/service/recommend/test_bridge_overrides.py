"""What the Megatron Bridge command carries: every value the config states (reset keys included), Bridge's
own values where the config states none."""

from __future__ import annotations

import subprocess

import pytest

from service.configs.changes import effective
from service.recommend.bridge_command import (
    BRIDGE_KEYS,
    FSDP_SHARDING,
    UNRECORDED,
    bridge_gaps,
    bridge_overrides,
)
from service.recommend.recommendation import recommend
from tests.service.recommend.bridge_configs import LIBRARY, with_sections

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


def test_optimizer_schedule_and_seed_overrides_reach_the_command():
    # These withheld the whole command as if Bridge could not take them.
    rec = recommend("llama3-8b", 8, "h100", overrides=[
        "--optimizer.weight_decay=0.05", "--optimizer.betas=[0.9, 0.95]", "--lr_scheduler.warmup_steps=100",
        "--lr_scheduler.min_lr=3e-5", "--clip_grad_norm.max_norm=0.5", "--rng.seed=7"])
    command = rec.commands["megatron_bridge"]
    for override in ("optimizer.weight_decay=0.05", "optimizer.adam_beta1=0.9", "optimizer.adam_beta2=0.95",
                     "scheduler.lr_warmup_iters=100", "optimizer.min_lr=3e-05", "optimizer.clip_grad=0.5",
                     "rng.seed=7"):
        assert override in command, override
    assert not any(n.startswith("no Megatron Bridge command") for n in rec.notes)


def test_weight_decay_and_the_distributed_optimizer_reach_every_bridge_key_that_sets_them():
    # Bridge's scheduler rewrites weight decay from start/end_weight_decay, and syncs the DDP flag from
    # the optimizer's: one key alone is undone.
    out = bridge_overrides({"optimizer": {"weight_decay": 0.1}, "distributed": {"use_distributed_optimizer": True}},
                           {"optimizer": {"weight_decay": 0.01}, "distributed": {"use_distributed_optimizer": False}})
    for override in ("optimizer.weight_decay=0.01", "scheduler.start_weight_decay=0.01",
                     "scheduler.end_weight_decay=0.01", "ddp.use_distributed_optimizer=False",
                     "optimizer.use_distributed_optimizer=False"):
        assert override in out, override


def test_decay_steps_count_from_step_zero_in_bridge():
    out = bridge_overrides({"lr_scheduler": {"warmup_steps": 100}},
                           {"lr_scheduler": {"warmup_steps": 100, "decay_steps": 900}})
    assert "scheduler.lr_decay_iters=1000" in out and "scheduler.lr_warmup_iters=100" in out


def test_decay_steps_with_a_stated_warmup_end_at_warmup_plus_decay():
    rec = recommend("llama3-8b", 8, "h100",
                    overrides=["--lr_scheduler.decay_steps=1000", "--lr_scheduler.warmup_steps=2000"])
    command = rec.commands["megatron_bridge"]
    assert "scheduler.lr_warmup_iters=2000" in command and "scheduler.lr_decay_iters=3000" in command


def test_values_equal_to_our_schema_defaults_still_reach_the_command():
    rec = recommend("llama3-8b", 8, "h100", overrides=["--lr_scheduler.warmup_steps=0", "--lr_scheduler.min_lr=0"])
    command = rec.commands["megatron_bridge"]
    assert "scheduler.lr_warmup_iters=0" in command and "optimizer.min_lr=0" in command  # not Bridge's 2000, 3e-5
    sft = recommend("llama3-8b", 8, "h100", goal="sft", overrides=["--rng.seed=1234"])
    assert "rng.seed=1234" in sft.commands["megatron_bridge"]  # not _sft_common's 5678


@pytest.mark.parametrize("key", sorted(UNRECORDED))
def test_every_unrecorded_key_the_config_writes_is_an_override(key):
    value = effective(LIBRARY, key)  # our schema default: the value a default-based diff would drop
    value = {"optimizer.betas": [0.9, 0.95], "optimizer.weight_decay": 0.1}.get(key, value)
    if key == "lr_scheduler.decay_steps":
        value = 500
    section, leaf = key.split(".")
    config = with_sections(LIBRARY, **{section: {leaf: value}})
    if key == "lr_scheduler.decay_steps":
        config["lr_scheduler"]["warmup_steps"] = 0
    out = bridge_overrides(LIBRARY, config)
    for target in BRIDGE_KEYS[key].split(","):
        assert any(o.startswith(f"{target}=") for o in out), (key, out)
    assert not bridge_gaps(LIBRARY, config, [])


@pytest.mark.parametrize("goal", ["pretrain", "sft", "peft"])
def test_keys_the_config_does_not_state_leave_bridges_own_values(goal):
    command = recommend("llama3-8b", 8, "h100", goal=goal).commands["megatron_bridge"]
    for bridge_key in ("scheduler.", "rng.seed", "optimizer.min_lr", "optimizer.clip_grad", "optimizer.adam_beta",
                       "optimizer.weight_decay"):
        assert bridge_key not in command, bridge_key


def test_sft_sequence_and_cp_changes_set_offline_packing_as_bridge_recipes_do():
    rec = recommend("llama3-8b", 8, "h100", goal="sft", seq_length=16384)
    cp = rec.config["distributed"]["cp_size"]
    assert cp > 1  # the premise: a longer sequence brings context parallelism
    command = rec.commands["megatron_bridge"]
    assert "dataset.offline_packing_specs.packed_sequence_size=16384" in command
    assert f"dataset.offline_packing_specs.pad_seq_to_mult={2 * cp}" in command
    assert "packed_sequence_specs" not in command  # the spelling before Bridge 067f987's offline_packing_specs
    assert subprocess.run(["bash", "-n"], input=command, text=True).returncode == 0


def test_packing_follows_the_layout_and_only_where_the_recipe_packs():
    base = with_sections(LIBRARY, dataset={"packed_sequence": True, "seq_length": 4096})
    # CP 2 -> 1: the recipe's pad multiple of 4 is no longer needed, and the runner would keep it.
    out = bridge_overrides(base, with_sections(base, distributed={"cp_size": 1}))
    assert "dataset.offline_packing_specs.pad_seq_to_mult=1" in out
    assert not any("packed_sequence_size" in o for o in out)  # the sequence length did not move
    # lcm(2*CP when CP > 1, TP*CP with SP and TP > 1): the runner's own formula (mbridge_rules.md 2).
    sp = bridge_overrides(base, with_sections(base, distributed={"tp_size": 4, "sequence_parallel": True}))
    assert "dataset.offline_packing_specs.pad_seq_to_mult=8" in sp
    same = bridge_overrides(base, with_sections(base, distributed={"tp_size": 2, "sequence_parallel": True}))
    assert not any("offline_packing" in o for o in same)  # lcm(4, 4): the base's multiple already
    longer = bridge_overrides(base, with_sections(base, dataset={"seq_length": 8192}))
    assert "dataset.offline_packing_specs.packed_sequence_size=8192" in longer
    pretrain = bridge_overrides(LIBRARY, with_sections(LIBRARY, dataset={"seq_length": 4096}))
    assert "dataset.seq_length=4096" in pretrain and not any("offline_packing" in o for o in pretrain)


def test_grad_reduce_dtype_sets_both_bridge_flags_on_a_performance_recipe():
    base = {"metadata": {"kind": "benchmark"}, "distributed": {"grad_reduce_dtype": "bf16"}}
    out = bridge_overrides(base, {"metadata": {"kind": "benchmark"}, "distributed": {"grad_reduce_dtype": "fp32"}})
    assert "ddp.grad_reduce_in_fp32=True" in out and "mixed_precision.grad_reduce_in_fp32=True" in out
    assert not bridge_gaps(base, {"metadata": {"kind": "benchmark"}, "distributed": {"grad_reduce_dtype": "fp32"}}, [])


def test_lora_rank_and_alpha_map_to_bridges_dim_and_alpha():
    rec = recommend("llama3-8b", 8, "h100", goal="peft", overrides=["--peft.rank=16", "--peft.alpha=32"])
    command = rec.commands["megatron_bridge"]
    assert "peft.dim=16" in command and "peft.alpha=32" in command and "peft.alpha=32.0" not in command
    assert not any(n.startswith("no Megatron Bridge command") for n in rec.notes)
