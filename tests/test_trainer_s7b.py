"""Bug hunt s7b (#2, #4, #6, #11): resuming where the checkpoint does not fit, fused optimizers under
FSDP2, false convergence changes, and the resume check in the pre-flight and ``--dry-run``.

The comparison is unit-tested torch-free; what the workers do runs for real: torch.distributed.run,
2 CPU processes, gloo.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
import yaml

from service.cli_train import run_argv
from tests.test_resume_config_change import (_check, _config_dict, _saved, _stopped_at_step_4, _write,
                                             straight_run)  # noqa: F401  (the fixture, shared)
from tests.trainer_harness import assert_clean_exit, records, run_launcher, run_trainer, tree_digest
from trainer.checkpoint import COMPLETE_MARKER, SCHEDULE_FILE, check_resume_config, config_changes
from trainer.config import parse_config
from trainer.fast_paths import DTENSOR_FUSED_OPTIMIZERS, FUSED_OPTIMIZERS, default_fast_paths
from trainer.launch import preflight
from trainer.model_settings import LINEAR_MODULES
from trainer.optim_defaults import optimizer_defaults
from trainer.overrides import ConfigError

DECAYING = {"lr_scheduler__decay_steps": None}  # the cosine decays over the run's length


def _with_schedule(folder: Path, steps_per_epoch: int) -> Path:
    (folder / SCHEDULE_FILE).write_text(json.dumps({"steps_per_epoch": steps_per_epoch, "total_steps": 8}))
    return folder


# ---- #6: no false convergence changes ----------------------------------------------------------------

def test_num_epochs_is_no_schedule_change_where_max_steps_fixes_the_length(tmp_path):
    folder = _with_schedule(_saved(tmp_path / "epoch_0_step_4", _config_dict(**DECAYING)), steps_per_epoch=32)
    # 32 steps per epoch: max_steps 8 binds for 1 epoch and for 2, so the cosine is 8 steps either way.
    [line] = check_resume_config(folder, parse_config(_config_dict(**DECAYING, step_scheduler__num_epochs=2)),
                                 "checkpoint.checkpoint_dir")
    assert line.endswith("(the same training): step_scheduler.num_epochs 1 -> 2")
    # 4 steps per epoch: 1 epoch ends the run at step 4, 2 epochs at 8; another schedule.
    _with_schedule(folder, steps_per_epoch=4)
    with pytest.raises(ConfigError, match=r"\(step_scheduler\.num_epochs 1 -> 2\)"):
        check_resume_config(folder, parse_config(_config_dict(**DECAYING, step_scheduler__num_epochs=2)),
                            "checkpoint.checkpoint_dir")
    (folder / SCHEDULE_FILE).unlink()  # a checkpoint saved before schedule.json: the length is unknown
    with pytest.raises(ConfigError, match="num_epochs 1 -> 2"):
        check_resume_config(folder, parse_config(_config_dict(**DECAYING, step_scheduler__num_epochs=2)),
                            "checkpoint.checkpoint_dir")


def test_the_optimizers_own_defaults_written_out_are_no_change(tmp_path):
    assert optimizer_defaults("torch.optim.AdamW")["eps"] == 1e-8
    written = _config_dict(optimizer__eps=1.0e-8, optimizer__amsgrad=False, optimizer__maximize=False,
                           optimizer__weight_decay=None)  # AdamW's own weight decay is 0.01, as saved
    assert _check(tmp_path, _config_dict(), written) == []
    sgd = {"optimizer___target_": "torch.optim.SGD", "optimizer__weight_decay": None}
    assert _check(tmp_path, _config_dict(**sgd), _config_dict(**sgd, optimizer__momentum=0.0,
                                                               optimizer__nesterov=False)) == []
    with pytest.raises(ConfigError, match=r"\(optimizer\.amsgrad false -> true\)"):
        _check(tmp_path, _config_dict(), _config_dict(optimizer__amsgrad=True))


def test_optimizer_defaults_are_the_classes_signature():
    import inspect

    import torch

    for name in ("AdamW", "Adam", "SGD", "RMSprop"):
        signature = inspect.signature(getattr(torch.optim, name)).parameters.values()
        expected = {p.name: p.default for p in signature if p.default is not inspect.Parameter.empty}
        assert optimizer_defaults(f"torch.optim.{name}") == expected, name
    assert optimizer_defaults("trainer.optim.Custom") == {}


def test_all_linear_equals_its_module_list_and_dumps_without_warnings(tmp_path):
    listed = [m for m in LINEAR_MODULES if m != "lm_head"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # PydanticSerializationUnexpectedValue was a UserWarning
        assert _check(tmp_path, _config_dict(peft={"target_modules": "all-linear"}),
                      _config_dict(peft={"target_modules": listed[::-1]})) == []
        assert parse_config({"peft": {"target_modules": "all-linear"}}).peft.model_dump()["target_modules"] == \
            "all-linear"
    with pytest.raises(ConfigError, match="peft.target_modules"):
        _check(tmp_path, _config_dict(peft={"target_modules": "all-linear"}),
               _config_dict(peft={"target_modules": ["q_proj"]}))


# ---- #11: messages ---------------------------------------------------------------------------------------

def test_a_refused_restore_from_points_at_restore_from(tmp_path):
    folder = _saved(tmp_path / "epoch_0_step_4", _config_dict())
    with pytest.raises(ConfigError) as err:
        check_resume_config(folder, parse_config(_config_dict(optimizer__lr=0.01)), "restore_from.path")
    message = str(err.value)
    assert message.startswith("restore_from.path: checkpoint ")
    assert "Restore a checkpoint saved under this config (restore_from.path), unset restore_from.path" in message
    assert "new checkpoint.checkpoint_dir" not in message


def test_the_info_line_lists_what_the_user_set_and_a_new_world_size(tmp_path):
    folder = _saved(tmp_path / "epoch_0_step_4", _config_dict())
    (folder / "rng").mkdir()
    for rank in (0, 1):
        (folder / "rng" / f"rank_{rank}.pt").write_bytes(b"")
    [line] = check_resume_config(folder, parse_config(_config_dict(distributed__tp_size=2)),
                                 "checkpoint.checkpoint_dir", world_size=4)
    assert line.endswith("(the same training): distributed.tp_size 1 -> 2; world size 2 -> 4")
    assert "etp_size" not in line, "etp_size follows tp_size; the user never set it"
    changes = config_changes(parse_config(_config_dict()), parse_config(_config_dict(distributed__etp_size=2)))
    assert [str(c) for c in changes] == ["distributed.etp_size unset -> 2"]


def _complete_checkpoint(run: Path, cfg: dict, signature: dict | None = None) -> Path:
    folder = _saved(run / "ckpt" / "epoch_0_step_4", cfg)
    (folder / COMPLETE_MARKER).write_text("{}")
    if signature is not None:
        (folder / "signature.json").write_text(json.dumps(signature))
    return folder


def test_dry_run_refuses_what_the_workers_would(tmp_path, capsys, monkeypatch):
    ckpt = _complete_checkpoint(tmp_path, _config_dict())
    monkeypatch.chdir(tmp_path)  # checkpoint_dir is relative, as the launcher reads it
    config = _write(tmp_path, _config_dict())
    assert run_argv([str(config), "--optimizer.lr", "0.01", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "error: checkpoint.checkpoint_dir: checkpoint ckpt/epoch_0_step_4 was saved under another training " \
           "config (optimizer.lr 0.003 -> 0.01)" in err
    assert run_argv([str(config), "--optimizer.eps", "1e-8", "--dry-run"]) == 0, capsys.readouterr().err
    assert ckpt.is_dir()


def test_preflight_refuses_a_checkpoint_of_another_peft_shape(tmp_path, monkeypatch):
    peft = {"method": "lora", "rank": 8, "alpha": 16.0, "target_modules": sorted(LINEAR_MODULES[:7])}
    _complete_checkpoint(tmp_path, _config_dict(peft={"rank": 8}), {"peft": peft})
    monkeypatch.chdir(tmp_path)
    cfg = parse_config(_config_dict(peft={"rank": 4}))
    with pytest.raises(ConfigError) as err:
        preflight(cfg, 2)
    message = str(err.value)
    assert message.startswith("checkpoint.checkpoint_dir: ckpt holds checkpoint epoch_0_step_4 of another model")
    assert "peft: checkpoint" in message and "new checkpoint.checkpoint_dir" in message
    assert "remove the old checkpoints from ckpt" in message and "allow_config_change cannot resume it" in message
    cfg = parse_config(_config_dict(peft={"rank": 4}, checkpoint__allow_config_change=True))
    with pytest.raises(ConfigError, match="allow_config_change cannot resume it"):
        preflight(cfg, 2)
    preflight(cfg, 2, compare_resume=False)  # the workers check the signature once the model exists


# ---- #4: fused optimizers under FSDP2 ----------------------------------------------------------------------

def test_dtensor_fused_optimizers_are_the_ones_torch_shards():
    import torch
    from torch.distributed.tensor import DTensor

    propagator = DTensor._op_dispatcher.sharding_propagator
    registered = {*propagator.op_strategy_funcs, *propagator.op_single_dim_strategy_funcs}
    ops = {"torch.optim.AdamW": "_fused_adamw_", "torch.optim.Adam": "_fused_adam_",
           "torch.optim.SGD": "_fused_sgd_", "torch.optim.Adagrad": "_fused_adagrad_"}
    assert set(ops) == set(FUSED_OPTIMIZERS)
    for target, op in ops.items():
        sharded = getattr(torch.ops.aten, op).default in registered
        assert sharded == (target in DTENSOR_FUSED_OPTIMIZERS), target


def test_fused_defaults_and_refusals_follow_the_strategy():
    from trainer.fused.runtime import fast_optimizer_kwargs

    assert "optimizer.fused" not in default_fast_paths("cpu", "cpu", optimizer_target="torch.optim.SGD")
    assert default_fast_paths("cpu", "cpu", optimizer_target="torch.optim.SGD", strategy="ddp")["optimizer.fused"]
    assert fast_optimizer_kwargs("torch.optim.SGD", {}, "cpu", "fsdp2") == {}
    assert fast_optimizer_kwargs("torch.optim.SGD", {}, "cpu", "ddp") == {"fused": True}
    assert fast_optimizer_kwargs("torch.optim.AdamW", {}, "cpu", "fsdp2") == {"fused": True}
    sgd = {"_target_": "torch.optim.SGD", "lr": 0.003, "fused": True}
    with pytest.raises(ConfigError) as err:
        preflight(parse_config(_config_dict(optimizer=sgd)), 2)
    assert str(err.value).startswith("optimizer.fused: torch.optim.SGD has no fused step for the sharded")
    preflight(parse_config(_config_dict(optimizer=sgd, distributed__strategy="ddp")), 2)


def test_sgd_trains_under_fsdp2(tmp_path):
    cfg = _config_dict(optimizer={"_target_": "torch.optim.SGD", "lr": 0.003, "momentum": 0.9},
                       step_scheduler__max_steps=2, checkpoint__enabled=False)
    result = run_trainer(_write(tmp_path, cfg))
    assert_clean_exit(result)
    assert [r["step"] for r in records(tmp_path / "ckpt" / "training.jsonl")] == [1, 2]


# ---- #2 and #6 for real: 2 processes -----------------------------------------------------------------------

def test_an_auto_detected_checkpoint_of_another_model_is_refused_not_overwritten(tmp_path, straight_run):
    ckpt = _stopped_at_step_4(straight_run, tmp_path)
    assert json.loads((ckpt / "epoch_0_step_4" / SCHEDULE_FILE).read_text()) == {"steps_per_epoch": 32,
                                                                              "total_steps": 8}
    before = tree_digest(ckpt)
    # allow_config_change passes the launcher's config comparison; the workers' signature check refuses.
    result = run_launcher(_write(tmp_path, _config_dict()), "--model.pretrained_model_name_or_path", "tiny-qwen3",
                          "--step_scheduler.max_steps", "4", "--checkpoint.allow_config_change", "true")
    assert result.returncode == 2, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(
        "error: checkpoint.checkpoint_dir: ckpt holds checkpoint epoch_0_step_4 of another model or PEFT setup "
        "(model_type: checkpoint 'llama', this run 'qwen3'")
    assert "Traceback" not in result.stderr
    assert tree_digest(ckpt) == before, "the old run's checkpoint must survive"


def test_resuming_with_the_optimizers_defaults_written_out_continues_the_run(tmp_path, straight_run):
    ckpt = _stopped_at_step_4(straight_run, tmp_path)
    result = run_trainer(_write(tmp_path, _config_dict()), "--optimizer.eps", "1e-8", "--optimizer.amsgrad", "false",
                         "--optimizer.maximize", "false", "--step_scheduler.num_epochs", "2")
    assert_clean_exit(result)
    assert "resumed from ckpt/epoch_0_step_4 at step 4" in result.stderr
    saved = yaml.safe_load((ckpt / "epoch_0_step_8" / "config.yaml").read_text())
    assert saved["optimizer"]["eps"] == 1e-8
    got, want = records(ckpt / "training.jsonl"), records(straight_run / "training.jsonl")
    assert [(r["loss"], r["lr"]) for r in got] == [(r["loss"], r["lr"]) for r in want]
