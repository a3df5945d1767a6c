"""The bundled trainer with pipeline parallel and context parallel, for real (2 CPU processes over gloo).

Pipeline: a PP=2 run of tiny-llama equals one process (its validation losses too), its consolidated checkpoint
holds the whole model (transformers loads it with the trainer's logits), it resumes after a SIGKILL with the same
losses, and it resumes under another PP size. Context parallel: tiny-llama-long at 8K tokens trains with CP=2 and
resumes.
"""

from __future__ import annotations

import pytest
import torch

from tests.trainer.harness import assert_clean_exit, losses, records, run_trainer, write_config

TOL = 1e-5
PIPELINE = {"distributed": {"strategy": "fsdp2", "backend": "gloo", "pp_size": 2}}
# Validation at steps 4 and 8, before each checkpoint: through the stages under PP, one forward without.
VALIDATED = {"validation_dataset": {"_target_": "trainer.data.MockDataset", "seq_length": 48, "num_samples": 16,
                                    "seed": 4321},
             "step_scheduler": {"val_check_interval": 4}}


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """One process, no pipeline: `python -m trainer CONFIG`."""
    folder = tmp_path_factory.mktemp("single")
    assert_clean_exit(run_trainer(write_config(folder, VALIDATED), nproc=0))
    return folder / "ckpt"


@pytest.fixture(scope="module")
def pipeline_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("pp2")
    assert_clean_exit(run_trainer(write_config(folder, {**PIPELINE, **VALIDATED})))
    return folder / "ckpt"


def _assert_same_curve(run_dir, reference_dir, steps=range(1, 9)):
    got, want = records(run_dir / "training.jsonl"), records(reference_dir / "training.jsonl")
    assert [r["step"] for r in got] == [r["step"] for r in want] == list(steps)
    for g, w in zip(got, want):
        assert abs(g["loss"] - w["loss"]) <= TOL, (g["step"], g["loss"], w["loss"])
        # clipping sees the norm over both stages
        assert abs(g["grad_norm"] - w["grad_norm"]) <= 10 * TOL * max(1.0, w["grad_norm"])


def test_pipeline_run_equals_one_process(pipeline_run, reference):
    _assert_same_curve(pipeline_run, reference)


def test_pipeline_validation_equals_one_process(pipeline_run, reference):
    got, want = records(pipeline_run / "validation.jsonl"), records(reference / "validation.jsonl")
    assert [r["step"] for r in got] == [r["step"] for r in want] == [4, 8]
    for g, w in zip(got, want):
        assert g["num_label_tokens"] == w["num_label_tokens"]
        assert abs(g["loss"] - w["loss"]) <= TOL, (g["step"], g["loss"], w["loss"])


def test_pipeline_checkpoint_holds_the_whole_model_and_loads_in_transformers(pipeline_run, reference):
    from transformers import AutoModelForCausalLM

    from trainer.models import build_causal_lm

    consolidated = pipeline_run / "epoch_0_step_8" / "model" / "consolidated"
    hf = AutoModelForCausalLM.from_pretrained(consolidated).eval()
    single = AutoModelForCausalLM.from_pretrained(reference / "epoch_0_step_8" / "model" / "consolidated").eval()
    ours = build_causal_lm(str(consolidated), load_weights=True).eval()
    ids = torch.randint(512, (2, 24), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        hf_logits = hf(ids).logits
        torch.testing.assert_close(ours(ids), hf_logits, atol=1e-5, rtol=1e-5)
        # both stages' weights, trained as one process trains them
        torch.testing.assert_close(single(ids).logits, hf_logits, atol=1e-4, rtol=1e-4)
        fresh = build_causal_lm("tiny-llama", seed=1234).eval()
        assert not torch.allclose(fresh(ids), hf_logits, atol=1e-3)


def test_pipeline_resumes_after_sigkill_with_equal_losses(tmp_path, pipeline_run):
    config = write_config(tmp_path, PIPELINE)
    killed = run_trainer(config, env={"TRAINER_FAULT_INJECT": "after_step:6:1"})
    assert killed.returncode != 0
    ckpt = tmp_path / "ckpt"
    assert (ckpt / "LATEST").read_text().strip() == "epoch_0_step_4"
    restarted = run_trainer(config)
    assert_clean_exit(restarted)
    assert "resumed from" in restarted.stderr and "epoch_0_step_4" in restarted.stderr
    assert losses(ckpt) == losses(pipeline_run)


def test_pipeline_checkpoint_resumes_without_a_pipeline(tmp_path, reference):
    """Saved by 2 pipeline stages, resumed by one process: the weights come from the consolidated copy and the
    optimizer state, keyed by parameter name, from every stage's shard."""
    config = write_config(tmp_path, PIPELINE)
    assert_clean_exit(run_trainer(config, "--step_scheduler.max_steps", "4"))
    result = run_trainer(config, "--distributed.pp_size", "1", nproc=0)
    assert_clean_exit(result)
    assert "resumed from" in result.stderr
    _assert_same_curve(tmp_path / "ckpt", reference)


LONG_CONTEXT = {
    "model": {"pretrained_model_name_or_path": "tiny-llama-long"},
    "distributed": {"strategy": "fsdp2", "backend": "gloo", "cp_size": 2},
    "dataset": {"_target_": "trainer.data.MockDataset", "seq_length": 8192, "num_samples": 16},
    "step_scheduler": {"global_batch_size": 1, "local_batch_size": 1, "max_steps": 4, "checkpoint_interval": 2,
                       "log_interval": 1},
    "lr_scheduler": {"schedule": "cosine", "warmup_steps": 1, "decay_steps": 4, "min_lr": 3.0e-4},
}


def test_long_context_card_trains_with_context_parallel_and_resumes(tmp_path):
    config = write_config(tmp_path, LONG_CONTEXT)
    killed = run_trainer(config, env={"TRAINER_FAULT_INJECT": "after_step:3:1"}, timeout=240)
    assert killed.returncode != 0
    ckpt = tmp_path / "ckpt"
    before = losses(ckpt)
    assert len(before) >= 3 and before[2] < before[0] - 0.1, before  # the loss falls at 8K tokens
    restarted = run_trainer(config, timeout=240)
    assert_clean_exit(restarted)
    assert "epoch_0_step_2" in restarted.stderr
    after = losses(ckpt)
    assert len(after) == 4 and after[:3] == before[:3]  # step 3 again, from step 2's checkpoint: the same loss
    assert after[3] < after[0]
