"""What the trainer writes, read by others: transformers loads the consolidated checkpoint, PEFT
loads the LoRA adapter; bad configs stop before any work and leave checkpoints untouched; the
`recipe-advisor train` command runs a bundled recipe end to end."""

from __future__ import annotations

import json
import os
import shutil
import sys

import pytest
import torch

from tests import launch_server
from tests.paths import REPO
from tests.trainer.harness import _env, assert_clean_exit, records, run_trainer, tree_digest, write_config

os.environ.setdefault("HF_HUB_OFFLINE", "1")
LORA = {"method": "lora", "rank": 4, "alpha": 8.0, "target_modules": ["q_proj", "v_proj"], "merge_on_save": True}


@pytest.fixture(scope="module")
def single_run(tmp_path_factory):
    """Two steps, one process: a small finished run with one complete checkpoint."""
    folder = tmp_path_factory.mktemp("single")
    result = run_trainer(write_config(folder, {"step_scheduler": {"max_steps": 2, "checkpoint_interval": 2}}),
                         nproc=0)
    assert_clean_exit(result)
    return folder / "ckpt"


def _batch(vocab: int = 512) -> torch.Tensor:
    return torch.randint(vocab, (2, 24), generator=torch.Generator().manual_seed(0))


def _trainer_logits(model, ids):
    with torch.no_grad():
        return model(ids)


def test_consolidated_checkpoint_loads_in_transformers_with_the_trainers_logits(single_run):
    from transformers import AutoModelForCausalLM

    from trainer.models import build_causal_lm

    consolidated = single_run / "epoch_0_step_2" / "model" / "consolidated"
    hf = AutoModelForCausalLM.from_pretrained(consolidated).eval()
    ours = build_causal_lm(str(consolidated), load_weights=True).eval()
    ids = _batch()
    with torch.no_grad():
        hf_logits = hf(ids).logits
    torch.testing.assert_close(_trainer_logits(ours, ids), hf_logits, atol=1e-5, rtol=1e-5)
    # Trained weights, not the initial ones.
    fresh = build_causal_lm("tiny-llama", seed=1234)
    assert not torch.allclose(_trainer_logits(fresh, ids), hf_logits, atol=1e-3)


def test_lora_adapter_loads_in_peft_and_matches_merged_and_trainer(tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from trainer.components.hf_io import save_hf_model
    from trainer.components.peft import load_adapter
    from trainer.models import build_causal_lm

    config = write_config(tmp_path, {"peft": LORA, "step_scheduler": {"max_steps": 4}})
    assert_clean_exit(run_trainer(config))
    adapter = tmp_path / "ckpt" / "epoch_0_step_4" / "model"
    cfg = json.loads((adapter / "adapter_config.json").read_text())
    assert (cfg["peft_type"], cfg["r"], cfg["lora_alpha"]) == ("LORA", 4, 8.0)
    assert sorted(cfg["target_modules"]) == ["q_proj", "v_proj"]

    base = build_causal_lm("tiny-llama", seed=1234)  # the run's frozen base: seeded init
    save_hf_model(base.state_dict(), base.config, tmp_path / "base")
    ids = _batch()
    hf_base = AutoModelForCausalLM.from_pretrained(tmp_path / "base").eval()
    with torch.no_grad():
        base_logits = hf_base(ids).logits
        peft_logits = PeftModel.from_pretrained(hf_base, adapter).eval()(ids).logits
        merged_logits = AutoModelForCausalLM.from_pretrained(adapter / "consolidated").eval()(ids).logits
    assert not torch.allclose(peft_logits, base_logits, atol=1e-4), "the adapter was trained"
    torch.testing.assert_close(merged_logits, peft_logits, atol=1e-5, rtol=1e-5)
    ours = load_adapter(build_causal_lm("tiny-llama", seed=1234), adapter).eval()
    torch.testing.assert_close(_trainer_logits(ours, ids), peft_logits, atol=1e-5, rtol=1e-5)


def _model_with_one_kv_head(folder):
    cfg = json.loads((REPO / "recipe_index" / "models" / "tiny-llama.json").read_text())
    cfg = {k: v for k, v in cfg.items() if not k.startswith("advisor_")}
    cfg["num_key_value_heads"] = 1
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(cfg))
    return str(folder)


