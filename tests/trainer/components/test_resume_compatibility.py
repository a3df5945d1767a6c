"""Which checkpoints a run resumes: the schedule's length, optimizer defaults written out, LoRA targets and
shapes, another model's checkpoint, and `--dry-run` refusing what the workers would."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
import yaml

from service.cli.train import run_argv
from tests.trainer.harness import assert_clean_exit, records, run_launcher, run_trainer, tree_digest
from tests.trainer.resume_cases import check_resume, config_dict, saved_checkpoint, stopped_at_step_4, write_run_config
from trainer.contract.checkpoint_layout import COMPLETE_MARKER, SCHEDULE_FILE
from trainer.contract.config import parse_config
from trainer.contract.model_settings import LINEAR_MODULES
from trainer.contract.optim_defaults import optimizer_defaults
from trainer.contract.overrides import ConfigError
from trainer.contract.preflight import preflight
from trainer.contract.resume_checks import check_resume_config, config_changes

DECAYING = {"lr_scheduler__decay_steps": None}  # the cosine decays over the run's length


def _with_schedule(folder: Path, steps_per_epoch: int) -> Path:
    (folder / SCHEDULE_FILE).write_text(json.dumps({"steps_per_epoch": steps_per_epoch, "total_steps": 8}))
    return folder


def _complete_checkpoint(run: Path, cfg: dict, signature: dict | None = None) -> Path:
    folder = saved_checkpoint(run / "ckpt" / "epoch_0_step_4", cfg)
    (folder / COMPLETE_MARKER).write_text("{}")
    if signature is not None:
        (folder / "signature.json").write_text(json.dumps(signature))
    return folder


def test_num_epochs_is_no_schedule_change_where_max_steps_fixes_the_length(tmp_path):
    folder = _with_schedule(saved_checkpoint(tmp_path / "epoch_0_step_4", config_dict(**DECAYING)), steps_per_epoch=32)
    # 32 steps per epoch: max_steps 8 binds for 1 epoch and for 2, so the cosine is 8 steps either way.
    [line] = check_resume_config(folder, parse_config(config_dict(**DECAYING, step_scheduler__num_epochs=2)),
                                 "checkpoint.checkpoint_dir")
    assert line.endswith("(the same training): step_scheduler.num_epochs 1 -> 2")
    # 4 steps per epoch: 1 epoch ends the run at step 4, 2 epochs at 8; another schedule.
    _with_schedule(folder, steps_per_epoch=4)
    with pytest.raises(ConfigError, match=r"\(step_scheduler\.num_epochs 1 -> 2\)"):
        check_resume_config(folder, parse_config(config_dict(**DECAYING, step_scheduler__num_epochs=2)),
                            "checkpoint.checkpoint_dir")
    (folder / SCHEDULE_FILE).unlink()  # a checkpoint saved before schedule.json: the length is unknown
    with pytest.raises(ConfigError, match="num_epochs 1 -> 2"):
        check_resume_config(folder, parse_config(config_dict(**DECAYING, step_scheduler__num_epochs=2)),
                            "checkpoint.checkpoint_dir")


def test_the_optimizers_own_defaults_written_out_are_no_change(tmp_path):
    assert optimizer_defaults("torch.optim.AdamW")["eps"] == 1e-8
    written = config_dict(optimizer__eps=1.0e-8, optimizer__amsgrad=False, optimizer__maximize=False,
                           optimizer__weight_decay=None)  # AdamW's own weight decay is 0.01, as saved
    assert check_resume(tmp_path, config_dict(), written) == []
    sgd = {"optimizer___target_": "torch.optim.SGD", "optimizer__weight_decay": None}
    assert check_resume(tmp_path, config_dict(**sgd), config_dict(**sgd, optimizer__momentum=0.0,
                                                               optimizer__nesterov=False)) == []
    with pytest.raises(ConfigError, match=r"\(optimizer\.amsgrad false -> true\)"):
        check_resume(tmp_path, config_dict(), config_dict(optimizer__amsgrad=True))


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
        assert check_resume(tmp_path, config_dict(peft={"target_modules": "all-linear"}),
                      config_dict(peft={"target_modules": listed[::-1]})) == []
        assert parse_config({"peft": {"target_modules": "all-linear"}}).peft.model_dump()["target_modules"] == \
            "all-linear"
    with pytest.raises(ConfigError, match="peft.target_modules"):
        check_resume(tmp_path, config_dict(peft={"target_modules": "all-linear"}),
               config_dict(peft={"target_modules": ["q_proj"]}))


def test_a_refused_restore_from_points_at_restore_from(tmp_path):
    folder = saved_checkpoint(tmp_path / "epoch_0_step_4", config_dict())
    with pytest.raises(ConfigError) as err:
        check_resume_config(folder, parse_config(config_dict(optimizer__lr=0.01)), "restore_from.path")
    message = str(err.value)
    assert message.startswith("restore_from.path: checkpoint ")
    assert "Restore a checkpoint saved under this config (restore_from.path), unset restore_from.path" in message
    assert "new checkpoint.checkpoint_dir" not in message


def test_the_info_line_lists_what_the_user_set_and_a_new_world_size(tmp_path):
    folder = saved_checkpoint(tmp_path / "epoch_0_step_4", config_dict())
    (folder / "rng").mkdir()
    for rank in (0, 1):
        (folder / "rng" / f"rank_{rank}.pt").write_bytes(b"")
    [line] = check_resume_config(folder, parse_config(config_dict(distributed__tp_size=2)),
                                 "checkpoint.checkpoint_dir", world_size=4)
    assert line.endswith("(the same training): distributed.tp_size 1 -> 2; world size 2 -> 4")
    assert "etp_size" not in line, "etp_size follows tp_size; the user never set it"
    changes = config_changes(parse_config(config_dict()), parse_config(config_dict(distributed__etp_size=2)))
    assert [str(c) for c in changes] == ["distributed.etp_size unset -> 2"]


def test_dry_run_refuses_what_the_workers_would(tmp_path, capsys, monkeypatch):
    ckpt = _complete_checkpoint(tmp_path, config_dict())
    monkeypatch.chdir(tmp_path)  # checkpoint_dir is relative, as the launcher reads it
    config = write_run_config(tmp_path, config_dict())
    assert run_argv([str(config), "--optimizer.lr", "0.01", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "error: checkpoint.checkpoint_dir: checkpoint ckpt/epoch_0_step_4 was saved under another training " \
           "config (optimizer.lr 0.003 -> 0.01)" in err
    assert run_argv([str(config), "--optimizer.eps", "1e-8", "--dry-run"]) == 0, capsys.readouterr().err
    assert ckpt.is_dir()


def test_preflight_refuses_a_checkpoint_of_another_peft_shape(tmp_path, monkeypatch):
    peft = {"method": "lora", "rank": 8, "alpha": 16.0, "target_modules": sorted(LINEAR_MODULES[:7])}
    _complete_checkpoint(tmp_path, config_dict(peft={"rank": 8}), {"peft": peft})
    monkeypatch.chdir(tmp_path)
    cfg = parse_config(config_dict(peft={"rank": 4}))
    with pytest.raises(ConfigError) as err:
        preflight(cfg, 2)
    message = str(err.value)
    assert message.startswith("checkpoint.checkpoint_dir: ckpt holds checkpoint epoch_0_step_4 of another model")
    assert "peft: checkpoint" in message and "new checkpoint.checkpoint_dir" in message
    assert "remove the old checkpoints from ckpt" in message and "allow_config_change cannot resume it" in message
    cfg = parse_config(config_dict(peft={"rank": 4}, checkpoint__allow_config_change=True))
    with pytest.raises(ConfigError, match="allow_config_change cannot resume it"):
        preflight(cfg, 2)
    preflight(cfg, 2, compare_resume=False)  # the workers check the signature once the model exists


def test_an_auto_detected_checkpoint_of_another_model_is_refused_not_overwritten(tmp_path, straight_run):
    ckpt = stopped_at_step_4(straight_run, tmp_path)
    assert json.loads((ckpt / "epoch_0_step_4" / SCHEDULE_FILE).read_text()) == {"steps_per_epoch": 32,
                                                                              "total_steps": 8}
    before = tree_digest(ckpt)
    # allow_config_change passes the launcher's config comparison; the workers' signature check refuses.
    result = run_launcher(write_run_config(tmp_path, config_dict()), "--model.pretrained_model_name_or_path",
                          "tiny-qwen3", "--step_scheduler.max_steps", "4", "--checkpoint.allow_config_change", "true")
    assert result.returncode == 2, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(
        "error: checkpoint.checkpoint_dir: ckpt holds checkpoint epoch_0_step_4 of another model or PEFT setup "
        "(model_type: checkpoint 'llama', this run 'qwen3'")
    assert "Traceback" not in result.stderr
    assert tree_digest(ckpt) == before, "the old run's checkpoint must survive"


def test_resuming_with_the_optimizers_defaults_written_out_continues_the_run(tmp_path, straight_run):
    ckpt = stopped_at_step_4(straight_run, tmp_path)
    result = run_trainer(write_run_config(tmp_path, config_dict()), "--optimizer.eps", "1e-8", "--optimizer.amsgrad",
                         "false", "--optimizer.maximize", "false", "--step_scheduler.num_epochs", "2")
    assert_clean_exit(result)
    assert "resumed from ckpt/epoch_0_step_4 at step 4" in result.stderr
    saved = yaml.safe_load((ckpt / "epoch_0_step_8" / "config.yaml").read_text())
    assert saved["optimizer"]["eps"] == 1e-8
    got, want = records(ckpt / "training.jsonl"), records(straight_run / "training.jsonl")
    assert [(r["loss"], r["lr"]) for r in got] == [(r["loss"], r["lr"]) for r in want]
