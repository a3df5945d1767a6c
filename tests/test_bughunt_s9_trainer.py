"""Bug hunt s9, the trainer (notes/bughunt_s9_trainer.md):

- F1: iterating the data does not touch the global RNG LoRA's dropout draws from, so a validation pass
  (or a resume) leaves the training losses bit for bit as they were;
- F2: a LoRA adapter on lm_head trains (the chunked loss multiplied by the frozen base weight alone);
- F2b: an lm_head adapter on a tied model is refused when it would be merged;
- F3: FSDP2 + LoRA saves after a validation pass (the last block stayed gathered: KeyError);
- F4: validation says when it reads only part of its set.
"""

from __future__ import annotations

import pytest
import torch

from tests.trainer_harness import assert_clean_exit, losses, run_trainer, write_config
from trainer.config import PeftSection
from trainer.data import MockDataset, ResumableDataLoader
from trainer.loss import causal_lm_loss
from trainer.models import CausalLM, init_weights
from trainer.models.presets import tiny_config
from trainer.overrides import ConfigError
from trainer.peft import LoRALinear, apply_lora
from trainer.recipes.model_io import apply_peft

IDS = torch.randint(0, 256, (2, 9), generator=torch.Generator().manual_seed(7))
LABELS = torch.roll(IDS, -1, dims=1)


def test_iterating_the_data_leaves_the_global_rng_alone():
    loader = ResumableDataLoader(MockDataset(seq_length=8, vocab_size=64, num_samples=16), batch_size=2,
                                 dp_size=1, dp_rank=0, shuffle=True, seed=3)
    torch.manual_seed(0)
    before = torch.get_rng_state()
    next(iter(loader))
    loader.rewind()
    next(iter(loader))
    assert torch.equal(before, torch.get_rng_state())


def _model(family: str) -> CausalLM:
    model = CausalLM(tiny_config(family))
    init_weights(model, seed=5)
    return model


def test_a_lora_adapter_on_the_lm_head_trains_with_the_default_loss():
    model = apply_lora(_model("llama"), rank=4, alpha=8.0, target_modules=["lm_head", "q_proj"])
    head = model.lm_head
    assert isinstance(head, LoRALinear)
    with torch.no_grad():
        head.lora_B.weight.normal_()  # so that lora_A gets a gradient too
    loss_sum, count = causal_lm_loss(model, IDS, LABELS)  # chunked: auto
    (loss_sum / count).backward()
    assert head.lora_A.weight.grad is not None and head.lora_A.weight.grad.abs().sum() > 0
    assert head.lora_B.weight.grad.abs().sum() > 0
    with pytest.raises(ValueError, match="loss_fn.chunked: auto or false"):
        causal_lm_loss(model, IDS, LABELS, chunked=True)


def test_an_lm_head_adapter_of_a_tied_model_is_refused_when_it_would_be_merged():
    section = PeftSection(target_modules=["lm_head", "q_proj"], merge_on_save=True)
    with pytest.raises(ConfigError, match="tied embeddings cannot be merged"):
        apply_peft(_model("qwen3_tied"), section)
    apply_peft(_model("qwen3_tied"), section.model_copy(update={"merge_on_save": False}))
    apply_peft(_model("llama"), section)  # untied: merged into its own lm_head.weight


PEFT_WITH_VALIDATION = {
    "peft": {"method": "lora", "rank": 4, "alpha": 8.0, "dropout": 0.1, "target_modules": "all-linear"},
    "step_scheduler": {"max_steps": 4, "checkpoint_interval": 4, "global_batch_size": 4, "local_batch_size": 2},
    "hardware": {"gpu_type": "cpu", "gpus_per_node": 1},
    # 9 samples in local batches of 2: one is left out, and the trainer says so
    "validation_dataset": {"_target_": "trainer.data.MockDataset", "seq_length": 32, "num_samples": 9},
}


def test_fsdp2_lora_with_dropout_saves_after_validation_and_validation_leaves_training_alone(tmp_path):
    plain = write_config(tmp_path / "plain", PEFT_WITH_VALIDATION)
    validated = write_config(tmp_path / "val", {**PEFT_WITH_VALIDATION, "step_scheduler": {
        **PEFT_WITH_VALIDATION["step_scheduler"], "val_check_interval": 2}})
    first = run_trainer(plain, nproc=0)
    second = run_trainer(validated, nproc=0)
    assert_clean_exit(first)
    assert_clean_exit(second)  # KeyError at the save after the validation pass before the fix
    assert (tmp_path / "val" / "ckpt" / "LATEST").is_file()
    assert losses(tmp_path / "val" / "ckpt") == losses(tmp_path / "plain" / "ckpt")  # bit for bit
    assert "validation reads 8 of the 9 samples of validation_dataset" in second.stderr


def test_the_preflight_refuses_a_chunked_loss_that_would_leave_an_lm_head_adapter_untrained(tmp_path):
    from service.validate import validate_text
    from trainer.launch import load_config, preflight

    updates = {**PEFT_WITH_VALIDATION, "peft": {**PEFT_WITH_VALIDATION["peft"], "target_modules": ["lm_head", "q_proj"]},
               "loss_fn": {"_target_": "trainer.loss.causal_lm_loss", "chunked": True}}
    path = write_config(tmp_path, updates)
    _, cfg = load_config(str(path), [])
    with pytest.raises(ConfigError, match=r"^loss_fn.chunked: true multiplies by lm_head.weight alone"):
        preflight(cfg, 1)
    [finding] = [f for f in validate_text(path.read_text(), "c.yaml").findings if f.code == "RA-E004"]
    assert finding.key == "loss_fn.chunked" and "drop lm_head from peft.target_modules" in finding.fix


def test_lora_with_dropout_stopped_and_resumed_equals_a_straight_run_bit_for_bit(tmp_path):
    """F1 end to end: the resumed run's first iterator used to take one more draw from the RNG the
    dropout masks come from."""
    updates = {**PEFT_WITH_VALIDATION, "step_scheduler": {**PEFT_WITH_VALIDATION["step_scheduler"],
                                                          "checkpoint_interval": 2}}
    updates.pop("validation_dataset")
    straight, resumed = write_config(tmp_path / "straight", updates), write_config(tmp_path / "resumed", updates)
    assert_clean_exit(run_trainer(straight, nproc=0))
    assert_clean_exit(run_trainer(resumed, "--step_scheduler.max_steps", "2", nproc=0))
    again = run_trainer(resumed, nproc=0)  # auto-resume from epoch_0_step_2
    assert_clean_exit(again)
    assert "resumed from" in again.stderr
    assert losses(tmp_path / "resumed" / "ckpt") == losses(tmp_path / "straight" / "ckpt")
