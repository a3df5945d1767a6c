"""An MoE end to end on 2 CPU processes: recommend plans expert parallel for tiny-moe, validate passes,
the trainer trains it (loss falls, aux loss and expert load logged), the consolidated checkpoint loads in
transformers with our logits, a SIGKILL + restart ends with the straight run's losses, and a resume on
another EP size (the optimizer state resharded) follows the same curve."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
import transformers
import yaml

from tests.e2e.test_recommend_validate_train import cli
from tests.trainer.harness import assert_clean_exit, losses, records, run_trainer

TRAIN_OVERRIDES = ("--step_scheduler.max_steps", "8", "--step_scheduler.checkpoint_interval", "4",
                   "--step_scheduler.val_check_interval", "8", "--step_scheduler.global_batch_size", "8",
                   "--step_scheduler.local_batch_size", "4", "--dataset.seq_length", "32",
                   "--lr_scheduler.decay_steps", "8")  # a run stopped at step 4 keeps the 8-step schedule


def recommend_on_two_cpus(model: str, folder: Path) -> Path:
    """The bundled engine's pretraining recipe for `model` on 2 CPU processes, written to folder/c.yaml."""
    rec = cli("recommend", "--model", model, "--gpus", "2", "--gpu-type", "cpu", "--goal", "pretrain",
              "--engine", "bundled", "-o", "c.yaml", cwd=folder)
    assert rec.returncode == 0, rec.stderr
    return folder / "c.yaml"


@pytest.fixture(scope="module")
def recommended(tmp_path_factory) -> Path:
    return recommend_on_two_cpus("tiny-moe", tmp_path_factory.mktemp("moe"))


@pytest.fixture(scope="module")
def straight_run(recommended: Path) -> Path:
    ckpt = recommended.parent / "straight"
    train = cli("train", str(recommended), "--nproc-per-node", "2", *TRAIN_OVERRIDES,
                "--checkpoint.checkpoint_dir", str(ckpt), cwd=recommended.parent, timeout=600)
    assert train.returncode == 0, train.stdout[-3000:] + train.stderr[-3000:]
    (recommended.parent / "straight.log").write_text(train.stderr)
    return ckpt


# What torch prints on its own: a Python warning, or a warning line of its logging ("[rank0]:W1207 ...").
TORCH_WARNING = re.compile(r"\b\w*Warning: |^\[rank\d+\]:W\d{4} ", re.MULTILINE)


def torch_warnings(log: str) -> list[str]:
    return [line for line in log.splitlines() if TORCH_WARNING.search(line)]


def test_recommend_plans_expert_parallel_and_validates(recommended: Path) -> None:
    config = yaml.safe_load(recommended.read_text())
    assert config["distributed"]["ep_size"] == 2
    assert config["model"]["pretrained_model_name_or_path"] == "tiny-moe"
    val = cli("validate", str(recommended), "--format", "json", cwd=recommended.parent)
    assert val.returncode == 0, val.stdout
    assert json.loads(val.stdout)["summary"]["errors"] == 0


def test_trains_with_falling_loss_and_router_metrics(straight_run: Path) -> None:
    rows = records(straight_run / "training.jsonl")
    assert [r["step"] for r in rows] == list(range(1, 9))
    assert rows[-1]["loss"] < rows[0]["loss"] - 0.1
    for row in rows:
        assert row["moe_aux_loss"] >= 1.0 - 1e-4  # transformers' E * sum F_e P_e: top_k (2) when balanced
        # 8 samples x 32 tokens x top-2 over 8 experts: 64 (token, slot) pairs per expert on average.
        assert 0 <= row["expert_load_min"] <= 64 <= row["expert_load_max"] <= 512


def test_the_log_holds_the_products_lines_and_no_torch_warnings(straight_run: Path) -> None:
    """No deprecation notice of the mesh slicing, no notice of the save's sequential all-gathers, per process."""
    log = (straight_run.parent / "straight.log").read_text()
    assert "saved checkpoint" in log and "validation loss" in log  # the run's own lines are there
    assert torch_warnings(log) == []


def assert_transformers_logits(folder: Path, class_name: str) -> None:
    """transformers loads the consolidated checkpoint in `folder` as `class_name`, with the trainer's logits."""
    from trainer.models import build_causal_lm

    hf = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    assert type(hf).__name__ == class_name
    ours = build_causal_lm(str(folder), load_weights=True).eval()
    ids = torch.randint(0, 512, (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(ours(ids), hf(ids).logits, atol=1e-5, rtol=1e-5)


def test_consolidated_checkpoint_loads_in_transformers_with_equal_logits(straight_run: Path) -> None:
    assert_transformers_logits(straight_run / "epoch_0_step_8" / "model" / "consolidated", "Qwen3MoeForCausalLM")


def test_sigkill_then_restart_ends_with_the_straight_losses(recommended: Path, straight_run: Path) -> None:
    ckpt = recommended.parent / "killed"
    args = (*TRAIN_OVERRIDES, "--checkpoint.checkpoint_dir", str(ckpt))
    killed = run_trainer(recommended, *args, env={"TRAINER_FAULT_INJECT": "after_step:6:1"}, timeout=300)
    assert killed.returncode != 0
    assert (ckpt / "LATEST").read_text().strip() == "epoch_0_step_4"
    restarted = run_trainer(recommended, *args, timeout=300)
    assert_clean_exit(restarted)
    assert "resumed from" in restarted.stderr and torch_warnings(restarted.stderr) == []
    assert losses(ckpt) == losses(straight_run)


def test_resume_on_another_ep_size_follows_the_same_curve(recommended: Path, straight_run: Path) -> None:
    ckpt = recommended.parent / "reshard"
    args = (*TRAIN_OVERRIDES, "--checkpoint.checkpoint_dir", str(ckpt))
    assert_clean_exit(run_trainer(recommended, *args, "--step_scheduler.max_steps", "4", timeout=300))
    resumed = run_trainer(recommended, *args, "--distributed.ep_size", "1", timeout=300)
    assert_clean_exit(resumed)
    assert "resumed from" in resumed.stderr and "ep_size" in resumed.stderr
    for got, want in zip(losses(ckpt), losses(straight_run)):
        assert got == pytest.approx(want, abs=1e-5)
