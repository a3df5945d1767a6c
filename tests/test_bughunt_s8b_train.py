"""Bug hunt s8b (#3, #6, #7): checkpoint retention after a restart from an older checkpoint, and
optimizer / loss settings that passed the pre-flight and then crashed at the first step."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.trainer_harness import write_config
from trainer.checkpoint import COMPLETE_MARKER, LATEST_FILE, CheckpointDir, find_latest, list_published
from trainer.config import parse_config
from trainer.launch import preflight
from trainer.overrides import ConfigError


def _publish(folder: CheckpointDir, step: int) -> Path:
    tmp = folder.prepare_staging(0, step)
    (tmp / "weights").write_text(str(step))
    return folder.publish(tmp, 0, step)


def _age(path: Path, seconds: float) -> None:
    """Backdate a checkpoint's recorded publication (the saves of an earlier run)."""
    marker = path / COMPLETE_MARKER
    record = json.loads(marker.read_text())
    record["time"] -= seconds
    marker.write_text(json.dumps(record))


def test_retention_keeps_a_restarted_runs_own_saves_and_latest_names_them(tmp_path):
    folder = CheckpointDir(tmp_path, keep_last=2)
    for step in (28, 30):  # the abandoned run's future
        _age(_publish(folder, step), 3600)
    # Restarted from step 20: it saves steps 22 and 24, lower than the abandoned 28 and 30.
    _publish(folder, 22)
    newest = _publish(folder, 24)
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == ["epoch_0_step_22", "epoch_0_step_24"]
    assert (tmp_path / LATEST_FILE).read_text().strip() == newest.name
    assert find_latest(tmp_path) == newest
    # Without LATEST, auto-resume still continues the run that saved last, not the highest step.
    _age(_publish(CheckpointDir(tmp_path), 40), 7200)
    (tmp_path / LATEST_FILE).unlink()
    assert find_latest(tmp_path) == newest
    assert [p.name for p in list_published(tmp_path)] == ["epoch_0_step_40", "epoch_0_step_22", "epoch_0_step_24"]


def test_a_marker_without_a_time_falls_back_to_its_file_time(tmp_path):
    folder = CheckpointDir(tmp_path)
    first, second = _publish(folder, 2), _publish(folder, 1)
    (first / COMPLETE_MARKER).write_text("{}")  # an older trainer's marker: no time recorded
    import os

    os.utime(first / COMPLETE_MARKER, (1, 1))
    assert list_published(tmp_path) == [first, second]


def _config(tmp_path: Path, **sections) -> object:
    data = yaml.safe_load(write_config(tmp_path).read_text())
    data.update(sections)
    return parse_config(data)


@pytest.mark.parametrize("optimizer, why", [
    ({"_target_": "torch.optim.LBFGS", "lr": 0.1}, "re-evaluates the loss through a closure"),
    ({"_target_": "torch.optim.SparseAdam", "lr": 0.001}, "takes sparse gradients only"),
])
def test_optimizers_the_step_cannot_drive_are_refused_before_launch(tmp_path, optimizer, why):
    with pytest.raises(ConfigError, match=rf"^optimizer\._target_: {optimizer['_target_']} cannot train here: .*{why}"):
        preflight(_config(tmp_path, optimizer=optimizer), 2)


def test_a_fused_flag_the_optimizer_does_not_take_is_dropped_not_set_false(tmp_path):
    rmsprop = {"_target_": "torch.optim.RMSprop", "lr": 0.003, "fused": True}
    with pytest.raises(ConfigError, match=r"drop optimizer\.fused \(torch\.optim\.RMSprop takes no such keyword\): "
                                          r"write the section without it, e.g. --optimizer "
                                          r"\"\{_target_: torch\.optim\.RMSprop, lr: 0\.003\}\""):
        preflight(_config(tmp_path, optimizer=rmsprop), 2)
    sgd = {"_target_": "torch.optim.SGD", "lr": 0.003, "fused": True}  # SGD takes `fused`: false is the fix
    with pytest.raises(ConfigError, match=r"set optimizer\.fused: false, or distributed\.strategy: ddp$"):
        preflight(_config(tmp_path, optimizer=sgd), 2)
    preflight(_config(tmp_path, optimizer={"_target_": "torch.optim.RMSprop", "lr": 0.003}), 2)


def test_a_loss_outside_the_trainers_signature_and_chunking_under_tp_are_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"^loss_fn\._target_: torch\.nn\.CrossEntropyLoss takes \(input, target\)"):
        preflight(_config(tmp_path, loss_fn={"_target_": "torch.nn.CrossEntropyLoss"}), 2)
    tp = {"strategy": "fsdp2", "backend": "gloo", "tp_size": 2}
    with pytest.raises(ConfigError, match=r"^loss_fn\.chunked: true does not run with tensor parallel \(tp_size 2"):
        preflight(_config(tmp_path, distributed=tp, loss_fn={"chunked": True}), 2)
    preflight(_config(tmp_path, distributed=tp, loss_fn={"chunked": "auto"}), 2)
    preflight(_config(tmp_path, loss_fn={"_target_": "trainer.loss.causal_lm_loss", "chunked": True}), 2)


def test_a_recipe_keyword_the_trainer_would_ignore_is_refused(tmp_path):
    recipe = {"_target_": "trainer.recipes.TrainFinetuneRecipe", "junk": 1}
    with pytest.raises(ConfigError, match=r"^recipe\.junk: the recipe class takes no keyword arguments"):
        preflight(_config(tmp_path, recipe=recipe), 2)
    preflight(_config(tmp_path, recipe={"_target_": "trainer.recipes.TrainFinetuneRecipe"}), 2)


def test_the_checkpoint_just_published_survives_a_clock_set_back(tmp_path):
    folder = CheckpointDir(tmp_path, keep_last=1)
    older = _publish(folder, 10)
    _age(older, -3600)  # recorded an hour in the future: another node's clock, or one set back since
    newest = _publish(folder, 12)
    assert newest.is_dir() and find_latest(tmp_path) == newest and not older.exists()


@pytest.mark.parametrize("spelling", ["torch.optim.lbfgs.LBFGS", "torch.optim.sparse_adam.SparseAdam"])
def test_an_optimizer_spelt_by_its_module_is_judged_as_the_same_class(tmp_path, spelling):
    """Bug hunt s8c #1/#2: the checks compared the target's text."""
    with pytest.raises(ConfigError, match=rf"^optimizer\._target_: {spelling} cannot train here"):
        preflight(_config(tmp_path, optimizer={"_target_": spelling, "lr": 0.1}), 2)
    preflight(_config(tmp_path, optimizer={"_target_": "torch.optim.adamw.AdamW", "lr": 0.001, "fused": True}), 2)
