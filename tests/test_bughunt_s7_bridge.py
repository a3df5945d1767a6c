"""Bug hunt s7 (#2, #10, #12, #14a, #14b): the Megatron Bridge command states what the config states.

Bridge values our index does not record (the schedule, seed, clipping, betas, weight decay) are
Bridge's own, not our schema defaults: the command passes what the config writes, and never a value
it derives from a default the config does not state.
"""

from __future__ import annotations

import subprocess

import pytest

from service.bridge_command import BRIDGE_KEYS, UNRECORDED, bridge_gaps, bridge_overrides, gaps_note
from service.changes import effective
from service.recommend import recommend

LIBRARY = {"metadata": {"kind": "library", "model": "llama3-8b"}, "optimizer": {"lr": 3e-4},
           "distributed": {"tp_size": 1, "cp_size": 2}, "dataset": {"preset": "mock", "seq_length": 8192}}


def _with(base: dict, **sections) -> dict:
    config = {key: dict(value) if isinstance(value, dict) else value for key, value in base.items()}
    for section, values in sections.items():
        config[section] = {**config.get(section, {}), **values}
    return config


def _bridge_note(rec) -> str:
    return next(n for n in rec.notes if n.startswith("no Megatron Bridge command"))


# ---- #2a: decay steps never invent a warmup ------------------------------------------------------

def test_decay_steps_without_a_stated_warmup_withhold_the_command_instead_of_zeroing_bridges_warmup():
    rec = recommend("llama3-8b", 8, "h100", overrides=["--lr_scheduler.decay_steps=1000"])
    assert "megatron_bridge" not in rec.commands
    assert not any("lr_warmup_iters" in command for command in rec.commands.values())
    note = _bridge_note(rec)
    assert "lr_scheduler.decay_steps: it counts the steps after the warmup" in note
    assert "--lr_scheduler.warmup_steps" in note
    config = _with(LIBRARY, lr_scheduler={"decay_steps": 1000})
    assert not any("scheduler." in o for o in bridge_overrides(LIBRARY, config))
    assert "lr_scheduler.decay_steps" in bridge_gaps(LIBRARY, config, [])


def test_decay_steps_with_a_stated_warmup_end_at_warmup_plus_decay():
    rec = recommend("llama3-8b", 8, "h100",
                    overrides=["--lr_scheduler.decay_steps=1000", "--lr_scheduler.warmup_steps=2000"])
    command = rec.commands["megatron_bridge"]
    assert "scheduler.lr_warmup_iters=2000" in command and "scheduler.lr_decay_iters=3000" in command


# ---- #2b: a value the user writes is passed, even our schema default ----------------------------

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
    config = _with(LIBRARY, **{section: {leaf: value}})
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


# ---- #10: fine-tuning commands keep offline packing in step --------------------------------------

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
    base = _with(LIBRARY, dataset={"packed_sequence": True, "seq_length": 4096})
    # CP 2 -> 1: the recipe's pad multiple of 4 is no longer needed, and the runner would keep it.
    out = bridge_overrides(base, _with(base, distributed={"cp_size": 1}))
    assert "dataset.offline_packing_specs.pad_seq_to_mult=1" in out
    assert not any("packed_sequence_size" in o for o in out)  # the sequence length did not move
    # lcm(2*CP when CP > 1, TP*CP with SP and TP > 1): the runner's own formula (mbridge_rules.md 2).
    sp = bridge_overrides(base, _with(base, distributed={"tp_size": 4, "sequence_parallel": True}))
    assert "dataset.offline_packing_specs.pad_seq_to_mult=8" in sp
    same = bridge_overrides(base, _with(base, distributed={"tp_size": 2, "sequence_parallel": True}))
    assert not any("offline_packing" in o for o in same)  # lcm(4, 4): the base's multiple already
    longer = bridge_overrides(base, _with(base, dataset={"seq_length": 8192}))
    assert "dataset.offline_packing_specs.packed_sequence_size=8192" in longer
    pretrain = bridge_overrides(LIBRARY, _with(LIBRARY, dataset={"seq_length": 4096}))
    assert "dataset.seq_length=4096" in pretrain and not any("offline_packing" in o for o in pretrain)


# ---- #12: the gradient reduce dtype and LoRA's rank/alpha ----------------------------------------

