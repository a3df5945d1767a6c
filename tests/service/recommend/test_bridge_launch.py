"""The Megatron Bridge launch: its header, the checkpoint and execution keys it cannot pass named, the base
checkpoint fine-tunes need, the job name and the multi-node rendezvous."""

from __future__ import annotations

import re
import subprocess

import pytest

from service.recommend.bridge_command import (
    BRIDGE_KEYS,
    CARRIED_BY,
)
from service.recommend.launch_commands import job_name
from service.recommend.recommendation import recommend

OLD_HEADER = "Every key the advised config sets differently from the recipe is one of the overrides below"


CHECKPOINTING = ["--checkpoint.checkpoint_dir=/lustre/run1", "--checkpoint.enabled=false",
                 "--step_scheduler.checkpoint_interval=500", "--step_scheduler.val_check_interval=250"]


def _not_carried_line(command: str) -> str:
    return next(line for line in command.splitlines() if line.startswith("# Not carried: "))


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


def test_the_multi_node_bridge_command_guards_its_rendezvous_like_torchrun():
    command = recommend("llama3-70b", 8, "h100", nodes=4).commands["megatron_bridge"]
    assert "export MASTER_ADDR=${MASTER_ADDR:?set MASTER_ADDR" in command
    assert "--nnodes=4" in command and "--rdzv-id=llama3_70b_pretrain_32gpu_h100_bf16" in command
    assert subprocess.run(["bash", "-n"], input=command, text=True).returncode == 0


def test_fine_tuning_commands_need_the_base_checkpoint_sft_too():
    assert "PRETRAINED_CHECKPOINT" in recommend("llama3-8b", 8, "h100", goal="sft").commands["megatron_bridge"]
    assert "PRETRAINED_CHECKPOINT" not in recommend("llama3-8b", 8, "h100").commands["megatron_bridge"]


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
