"""When the Megatron Bridge command is withheld rather than run with other values, and the note that says why."""

from __future__ import annotations

import pytest

from service.configs.changes import diff
from service.recommend.bridge_command import (
    VALIDATION_SEQ,
    bridge_command,
    bridge_gaps,
    bridge_overrides,
    gaps_note,
    uncarried,
    uncarried_note,
)
from service.recommend.recommendation import recommend
from tests.service.recommend.bridge_configs import LIBRARY, with_sections


def _bridge_note(rec) -> str:
    return next(n for n in rec.notes if n.startswith("no Megatron Bridge command"))


@pytest.mark.parametrize("model, pp, vp, expressible", [
    ("deepseek-v3", 8, 2, True), ("deepseek-v3", 32, 1, False), ("kimi-k2", 2, 8, True),
    ("olmoe-7b", 2, 4, False), ("llama3-70b", 32, 1, True),
])
def test_a_pipeline_the_recipes_layout_table_lacks_withholds_the_command(model, pp, vp, expressible):
    base = {"metadata": {"model": model}, "distributed": {"pp_size": 4, "vp_size": 4}}
    config = {"metadata": {"model": model}, "distributed": {"pp_size": pp, "vp_size": vp}}
    gaps = bridge_gaps(base, config, [])
    assert (not any("pipeline_model_parallel_layout" in g for g in gaps)) == expressible, gaps


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


def test_a_recipe_with_an_explicit_layout_and_no_table_withholds_a_new_pipeline():
    base = {"metadata": {"model": "qwen3-next-80b-a3b"},
            "distributed": {"pp_size": 4, "vp_size": 2, "pipeline_layout": "explicit"}}
    config = {"metadata": {"model": "qwen3-next-80b-a3b"}, "distributed": {"pp_size": 8, "vp_size": 1}}
    assert any("pipeline_model_parallel_layout" in g for g in bridge_gaps(base, config, []))
    glm = {"metadata": {"model": "glm-45v"}, "distributed": {"pp_size": 4, "vp_size": 6}}
    assert any("pipeline_model_parallel_layout" in g for g in bridge_gaps({"metadata": {"model": "glm-45v"}}, glm, []))


def test_decay_steps_without_a_stated_warmup_withhold_the_command_instead_of_zeroing_bridges_warmup():
    rec = recommend("llama3-8b", 8, "h100", overrides=["--lr_scheduler.decay_steps=1000"])
    assert "megatron_bridge" not in rec.commands
    assert not any("lr_warmup_iters" in command for command in rec.commands.values())
    note = _bridge_note(rec)
    assert "lr_scheduler.decay_steps: it counts the steps after the warmup" in note
    assert "--lr_scheduler.warmup_steps" in note
    config = with_sections(LIBRARY, lr_scheduler={"decay_steps": 1000})
    assert not any("scheduler." in o for o in bridge_overrides(LIBRARY, config))
    assert "lr_scheduler.decay_steps" in bridge_gaps(LIBRARY, config, [])


def test_grad_reduce_dtype_on_a_library_recipe_says_why_bridge_cannot_take_it():
    # Library recipes keep mixed_precision: "bf16_mixed", whose grad_reduce_in_fp32=True setup() copies
    # over ddp's, and an override of a field of that string fails in Hydra.
    rec = recommend("llama3-8b", 8, "h100", grad_reduce_dtype="bf16")
    assert "megatron_bridge" not in rec.commands
    note = _bridge_note(rec)
    assert "distributed.grad_reduce_dtype: Bridge's library recipes name a mixed-precision preset" in note
    assert "cannot take distributed.grad_reduce_dtype" not in note


