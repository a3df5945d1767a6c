"""The bundled trainer for real: 2 CPU processes over gloo through torch.distributed.run.

Parallel runs must equal one process on the same global batch (fp32, 1e-5); a resumed run must
equal a straight one bit for bit, also after a SIGKILL mid-run or mid-save.
"""

from __future__ import annotations

import shutil
import sys

import pytest

from tests import launch_server
from tests.trainer.harness import (
    _env,
    assert_clean_exit,
    losses,
    records,
    run_launcher,
    run_trainer,
    write_config,
)
from tests.trainer.resume_cases import config_dict, write_run_config

TOL = 1e-5


@pytest.fixture
def fsdp2_run(straight_run):
    """8 steps on 2 FSDP2 processes (the session's straight run, tests/trainer/conftest.py)."""
    return straight_run


def _assert_same_curve(run_dir, reference_dir, tol=TOL):
    got, want = records(run_dir / "training.jsonl"), records(reference_dir / "training.jsonl")
    assert [r["step"] for r in got] == [r["step"] for r in want] == list(range(1, 9))
    for g, w in zip(got, want):
        assert abs(g["loss"] - w["loss"]) <= tol, (g["step"], g["loss"], w["loss"])
        assert abs(g["grad_norm"] - w["grad_norm"]) <= 10 * tol * max(1.0, w["grad_norm"])
        assert g["lr"] == pytest.approx(w["lr"], rel=1e-12)


def test_single_process_run_learns_and_logs_metrics(reference):
    rows = records(reference / "training.jsonl")
    assert rows[-1]["loss"] < rows[0]["loss"] - 0.05, "the loss falls on the bigram mock data"
    for row in rows:
        assert set(row) == {"step", "epoch", "loss", "grad_norm", "lr", "mem", "tps", "mfu"}
        assert row["tps"] > 0 and row["mem"] > 0 and row["mfu"] > 0  # the cpu card has a peak
    assert (reference / "LATEST").read_text().strip() == "epoch_0_step_8"
    assert (reference / "epoch_0_step_8" / "model" / "consolidated" / "model.safetensors").is_file()


def test_fsdp2_matches_single_process(fsdp2_run, reference):
    _assert_same_curve(fsdp2_run, reference)


@pytest.mark.parametrize("name,overrides", [
    ("tp2_sp", ["--distributed.tp_size=2", "--distributed.sequence_parallel=true"]),
    ("ddp_accumulate", ["--distributed.strategy", "ddp", "--step_scheduler.local_batch_size", "1"]),
])
def test_parallel_layouts_match_single_process(tmp_path, reference, name, overrides):
    result = run_trainer(write_config(tmp_path), *overrides)
    assert_clean_exit(result)
    _assert_same_curve(tmp_path / "ckpt", reference)


def test_tensor_parallel_without_sequence_parallel_clips_like_one_process(tmp_path, reference):
    """Without SP the norms stay FSDP DTensors on the 1-D dp mesh while the TP'd weights are on the 2-D
    (dp, tp) mesh; the gradient norm must combine both (it crashed on the first step), equal the
    one-process norm, and clip every gradient alike. Clipping is active here (norms above max_norm 1.0
    at steps 1 and 3), so the later losses check the coefficient too."""
    result = run_trainer(write_config(tmp_path), "--distributed.tp_size=2", "--distributed.sequence_parallel=false",
                         "--step_scheduler.max_steps=3", "--checkpoint.enabled=false")
    assert_clean_exit(result)
    got, want = records(tmp_path / "ckpt" / "training.jsonl"), records(reference / "training.jsonl")[:3]
    assert want[0]["grad_norm"] > 1.0, "the reference must clip, or this checks nothing about clipping"
    assert [r["step"] for r in got] == [1, 2, 3]
    for g, w in zip(got, want):
        assert abs(g["grad_norm"] - w["grad_norm"]) <= TOL, (g["step"], g["grad_norm"], w["grad_norm"])
        assert abs(g["loss"] - w["loss"]) <= TOL, (g["step"], g["loss"], w["loss"])


def test_config_error_found_by_the_workers_is_exit_2_with_one_message(tmp_path):
    """Too few samples is found once the dataset exists (in the workers); the launcher reports their exit
    code 2 and their one message, without torchrun's ChildFailedError traceback. (validate's RA-D003 sees
    it first for mock data: set aside here, so that the workers' own check is what stops the run.)"""
    result = run_launcher(write_config(tmp_path), "--nproc-per-node", "2", "--ignore-validation-errors",
                          "--dataset.num_samples", "1")
    assert result.returncode == 2, result.stderr[-3000:]
    assert result.stderr.count("error: dataset: ") == 1, result.stderr[-3000:]
    for noise in ("Traceback", "ChildFailedError", "failed (exitcode"):
        assert noise not in result.stderr, result.stderr[-3000:]


def test_unwritable_checkpoint_dir_stops_every_worker_at_startup(tmp_path):
    """Checked by rank 0 before the model is built and shared with the other ranks, so both stop with
    exit 2 (none waits in a collective); launched past the launcher's own check, as torchrun or srun would."""
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    config = write_config(tmp_path)
    code = ("import sys; from service.cli.train import launch; "
            "sys.exit(launch(['--nproc-per-node=2', '--standalone', '-m', 'trainer'] + sys.argv[1:]))")
    result = launch_server.subprocess_run([sys.executable, "-c", code, str(config), "--checkpoint.checkpoint_dir",
                                           str(blocker / "ckpt")], cwd=tmp_path, env=_env(), capture_output=True,
                                          text=True, timeout=120)
    assert result.returncode == 2, result.stderr[-3000:]
    assert result.stderr.count("error: checkpoint.checkpoint_dir: cannot create") == 1, result.stderr[-3000:]
    assert "Not a directory" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.slow
