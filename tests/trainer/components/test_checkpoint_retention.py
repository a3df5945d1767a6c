"""Checkpoint retention: a restarted run keeps its own saves, a publication without a time or under a clock
set back is kept, and a deletion cut short is finished by the next run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainer.components.checkpoint import CheckpointDir
from trainer.contract.checkpoint_layout import (
    COMPLETE_MARKER,
    LATEST_FILE,
    find_latest,
    list_complete,
    list_published,
)


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


def test_the_checkpoint_just_published_survives_a_clock_set_back(tmp_path):
    folder = CheckpointDir(tmp_path, keep_last=1)
    older = _publish(folder, 10)
    _age(older, -3600)  # recorded an hour in the future: another node's clock, or one set back since
    newest = _publish(folder, 12)
    assert newest.is_dir() and find_latest(tmp_path) == newest and not older.exists()


def test_a_retention_cut_short_leaves_a_folder_the_next_run_deletes(tmp_path, monkeypatch):
    """A kill inside apply_retention's rmtree left an epoch_* folder without its marker, which
    nothing ever deleted; it is now a .tmp_ folder first."""
    import shutil

    import trainer.components.checkpoint as ck

    for step, when in ((2, 1.0), (4, 2.0), (6, 3.0)):
        folder = tmp_path / f"epoch_0_step_{step}"
        (folder / "model").mkdir(parents=True)
        (folder / "model" / "weights.bin").write_bytes(b"x" * 64)
        (folder / ck.COMPLETE_MARKER).write_text(json.dumps({"epoch": 0, "step": step, "time": when}))
    real_rmtree, calls = shutil.rmtree, []

    def killed_midway(path, ignore_errors=False):
        calls.append(Path(path).name)
        if Path(path).exists():
            raise KeyboardInterrupt  # the kill lands in the delete of the retired folder
        real_rmtree(path, ignore_errors=ignore_errors)

    monkeypatch.setattr(ck.shutil, "rmtree", killed_midway)
    with pytest.raises(KeyboardInterrupt):
        ck.CheckpointDir(tmp_path, keep_last=1).apply_retention(keep=tmp_path / "epoch_0_step_6")
    monkeypatch.setattr(ck.shutil, "rmtree", real_rmtree)
    assert calls == [".tmp_retired_epoch_0_step_2"]  # the delete of the renamed folder, cut short
    assert [p.name for p in list_complete(tmp_path)] == ["epoch_0_step_4", "epoch_0_step_6"]
    assert not (tmp_path / "epoch_0_step_2").exists()
    assert [p.name for p in ck.CheckpointDir(tmp_path).remove_stale_staging()] == [".tmp_retired_epoch_0_step_2"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["epoch_0_step_4", "epoch_0_step_6"]