def test_a_fractional_lora_alpha_is_a_gap_with_a_reason_not_a_bridge_value():
    rec = recommend("llama3-8b", 8, "h100", goal="peft", overrides=["--peft.alpha=16.5"])
    assert "megatron_bridge" not in rec.commands
    note = _bridge_note(rec)
    assert "peft.alpha: Bridge's LoRA alpha is an int" in note and "--peft.alpha 16" in note
    assert "peft.alpha=16.5" not in note


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
    gaps = bridge_gaps(LIBRARY, with_sections(LIBRARY, dataset={"tokenizer": "x"}, lr_scheduler={"decay_steps": 9}), [])
    note = gaps_note("llama3_8b_pretrain_2gpu_h100_bf16_config", gaps)
    assert note.startswith("no Megatron Bridge command")
    assert "cannot take dataset.tokenizer as key=value overrides" in note
    assert "lr_scheduler.decay_steps: it counts the steps after the warmup" in note


@pytest.mark.parametrize("model, length", [("llama3-8b", 2048), ("qwen3-8b", 1024)])
def test_a_validation_length_other_than_the_training_one_withholds_the_bridge_command(model, length):
    rec = recommend(model, 8, "h100", overrides=[f"--validation_dataset.seq_length={length}"])
    assert "megatron_bridge" not in rec.commands
    assert not any("run_recipe.py" in command for command in rec.commands.values())
    note = next(n for n in rec.notes if n.startswith("no Megatron Bridge command"))
    training = rec.config["dataset"]["seq_length"]
    assert f"{VALIDATION_SEQ}: Bridge has one dataset config for training and evaluation" in note
    assert f"at the training length {training}, not {length}" in note and f"set it to {training}" in note


def test_a_validation_length_equal_to_the_training_one_is_carried_by_the_dataset_length():
    same = with_sections(LIBRARY, validation_dataset={"seq_length": 8192})
    assert bridge_gaps(LIBRARY, same, []) == []
    moved = with_sections(LIBRARY, dataset={"seq_length": 4096}, validation_dataset={"seq_length": 4096})
    overrides, gaps = bridge_command(LIBRARY, moved, [])
    assert gaps == [] and "dataset.seq_length=4096" in overrides
    other = with_sections(LIBRARY, dataset={"seq_length": 4096}, validation_dataset={"seq_length": 8192})
    assert VALIDATION_SEQ in bridge_gaps(LIBRARY, other, [])  # equal to the recipe's length is not enough
    rec = recommend("llama3-8b", 8, "h100", overrides=["--validation_dataset.seq_length=8192"])
    assert "megatron_bridge" in rec.commands


def test_the_note_stays_one_comment_line_whatever_the_values_hold():
    config = with_sections(LIBRARY, checkpoint={"checkpoint_dir": "/x\nrm -rf /\r"}, dataloader={"num_workers": 2})
    assert [c.key for c in uncarried(LIBRARY, config)] == ["checkpoint.checkpoint_dir", "dataloader.num_workers"]
    note = uncarried_note(LIBRARY, config)
    assert "\n" not in note and "\r" not in note and "'/x\\nrm -rf /\\r'" in note
    assert uncarried_note(LIBRARY, LIBRARY) == ""
    # Mapped, carried and launch keys are not listed.
    layout = with_sections(LIBRARY, distributed={"tp_size": 2}, hardware={"gpus_per_node": 8},
                   validation_dataset={"seq_length": 8192}, metadata={"name": "x"})
    assert uncarried(LIBRARY, layout) == [] and {c.key for c in diff(LIBRARY, layout)} >= {"distributed.tp_size"}


@pytest.mark.parametrize("model, gpus, gpu_type, goal", [
    ("moonlight-16b", 8, "h100", "sft"),     # PP 1 on the recipe's own hardware
    ("moonlight-16b", 64, "l40s", "pretrain"),  # PP 4, a pair of its table, over 27 layers
    ("glm-45v", 256, "h100", "sft"),         # PP 1, which GLM-4.5V's table does not list
])
def test_a_pipeline_the_recipes_builder_places_gets_its_bridge_command(model, gpus, gpu_type, goal):
    """A changed pipeline_layout marker withheld the command even where the library
    recipe's layout builder places the pipeline itself."""
    from service.recommend.recommendation import recommend

    rec = recommend(model, gpus, gpu_type, goal=goal)
    assert "megatron_bridge" in rec.commands, rec.notes
    assert "pipeline_layout" not in rec.commands["megatron_bridge"]
    assert not any("layout string for PP 1" in note for note in rec.notes)
