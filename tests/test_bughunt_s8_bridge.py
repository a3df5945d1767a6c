"""Bug hunt s8 (#5, #6, #9e): the Bridge command says what it carries and withholds what it cannot.

#5: Bridge has one dataset config for training and evaluation, so a validation sequence length other
than the training one is a gap. #6: the header says what is carried (convergence and layout changes),
and a "Not carried" line names the execution changes run_recipe.py gets no override for. #9e: the job
name in #SBATCH lines and the rendezvous id is reduced to [A-Za-z0-9_.-], since Slurm does not
shell-parse #SBATCH lines.
"""

from __future__ import annotations

import re
import subprocess

import pytest

from service.bridge_command import (BRIDGE_KEYS, CARRIED_BY, VALIDATION_SEQ, bridge_command, bridge_gaps,
                                    uncarried, uncarried_note)
from service.changes import diff
from service.launch_commands import job_name
from service.recommend import recommend
from tests.test_bughunt_s7_bridge import LIBRARY, _with

OLD_HEADER = "Every key the advised config sets differently from the recipe is one of the overrides below"
CHECKPOINTING = ["--checkpoint.checkpoint_dir=/lustre/run1", "--checkpoint.enabled=false",
                 "--step_scheduler.checkpoint_interval=500", "--step_scheduler.val_check_interval=250"]


def _not_carried_line(command: str) -> str:
    return next(line for line in command.splitlines() if line.startswith("# Not carried: "))


# ---- #5: a validation length other than the training one is a gap -------------------------------

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
    same = _with(LIBRARY, validation_dataset={"seq_length": 8192})
    assert bridge_gaps(LIBRARY, same, []) == []
    moved = _with(LIBRARY, dataset={"seq_length": 4096}, validation_dataset={"seq_length": 4096})
    overrides, gaps = bridge_command(LIBRARY, moved, [])
    assert gaps == [] and "dataset.seq_length=4096" in overrides
    other = _with(LIBRARY, dataset={"seq_length": 4096}, validation_dataset={"seq_length": 8192})
    assert VALIDATION_SEQ in bridge_gaps(LIBRARY, other, [])  # equal to the recipe's length is not enough
    rec = recommend("llama3-8b", 8, "h100", overrides=["--validation_dataset.seq_length=8192"])
    assert "megatron_bridge" in rec.commands


# ---- #6: the header says what is carried, and the rest is listed --------------------------------

def test_the_header_says_what_is_carried_and_no_longer_claims_every_key():
    command = recommend("llama3-8b", 8, "h100").commands["megatron_bridge"]
    assert OLD_HEADER not in command
    assert "# Carried: every convergence and layout change the advised config makes to the recipe" in command
    assert "Execution settings (checkpoint folder and intervals, logging, data loading" in command
    assert "# Not carried: " not in command  # the advised config changes no execution setting here


@pytest.mark.parametrize("goal", ["pretrain", "sft"])
def test_checkpoint_settings_the_command_drops_are_named_with_their_values(goal):
    rec = recommend("llama3-8b", 8, "h100", goal=goal, overrides=CHECKPOINTING)
    bridge = rec.commands["megatron_bridge"]
    line = _not_carried_line(bridge)
    for shown in ("checkpoint.checkpoint_dir ('/lustre/run1')", "checkpoint.enabled (False)",
                  "step_scheduler.checkpoint_interval (500)", "step_scheduler.val_check_interval (250)"):
        assert shown in line
    # torchrun and sbatch run the same Bridge program, so they say it too; all still parse.
    for name in ("torchrun", "sbatch"):
        assert _not_carried_line(rec.commands[name]) == line
    for command in (bridge, rec.commands["torchrun"]):
        assert subprocess.run(["bash", "-n"], input=command, text=True).returncode == 0


