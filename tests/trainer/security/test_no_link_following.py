"""Symbolic links in checkpoint_dir are never followed: files the trainer writes are refused or replaced where a
link stands, a folder holding a link out of it is refused with one line naming the link, and what a link points
to is never written or deleted. Checkpoint files keep the user's umask."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from trainer.components.checkpoint import CheckpointDir
from trainer.components.metrics import JsonlWriter
from trainer.contract.atomic_files import write_atomic
from trainer.contract.checkpoint_lock import LOCK_FILE, check_checkpoint_dir_free, hold_checkpoint_dir
from trainer.contract.safe_paths import LinkRefused, check_links_stay_inside, open_no_follow

VICTIM_TEXT = "someone else's file\n"


@pytest.fixture
def victim(tmp_path) -> Path:
    path = tmp_path / "elsewhere" / "victim.txt"
    path.parent.mkdir()
    path.write_text(VICTIM_TEXT)
    return path


@pytest.fixture
def folder(tmp_path) -> Path:
    path = tmp_path / "ckpt"
    path.mkdir()
    return path


def test_a_link_leaving_checkpoint_dir_is_refused_naming_it(folder, victim):
    (folder / "epoch_0_step_1" / "rng").mkdir(parents=True)
    (folder / "LATEST").symlink_to(folder / "epoch_0_step_1")  # stays inside: fine
    check_links_stay_inside(folder)
    (folder / "epoch_0_step_1" / "rng" / "rank_0.pt").symlink_to(victim)
    with pytest.raises(LinkRefused) as caught:
        check_links_stay_inside(folder)
    message = str(caught.value)
    assert message.startswith(f"checkpoint.checkpoint_dir: {folder / 'epoch_0_step_1' / 'rng' / 'rank_0.pt'} is a "
                              f"symbolic link to {victim}, outside {folder}")
    assert "\n" not in message


def test_lock_file_link_is_refused_and_its_target_untouched(folder, victim):
    (folder / LOCK_FILE).symlink_to(victim)
    with pytest.raises(LinkRefused, match=rf"{LOCK_FILE} is a symbolic link"):
        hold_checkpoint_dir(folder)
    with pytest.raises(LinkRefused):
        check_checkpoint_dir_free(folder)
    assert victim.read_text() == VICTIM_TEXT


def test_metrics_never_write_through_links(folder, victim):
    log = JsonlWriter(folder / "training.jsonl", enabled=True)
    (folder / "training.jsonl").write_text('{"step": 1}\n{"step": 2}\n')
    (folder / "training.jsonl.tmp").symlink_to(victim)  # the staging name the resume rewrite used to take
    log.truncate_after(1)
    assert (folder / "training.jsonl").read_text() == '{"step": 1}\n'
    (folder / "training.jsonl").unlink()
    (folder / "training.jsonl").symlink_to(victim)
    with pytest.raises(LinkRefused):
        log.write({"step": 2})
    assert victim.read_text() == VICTIM_TEXT


def test_staging_and_retired_links_are_removed_not_followed(folder, victim):
    store = CheckpointDir(folder, keep_last=1)
    (folder / ".tmp_epoch_0_step_1").symlink_to(victim.parent, target_is_directory=True)
    (folder / ".tmp_epoch_0_step_9").symlink_to(victim.parent, target_is_directory=True)
    staging = store.prepare_staging(0, 1)
    assert staging.is_dir() and not staging.is_symlink()
    assert folder / ".tmp_epoch_0_step_9" in store.remove_stale_staging()
    assert not os.path.lexists(folder / ".tmp_epoch_0_step_9")
    assert victim.read_text() == VICTIM_TEXT


def test_atomic_writes_replace_a_link_instead_of_writing_its_target(folder, victim):
    (folder / "LATEST").symlink_to(victim)
    write_atomic(folder / "LATEST", "epoch_0_step_1\n")
    assert not (folder / "LATEST").is_symlink() and (folder / "LATEST").read_text() == "epoch_0_step_1\n"
    assert victim.read_text() == VICTIM_TEXT


def test_torch_files_are_never_written_through_a_link(folder, victim):
    from trainer.components.state_io import save_torch

    (folder / "trainer_state.pt").symlink_to(victim)
    with pytest.raises(LinkRefused):
        save_torch({"step": 1}, folder / "trainer_state.pt")
    assert victim.read_text() == VICTIM_TEXT
    with pytest.raises(LinkRefused):
        open_no_follow(folder / "trainer_state.pt", "w")


@pytest.mark.parametrize("mask", [0o022, 0o077])
def test_checkpoint_files_keep_the_umask(tmp_path, mask):
    import torch

    from trainer.components.hf_io import save_hf_model
    from trainer.components.state_io import save_torch
    from trainer.models import build_causal_lm

    model = build_causal_lm("tiny-llama", seed=0)
    old = os.umask(mask)
    try:
        written = save_hf_model(model.state_dict(), model.config, tmp_path / "model")
        save_torch({"x": torch.zeros(1)}, tmp_path / "trainer_state.pt")
    finally:
        os.umask(old)
    for path in [*written, tmp_path / "trainer_state.pt"]:
        assert path.stat().st_mode & 0o777 == 0o666 & ~mask, path


def test_train_refuses_a_checkpoint_dir_with_a_link_out_with_exit_2(tmp_path, victim, capsys):
    from service.cli.train import run_argv
    from tests.trainer.harness import write_config

    config = write_config(tmp_path / "run")
    (tmp_path / "run" / "ckpt").mkdir()
    (tmp_path / "run" / "ckpt" / "training.jsonl.tmp").symlink_to(victim)
    assert run_argv([str(config), "--dry-run"]) == 2
    [line] = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert line.startswith(f"error: checkpoint.checkpoint_dir: {tmp_path / 'run' / 'ckpt' / 'training.jsonl.tmp'} is "
                           "a symbolic link to")
