"""DeepSeek-V3 end to end on 2 CPU processes: recommend plans expert parallel for tiny-deepseek-v3, validate
passes, the trainer trains it balanced as DeepSeek-V3 trains (sequence-wise loss, aux-loss-free bias update) and
logs each MoE layer's load; a SIGKILL + restart continues the selection bias exactly; the consolidated checkpoint
holds the trained bias as `e_score_correction_bias`, which transformers loads, with equal logits."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml
from safetensors import safe_open

from tests.e2e.test_moe_recommend_train import assert_transformers_logits, recommend_on_two_cpus
from tests.e2e.test_recommend_validate_train import cli
from tests.trainer.harness import assert_clean_exit, losses, records, run_trainer

pytestmark = pytest.mark.slow
TRAIN_OVERRIDES = ("--step_scheduler.max_steps", "8", "--step_scheduler.checkpoint_interval", "4",
                   "--step_scheduler.val_check_interval", "8", "--step_scheduler.global_batch_size", "8",
                   "--step_scheduler.local_batch_size", "4", "--dataset.seq_length", "32",
                   "--lr_scheduler.decay_steps", "8")


@pytest.fixture(scope="module")
def recommended(tmp_path_factory) -> Path:
    return recommend_on_two_cpus("tiny-deepseek-v3", tmp_path_factory.mktemp("deepseek"))


@pytest.fixture(scope="module")
def straight_run(recommended: Path) -> Path:
    ckpt = recommended.parent / "straight"
    train = cli("train", str(recommended), "--nproc-per-node", "2", *TRAIN_OVERRIDES,
                "--checkpoint.checkpoint_dir", str(ckpt), cwd=recommended.parent, timeout=600)
    assert train.returncode == 0, train.stdout[-3000:] + train.stderr[-3000:]
    return ckpt


def selection_biases(step_folder: Path) -> dict[str, torch.Tensor]:
    with safe_open(str(step_folder / "model" / "consolidated" / "model.safetensors"), "pt") as f:
        return {name: f.get_tensor(name) for name in f.keys() if name.endswith("e_score_correction_bias")}


def test_recommend_plans_expert_parallel_and_validates(recommended: Path) -> None:
    config = yaml.safe_load(recommended.read_text())
    assert config["distributed"]["ep_size"] == 2
    val = cli("validate", str(recommended), "--format", "json", cwd=recommended.parent)
    assert json.loads(val.stdout)["summary"]["errors"] == 0, val.stdout


def test_trains_with_falling_loss_and_per_layer_expert_load(straight_run: Path) -> None:
    rows = records(straight_run / "training.jsonl")
    assert [r["step"] for r in rows] == list(range(1, 9))
    assert rows[-1]["loss"] < rows[0]["loss"] - 0.1
    for row in rows:
        assert [layer["layer"] for layer in row["expert_load"]] == [1, 2]  # layer 0 is dense
        # 8 samples x 32 tokens x top-2 over 8 experts: 64 (token, slot) pairs per expert on average.
        for layer in row["expert_load"]:
            assert layer["min"] <= 64 <= layer["max"] and layer["cv"] >= 0
        assert row["expert_load_cv"] == max(layer["cv"] for layer in row["expert_load"])
        assert row["moe_aux_loss"] > 0  # the sequence-wise loss of the two MoE layers


def test_sigkill_then_restart_continues_the_selection_bias_exactly(recommended: Path, straight_run: Path) -> None:
    ckpt = recommended.parent / "killed"
    args = (*TRAIN_OVERRIDES, "--checkpoint.checkpoint_dir", str(ckpt))
    killed = run_trainer(recommended, *args, env={"TRAINER_FAULT_INJECT": "after_step:6:1"}, timeout=300)
    assert killed.returncode != 0
    assert (ckpt / "LATEST").read_text().strip() == "epoch_0_step_4"
    restarted = run_trainer(recommended, *args, timeout=300)
    assert_clean_exit(restarted)
    assert losses(ckpt) == losses(straight_run)
    resumed, straight = selection_biases(ckpt / "epoch_0_step_8"), selection_biases(straight_run / "epoch_0_step_8")
    assert sorted(straight) == ["model.layers.1.mlp.gate.e_score_correction_bias",
                                "model.layers.2.mlp.gate.e_score_correction_bias"]
    for name, bias in straight.items():
        assert torch.equal(resumed[name], bias)
    at_step_4 = selection_biases(straight_run / "epoch_0_step_4")
    assert any(not torch.equal(at_step_4[name], bias) for name, bias in straight.items())  # it kept moving


def test_consolidated_bias_loads_in_transformers_with_equal_logits(straight_run: Path) -> None:
    import transformers

    folder = straight_run / "epoch_0_step_8" / "model" / "consolidated"
    biases = selection_biases(straight_run / "epoch_0_step_8")
    assert all(bias.abs().max() > 0 for bias in biases.values())  # trained, not the zero init
    hf = transformers.AutoModelForCausalLM.from_pretrained(folder)
    for name, bias in biases.items():
        assert torch.equal(hf.get_buffer(name), bias)
    assert_transformers_logits(folder, "DeepseekV3ForCausalLM")