@pytest.mark.parametrize("override, shown", [
    ("--step_scheduler.log_interval=10", "step_scheduler.log_interval (10)"),
    ("--dataloader.num_workers=4", "dataloader.num_workers (4)"),
    ("--compile.enabled=true", "compile.enabled (True)"),
    ("--optimizer.foreach=false", "optimizer.foreach (False)"),
    ("--model.kernels=auto", "model.kernels ('auto')"),
    ("--checkpoint.keep_last=3", "checkpoint.keep_last (3)"),
    ("--checkpoint.save_consolidated=false", "checkpoint.save_consolidated (False)"),
])
def test_every_execution_key_run_recipe_is_not_given_is_named(override, shown):
    rec = recommend("llama3-8b", 8, "h100", overrides=[override])
    assert shown in _not_carried_line(rec.commands["megatron_bridge"])


def test_every_change_is_an_override_carried_by_the_launch_or_named_as_not_carried():
    rec = recommend("llama3-8b", 16, "h100", overrides=CHECKPOINTING + ["--step_scheduler.log_interval=10"])
    assert "megatron_bridge" in rec.commands and "torchrun_multinode" in rec.commands
    line = _not_carried_line(rec.commands["megatron_bridge"])
    for change in rec.changes:
        accounted = (change.key in BRIDGE_KEYS or change.key in CARRIED_BY
                     or change.key.startswith(("hardware.", "metadata.")) or f"{change.key} (" in line)
        assert accounted, change
    assert _not_carried_line(rec.commands["torchrun_multinode"]) == line


def test_the_bundled_trainer_reads_the_whole_config_so_its_launchers_have_no_such_line():
    rec = recommend("tiny-llama", 2, "cpu", engine="bundled", overrides=["--checkpoint.checkpoint_dir=/tmp/run1"])
    for name in ("torchrun", "sbatch"):
        assert "Not carried" not in rec.commands[name]


def test_the_note_stays_one_comment_line_whatever_the_values_hold():
    config = _with(LIBRARY, checkpoint={"checkpoint_dir": "/x\nrm -rf /\r"}, dataloader={"num_workers": 2})
    assert [c.key for c in uncarried(LIBRARY, config)] == ["checkpoint.checkpoint_dir", "dataloader.num_workers"]
    note = uncarried_note(LIBRARY, config)
    assert "\n" not in note and "\r" not in note and "'/x\\nrm -rf /\\r'" in note
    assert uncarried_note(LIBRARY, LIBRARY) == ""
    # Mapped, carried and launch keys are not listed.
    layout = _with(LIBRARY, distributed={"tp_size": 2}, hardware={"gpus_per_node": 8},
                   validation_dataset={"seq_length": 8192}, metadata={"name": "x"})
    assert uncarried(LIBRARY, layout) == [] and {c.key for c in diff(LIBRARY, layout)} >= {"distributed.tp_size"}


# ---- #9e: job names Slurm reads without a shell ------------------------------------------------

def test_odd_characters_in_the_job_name_are_replaced_not_shell_quoted():
    name = "a b$(id)'x"
    rec = recommend("llama3-70b", 8, "h100", nodes=4, overrides=[f"--metadata.name={name}"])
    assert rec.config["metadata"]["name"] == name  # the config keeps what the user wrote
    sbatch = rec.commands["sbatch"]
    assert "#SBATCH --job-name=a_b_id_x\n" in sbatch and "#SBATCH --output=a_b_id_x-%j.out\n" in sbatch
    for command in (rec.commands["torchrun_multinode"], rec.commands["megatron_bridge"]):
        assert "--rdzv-id=a_b_id_x " in command
    for line in sbatch.splitlines():
        if line.startswith(("#SBATCH --job-name=", "#SBATCH --output=")):
            assert re.fullmatch(r"#SBATCH --(job-name|output)=[A-Za-z0-9_.%-]+", line), line
    assert subprocess.run(["bash", "-n"], input=sbatch, text=True).returncode == 0


@pytest.mark.parametrize("name, expected", [
    ("llama3_70b_pretrain_32gpu_h100_bf16", "llama3_70b_pretrain_32gpu_h100_bf16"),
    ("run.v1-final", "run.v1-final"), ("é ü", "_"), ("", "recipe-advisor"), (None, "recipe-advisor"),
])
def test_job_name_keeps_safe_names_and_replaces_each_run_of_other_characters(name, expected):
    assert job_name({"metadata": {"name": name}}) == expected