def test_grad_reduce_dtype_sets_both_bridge_flags_on_a_performance_recipe():
    base = {"metadata": {"kind": "benchmark"}, "distributed": {"grad_reduce_dtype": "bf16"}}
    out = bridge_overrides(base, {"metadata": {"kind": "benchmark"}, "distributed": {"grad_reduce_dtype": "fp32"}})
    assert "ddp.grad_reduce_in_fp32=True" in out and "mixed_precision.grad_reduce_in_fp32=True" in out
    assert not bridge_gaps(base, {"metadata": {"kind": "benchmark"}, "distributed": {"grad_reduce_dtype": "fp32"}}, [])


def test_grad_reduce_dtype_on_a_library_recipe_says_why_bridge_cannot_take_it():
    # Library recipes keep mixed_precision: "bf16_mixed", whose grad_reduce_in_fp32=True setup() copies
    # over ddp's, and an override of a field of that string fails in Hydra.
    rec = recommend("llama3-8b", 8, "h100", grad_reduce_dtype="bf16")
    assert "megatron_bridge" not in rec.commands
    note = _bridge_note(rec)
    assert "distributed.grad_reduce_dtype: Bridge's library recipes name a mixed-precision preset" in note
    assert "cannot take distributed.grad_reduce_dtype" not in note


def test_lora_rank_and_alpha_map_to_bridges_dim_and_alpha():
    rec = recommend("llama3-8b", 8, "h100", goal="peft", overrides=["--peft.rank=16", "--peft.alpha=32"])
    command = rec.commands["megatron_bridge"]
    assert "peft.dim=16" in command and "peft.alpha=32" in command and "peft.alpha=32.0" not in command
    assert not any(n.startswith("no Megatron Bridge command") for n in rec.notes)


def test_a_fractional_lora_alpha_is_a_gap_with_a_reason_not_a_bridge_value():
    rec = recommend("llama3-8b", 8, "h100", goal="peft", overrides=["--peft.alpha=16.5"])
    assert "megatron_bridge" not in rec.commands
    note = _bridge_note(rec)
    assert "peft.alpha: Bridge's LoRA alpha is an int" in note and "--peft.alpha 16" in note
    assert "peft.alpha=16.5" not in note


# ---- #14: a dropped key is named as dropped, and --dataset agrees with the config ----------------

@pytest.mark.parametrize("override, key, recipe_value", [
    ("--step_scheduler={global_batch_size: 64}", "step_scheduler.max_steps", "1168251"),
    ("--distributed={tp_size: 2}", "distributed.use_distributed_optimizer", "True"),
])
def test_a_dropped_mapped_key_is_reported_as_dropped_not_as_unsupported(override, key, recipe_value):
    note = _bridge_note(recommend("llama3-8b", 8, "h100", overrides=[override]))
    assert f"{key}: the config leaves it out where the recipe has {recipe_value}" in note
    assert f"--{key} {recipe_value}" in note
    assert f"cannot take {key}" not in note and f", {key}," not in note


def test_a_dropped_dataset_preset_withholds_the_command_rather_than_running_the_recipes():
    rec = recommend("llama3-8b", 8, "h100", overrides=["--dataset={seq_length: 4096}"])
    assert ("dataset.preset", "mock") in [(c.key, c.old) for c in rec.changes]
    assert "megatron_bridge" not in rec.commands
    assert not any("--dataset mock" in command for command in rec.commands.values())
    assert "dataset.preset: the config leaves it out where the recipe has mock" in _bridge_note(rec)
    nulled = recommend("llama3-8b", 8, "h100", overrides=["--dataset.preset=null"])
    assert "megatron_bridge" not in nulled.commands
    assert "dataset.preset: the config sets no preset" in _bridge_note(nulled)
    kept = recommend("llama3-8b", 8, "h100", overrides=["--dataset={preset: mock, seq_length: 4096}"])
    assert "--dataset mock" in kept.commands["megatron_bridge"]


def test_the_note_lists_unsupported_keys_once_and_each_reasoned_gap_with_its_reason():
    gaps = bridge_gaps(LIBRARY, _with(LIBRARY, dataset={"tokenizer": "x"}, lr_scheduler={"decay_steps": 9}), [])
    note = gaps_note("llama3_8b_pretrain_2gpu_h100_bf16_config", gaps)
    assert note.startswith("no Megatron Bridge command")
    assert "cannot take dataset.tokenizer as key=value overrides" in note
    assert "lr_scheduler.decay_steps: it counts the steps after the warmup" in note
