"""Resuming under a changed config.

A checkpoint is resumed only under the convergence config it was saved with: a changed LR, schedule,
global batch, data, seed, ... is refused with the keys (old -> new) unless
``checkpoint.allow_config_change`` is set, and then the first resumed step already trains at the
new schedule's LR. Execution changes (layout, micro batch, kernels) resume with an info line.
The comparison is unit-tested torch-free; the resume itself runs for real: torch.distributed.run,
2 CPU processes, gloo.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

from tests.trainer.harness import BASE_CONFIG, assert_clean_exit, records, run_launcher, run_trainer, tree_digest
from tests.trainer.resume_cases import check_resume, config_dict, stopped_at_step_4, write_run_config
from trainer.components.lr_schedule import lr_at
from trainer.components.state_io import load_optimizer, save_optimizer
from trainer.contract.config import parse_config
from trainer.contract.overrides import ConfigError
from trainer.contract.resume_checks import check_resume_config, config_changes

SCHEDULE = BASE_CONFIG["lr_scheduler"]


# ---- the comparison (torch-free) ----------------------------------------------------------------------

@pytest.mark.parametrize("changes,named", [
    ({"optimizer__lr": 0.01}, "optimizer.lr 0.003 -> 0.01"),
    ({"step_scheduler__global_batch_size": 16}, "step_scheduler.global_batch_size 8 -> 16"),
    ({"dataset__seq_length": 64}, "dataset.seq_length 32 -> 64"),
    ({"rng__seed": 7}, "rng.seed 1234 -> 7"),
    ({"precision": "bf16"}, "precision fp32 -> bf16"),
    ({"lr_scheduler__warmup_steps": 0}, "lr_scheduler.warmup_steps 2 -> 0"),
    # Removing weight_decay leaves AdamW's own 0.01 (no change); SGD's 0 is another run.
    ({"optimizer__weight_decay": None, "optimizer___target_": "torch.optim.SGD"},
     "optimizer._target_ torch.optim.AdamW -> torch.optim.SGD; optimizer.weight_decay 0.01 -> unset"),
    ({"optimizer__eps": 1.0e-6}, "optimizer.eps 1e-08 -> 1e-06"),
    ({"distributed__grad_reduce_dtype": "bf16"}, "distributed.grad_reduce_dtype fp32 -> bf16"),
])
def test_a_convergence_change_is_refused_naming_the_key_and_the_way_out(tmp_path, changes, named):
    with pytest.raises(ConfigError) as err:
        check_resume(tmp_path, config_dict(), config_dict(**changes))
    message = str(err.value)
    assert message.startswith("checkpoint.checkpoint_dir: checkpoint ") and "\n" not in message
    assert f"({named})" in message
    assert "new checkpoint.checkpoint_dir" in message and "--checkpoint.allow_config_change true" in message


def test_the_run_length_is_convergence_only_where_it_sets_the_schedules_length(tmp_path):
    # decay_steps unset: the cosine decays over max_steps, so 8 -> 80 is another LR at every step.
    saved = config_dict(lr_scheduler__decay_steps=None)
    with pytest.raises(ConfigError, match=r"\(step_scheduler\.max_steps 8 -> 80\)"):
        check_resume(tmp_path, saved, config_dict(lr_scheduler__decay_steps=None, step_scheduler__max_steps=80))
    # decay_steps fixed, or a constant LR: the length only says where the run stops.
    lines = check_resume(tmp_path, config_dict(), config_dict(step_scheduler__max_steps=80))
    assert lines == [f"resuming {tmp_path / 'epoch_0_step_4'} with other execution settings (the same training): "
                     "step_scheduler.max_steps 8 -> 80"]
    constant = {"lr_scheduler": {"schedule": "constant"}}
    assert check_resume(tmp_path, {**config_dict(), **constant},
                  {**config_dict(step_scheduler__num_epochs=3), **constant})[0].endswith(
        "step_scheduler.num_epochs 1 -> 3")


def test_execution_changes_resume_with_one_info_line(tmp_path):
    current = config_dict(distributed__strategy="ddp", step_scheduler__local_batch_size=4,
                           step_scheduler__log_interval=2, model__kernels="reference", optimizer__fused=False,
                           hardware__gpus_per_node=4, checkpoint__keep_last=2,
                           restore_from={"path": "epoch_0_step_4"},
                           validation_dataset={"_target_": "trainer.data.MockDataset", "seq_length": 32})
    [line] = check_resume(tmp_path, config_dict(), current)
    assert line.startswith("resuming ") and "warning" not in line
    for change in ("distributed.strategy fsdp2 -> ddp", "step_scheduler.local_batch_size 2 -> 4",
                   "step_scheduler.log_interval 1 -> 2", "model.kernels unset -> reference",
                   "optimizer.fused unset -> false", "hardware.gpus_per_node 2 -> 4",
                   "checkpoint.keep_last unset -> 2"):
        assert change in line
    assert "restore_from" not in line, "restore_from names the checkpoint being resumed"


def test_defaults_written_out_and_an_unchanged_config_say_nothing(tmp_path):
    spelled_out = config_dict(clip_grad_norm__max_norm=1.0, dataloader__shuffle=True, lr_scheduler__min_lr=3.0e-4,
                               optimizer__lr=0.003, metadata={"name": "tiny"})
    assert check_resume(tmp_path, config_dict(), spelled_out) == []
    assert config_changes(parse_config(config_dict()), parse_config(config_dict())) == []


def test_allow_config_change_resumes_with_a_warning_listing_the_changes(tmp_path):
    current = config_dict(optimizer__lr=0.01, distributed__strategy="ddp", checkpoint__allow_config_change=True)
    warning, info = check_resume(tmp_path, config_dict(), current)
    assert warning.startswith("warning: resuming ") and "checkpoint.allow_config_change" in warning
    assert "optimizer.lr 0.003 -> 0.01" in warning and "distributed" not in warning
    assert info.endswith("(the same training): distributed.strategy fsdp2 -> ddp")


def test_a_checkpoint_without_a_readable_config_resumes_with_a_warning(tmp_path):
    folder = tmp_path / "epoch_0_step_4"
    folder.mkdir()
    [line] = check_resume_config(folder, parse_config(config_dict()), "restore_from.path")
    assert line.startswith("warning: cannot compare") and "config file not found" in line
    (folder / "config.yaml").write_text("optimizer: {betas: 3}\n")
    [line] = check_resume_config(folder, parse_config(config_dict()), "restore_from.path")
    assert line.startswith("warning: cannot compare") and "resuming without that check" in line


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_the_optimizer_keeps_its_configured_hyper_parameters_and_loads_the_saved_state(tmp_path):
    model = torch.nn.Linear(3, 2)
    saved = torch.optim.AdamW(model.parameters(), lr=0.1, weight_decay=0.0)
    model(torch.randn(4, 3, generator=torch.Generator().manual_seed(0))).sum().backward()
    saved.step()
    save_optimizer(model, saved, tmp_path / "optim")
    model.zero_grad(set_to_none=True)
    resumed = torch.optim.AdamW(model.parameters(), lr=0.5, weight_decay=0.2, betas=(0.8, 0.9))
    load_optimizer(model, resumed, tmp_path / "optim")
    group = resumed.param_groups[0]
    assert (group["lr"], group["weight_decay"], group["betas"]) == (0.5, 0.2, (0.8, 0.9))
    for param in model.parameters():
        assert float(resumed.state[param]["step"]) == 1.0
        assert torch.equal(resumed.state[param]["exp_avg"], saved.state[param]["exp_avg"])


# ---- resuming for real: 2 processes ----------------------------------------------------------------

def _lrs(ckpt: Path) -> list[float]:
    return [r["lr"] for r in records(ckpt / "training.jsonl")]


def _scheduled(base_lr: float) -> list[float]:
    return [lr_at(step, base_lr, **SCHEDULE) for step in range(1, 9)]


def test_train_refuses_to_resume_under_a_new_lr_and_batch_and_touches_nothing(tmp_path, straight_run):
    ckpt = stopped_at_step_4(straight_run, tmp_path)
    before = tree_digest(ckpt)
    result = run_launcher(write_run_config(tmp_path, config_dict()), "--optimizer.lr", "0.01",
                          "--step_scheduler.global_batch_size", "16")
    assert result.returncode == 2, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert errors == [f"error: checkpoint.checkpoint_dir: checkpoint {Path('ckpt') / 'epoch_0_step_4'} was saved "
                      "under another training config (optimizer.lr 0.003 -> 0.01; "
                      "step_scheduler.global_batch_size 8 -> 16); resuming it would continue a different "
                      "experiment. Start fresh with a new checkpoint.checkpoint_dir, or resume anyway with "
                      "--checkpoint.allow_config_change true (the LR, batch and data then follow this config)"]
    assert "Traceback" not in result.stderr and "resumed from" not in result.stderr
    assert tree_digest(ckpt) == before


def test_an_allowed_lr_change_trains_the_first_resumed_step_at_the_new_schedule(tmp_path, straight_run):
    ckpt = stopped_at_step_4(straight_run, tmp_path)
    result = run_trainer(write_run_config(tmp_path, config_dict()), "--optimizer.lr", "0.01",
                         "--checkpoint.allow_config_change", "true")
    assert_clean_exit(result)
    assert result.stderr.count("warning: resuming ckpt/epoch_0_step_4 under a changed training config "
                               "(checkpoint.allow_config_change): optimizer.lr 0.003 -> 0.01;") == 1
    assert _lrs(ckpt)[:4] == _lrs(straight_run)[:4]
    # Step 5 is the first resumed step: before the fix it ran at the old schedule's lr.
    assert _lrs(ckpt)[4:] == pytest.approx(_scheduled(0.01)[4:], rel=1e-12)
    assert _lrs(ckpt)[4] != pytest.approx(_scheduled(0.003)[4], rel=1e-3)
    saved = yaml.safe_load((ckpt / "epoch_0_step_8" / "config.yaml").read_text())
    assert saved["optimizer"]["lr"] == 0.01, "the next resume compares with the config it now runs"


def test_an_execution_change_resumes_on_the_same_curve(tmp_path, straight_run):
    ckpt = stopped_at_step_4(straight_run, tmp_path)
    result = run_trainer(write_run_config(tmp_path, config_dict()), "--distributed.strategy", "ddp",
                         "--step_scheduler.local_batch_size", "4")
    assert_clean_exit(result)
    assert ("resuming ckpt/epoch_0_step_4 with other execution settings (the same training): "
            "distributed.strategy fsdp2 -> ddp; step_scheduler.local_batch_size 2 -> 4") in result.stderr
    assert "warning" not in result.stderr.lower()
    got, want = records(ckpt / "training.jsonl"), records(straight_run / "training.jsonl")
    assert [r["step"] for r in got] == list(range(1, 9))
    assert [r["lr"] for r in got] == [r["lr"] for r in want]
    for g, w in zip(got[4:], want[4:]):
        assert g["loss"] == pytest.approx(w["loss"], abs=1e-5), g["step"]


def test_an_unchanged_config_resumes_silently_and_bit_for_bit(tmp_path, straight_run):
    ckpt = stopped_at_step_4(straight_run, tmp_path)
    result = run_trainer(write_run_config(tmp_path, config_dict()))
    assert_clean_exit(result)
    assert "resumed from ckpt/epoch_0_step_4 at step 4" in result.stderr
    assert "resuming" not in result.stderr and "warning" not in result.stderr.lower()
    assert records(ckpt / "training.jsonl") != [] and \
        [(r["loss"], r["lr"], r["grad_norm"]) for r in records(ckpt / "training.jsonl")] == \
        [(r["loss"], r["lr"], r["grad_norm"]) for r in records(straight_run / "training.jsonl")]