def test_fsdp2_tp_2x2_mesh_with_four_processes(tmp_path, reference):
    result = run_trainer(write_config(tmp_path), "--distributed.tp_size", "2",
                         "--distributed.sequence_parallel", "true", nproc=4, timeout=240)
    assert_clean_exit(result)
    _assert_same_curve(tmp_path / "ckpt", reference)


def test_stop_and_resume_equals_a_straight_run_bit_for_bit(tmp_path, fsdp2_run):
    config = write_config(tmp_path)
    assert_clean_exit(run_trainer(config, "--step_scheduler.max_steps", "4"))
    assert (tmp_path / "ckpt" / "LATEST").read_text().strip() == "epoch_0_step_4"
    result = run_trainer(config)  # no restore_from: auto-resume from checkpoint_dir
    assert_clean_exit(result)
    assert "resumed from" in result.stderr and "epoch_0_step_4" in result.stderr
    assert losses(tmp_path / "ckpt") == losses(fsdp2_run)


def test_sigkilled_worker_then_restart_ends_with_the_same_losses(tmp_path, fsdp2_run):
    config = write_config(tmp_path)
    killed = run_trainer(config, env={"TRAINER_FAULT_INJECT": "after_step:6:1"})
    assert killed.returncode != 0
    # The surviving rank says in one line that a peer left, not with a gloo traceback.
    assert "[rank 0] training failed" not in killed.stderr and "pair.cc" not in killed.stderr, killed.stderr[-3000:]
    ckpt = tmp_path / "ckpt"
    assert (ckpt / "LATEST").read_text().strip() == "epoch_0_step_4"
    assert max(r["step"] for r in records(ckpt / "training.jsonl")) >= 5, "it died after step 4's checkpoint"
    restarted = run_trainer(config)
    assert_clean_exit(restarted)
    assert "epoch_0_step_4" in restarted.stderr
    assert losses(ckpt) == losses(fsdp2_run)


def test_kill_during_save_leaves_a_half_written_checkpoint_that_is_skipped(tmp_path, fsdp2_run):
    config = write_config(tmp_path)
    killed = run_trainer(config, env={"TRAINER_FAULT_INJECT": "during_save:8:0"})
    assert killed.returncode != 0
    ckpt = tmp_path / "ckpt"
    staging = ckpt / ".tmp_epoch_0_step_8"
    assert staging.is_dir() and (staging / "model" / "consolidated" / "model.safetensors").is_file()
    assert not (ckpt / "epoch_0_step_8").exists()
    # A second, hand-made half-written folder (no completion marker) must be skipped too.
    shutil.copytree(staging, ckpt / "epoch_0_step_7")
    restarted = run_trainer(config)
    assert_clean_exit(restarted)
    assert "resumed from" in restarted.stderr and "epoch_0_step_4" in restarted.stderr
    assert losses(ckpt) == losses(fsdp2_run)
    assert not staging.exists() and (ckpt / "epoch_0_step_8" / ".complete").is_file()
    assert (ckpt / "LATEST").read_text().strip() == "epoch_0_step_8"


def test_ddp_matches_single_process_validates_and_keeps_the_last_checkpoints(tmp_path, reference):
    # Validation and retention change no training numbers, so this run also checks DDP's curve.
    config = write_config(tmp_path, {
        "validation_dataset": {"_target_": "trainer.data.MockDataset", "seq_length": 32, "num_samples": 16,
                               "seed": 99},
        "step_scheduler": {"val_check_interval": 3, "checkpoint_interval": 2},
        "checkpoint": {"keep_last": 2}})
    result = run_trainer(config, "--distributed.strategy", "ddp")
    assert_clean_exit(result)
    ckpt = tmp_path / "ckpt"
    _assert_same_curve(ckpt, reference)
    val = records(ckpt / "validation.jsonl")
    assert [r["step"] for r in val] == [3, 6, 8]
    assert all(r["num_label_tokens"] == 16 * 32 for r in val)
    assert val[-1]["loss"] < val[0]["loss"], "the held-out samples follow the same rule"
    assert sorted(p.name for p in ckpt.glob("epoch_*")) == ["epoch_0_step_6", "epoch_0_step_8"]


def test_resume_on_another_world_size_reshards_the_optimizer(tmp_path, reference):
    """Saved by 2 FSDP2 ranks, resumed by 1 process: DCP reshards the optimizer state (and here the
    model too: save_consolidated false keeps only the sharded copy); the data position is in global
    samples, so the curve still equals the single-process run."""
    config = write_config(tmp_path, {"checkpoint": {"save_consolidated": False}})
    assert_clean_exit(run_trainer(config, "--step_scheduler.max_steps", "4"))
    model_dir = tmp_path / "ckpt" / "epoch_0_step_4" / "model"
    assert (model_dir / "sharded" / ".metadata").is_file() and not (model_dir / "consolidated").exists()
    result = run_trainer(config, nproc=0)
    assert_clean_exit(result)
    assert "resumed from" in result.stderr
    _assert_same_curve(tmp_path / "ckpt", reference)


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


def test_lora_with_dropout_stopped_and_resumed_equals_a_straight_run_bit_for_bit(tmp_path):
    """End to end: the resumed run's first iterator used to take one more draw from the RNG the
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


def test_sgd_trains_under_fsdp2(tmp_path):
    cfg = config_dict(optimizer={"_target_": "torch.optim.SGD", "lr": 0.003, "momentum": 0.9},
                       step_scheduler__max_steps=2, checkpoint__enabled=False)
    result = run_trainer(write_run_config(tmp_path, cfg))
    assert_clean_exit(result)
    assert [r["step"] for r in records(tmp_path / "ckpt" / "training.jsonl")] == [1, 2]
