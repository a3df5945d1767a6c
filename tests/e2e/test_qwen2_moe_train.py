"""Qwen2-MoE end to end on 2 CPU processes: recommend plans expert parallel for tiny-qwen2-moe, validate
passes, the trainer trains it, and the consolidated checkpoint, shared expert included, loads in transformers'
Qwen2MoeForCausalLM with our logits."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from safetensors import safe_open

from tests.e2e.test_moe_recommend_train import assert_transformers_logits, recommend_on_two_cpus
from tests.e2e.test_recommend_validate_train import cli
from tests.trainer.harness import records

TRAIN_OVERRIDES = ("--step_scheduler.max_steps", "6", "--step_scheduler.checkpoint_interval", "6",
                   "--step_scheduler.val_check_interval", "6", "--step_scheduler.global_batch_size", "8",
                   "--step_scheduler.local_batch_size", "4", "--dataset.seq_length", "32")


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    folder = recommend_on_two_cpus("tiny-qwen2-moe", tmp_path_factory.mktemp("qwen2moe")).parent
    config = yaml.safe_load((folder / "c.yaml").read_text())
    assert config["distributed"]["ep_size"] == 2
    val = cli("validate", "c.yaml", "--format", "json", cwd=folder)
    assert json.loads(val.stdout)["summary"]["errors"] == 0, val.stdout
    train = cli("train", "c.yaml", "--nproc-per-node", "2", *TRAIN_OVERRIDES, "--checkpoint.checkpoint_dir", "ckpt",
                cwd=folder, timeout=600)
    assert train.returncode == 0, train.stdout[-3000:] + train.stderr[-3000:]
    return folder / "ckpt"


def test_trains_with_falling_loss_and_router_metrics(trained: Path) -> None:
    rows = records(trained / "training.jsonl")
    assert [r["step"] for r in rows] == list(range(1, 7))
    assert rows[-1]["loss"] < rows[0]["loss"] - 0.1
    assert all(r["moe_aux_loss"] >= 1.0 - 1e-4 for r in rows)


def test_checkpoint_with_shared_expert_loads_in_transformers_with_equal_logits(trained: Path) -> None:
    folder = trained / "epoch_0_step_6" / "model" / "consolidated"
    with safe_open(str(folder / "model.safetensors"), "pt") as f:
        names = set(f.keys())
    assert {"model.layers.0.mlp.shared_expert.up_proj.weight", "model.layers.0.mlp.shared_expert_gate.weight",
            "model.layers.1.mlp.experts.7.down_proj.weight"} <= names
    assert_transformers_logits(folder, "Qwen2MoeForCausalLM")