@pytest.mark.parametrize("case", ["missing_dataset", "batch_not_dividing", "restore_missing",
                                  "tp_not_dividing_kv_heads", "restore_incompatible"])
def test_bad_config_stops_before_any_work_and_leaves_checkpoints_alone(tmp_path, single_run, case):
    ckpt = tmp_path / "ckpt"
    shutil.copytree(single_run, ckpt)
    before = tree_digest(ckpt)
    config = write_config(tmp_path)
    nproc, overrides, needle = 0, [], ""
    if case == "missing_dataset":
        overrides = ["--dataset._target_", "trainer.data.JsonlSFTDataset", "--dataset.path", "absent.jsonl"]
        needle = "error: dataset.path: file 'absent.jsonl' not found"
    elif case == "batch_not_dividing":
        overrides, needle = ["--step_scheduler.local_batch_size", "3"], "error: step_scheduler.local_batch_size"
    elif case == "restore_missing":
        overrides, needle = ["--restore_from.path", "epoch_3_step_300"], "error: restore_from.path: 'epoch_3_step_300'"
    elif case == "tp_not_dividing_kv_heads":
        nproc = 2
        overrides = ["--distributed.tp_size", "2",
                     "--model.pretrained_model_name_or_path", _model_with_one_kv_head(tmp_path / "m")]
        needle = "error: distributed.tp_size: 2 does not divide the model's num_key_value_heads (1)"
    else:
        overrides = ["--restore_from.path", "epoch_0_step_2",
                     "--model.pretrained_model_name_or_path", _model_with_one_kv_head(tmp_path / "m")]
        needle = "num_key_value_heads: checkpoint 2, this run 1"
    result = run_trainer(config, *overrides, nproc=nproc)
    assert result.returncode != 0
    assert needle in result.stderr, result.stderr[-3000:]
    # torchrun prints its own traceback for a failed child; none may come from the trainer's code.
    assert str(REPO / "trainer") not in result.stderr, result.stderr[-3000:]
    if nproc == 0:
        assert "Traceback" not in result.stderr
    assert tree_digest(ckpt) == before


def test_incompatible_auto_detected_checkpoint_is_refused_not_overwritten(tmp_path, single_run):
    # Starting fresh in the folder overwrote the old run's checkpoint at the same step.
    shutil.copytree(single_run, tmp_path / "ckpt")
    before = tree_digest(tmp_path / "ckpt")
    config = write_config(tmp_path, {"step_scheduler": {"max_steps": 2}})
    result = run_trainer(config, "--model.pretrained_model_name_or_path", _model_with_one_kv_head(tmp_path / "m"),
                         nproc=0)
    assert result.returncode == 2, result.stderr[-3000:]
    assert "holds checkpoint epoch_0_step_2 of another model" in result.stderr
    assert "num_key_value_heads" in result.stderr and "new checkpoint.checkpoint_dir" in result.stderr
    assert "Traceback" not in result.stderr
    assert tree_digest(tmp_path / "ckpt") == before, "the old run's checkpoint stays as it was"


def test_recipe_advisor_train_runs_the_bundled_pretrain_recipe(tmp_path):
    recipe = REPO / "recipe_index" / "recipes" / "bundled" / "tiny_llama_pretrain.yaml"
    ckpt = tmp_path / "out"
    cmd = [sys.executable, "-m", "service.cli.app", "train", str(recipe), "--nproc-per-node", "2",
           "--step_scheduler.max_steps", "12", "--step_scheduler.val_check_interval=6",
           "--step_scheduler.checkpoint_interval", "6", "--checkpoint.checkpoint_dir", str(ckpt)]
    result = launch_server.subprocess_run(cmd, cwd=tmp_path, env=_env(), capture_output=True, text=True,
                                          timeout=180)
    assert_clean_exit(result)
    train = records(ckpt / "training.jsonl")
    assert len(train) == 12 and train[-1]["loss"] < train[0]["loss"] - 0.5
    assert [r["step"] for r in records(ckpt / "validation.jsonl")] == [6, 12]
    assert (ckpt / "LATEST").read_text().strip() == "epoch_0_step_12"
    assert (ckpt / "epoch_0_step_12" / "model" / "consolidated" / "config.json").is_file()
