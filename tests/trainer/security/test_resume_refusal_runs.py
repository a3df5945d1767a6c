"""End to end: `recipe-advisor train` and a bare `python -m trainer` refuse a planted checkpoint with exit 2 and one
line naming the file, before anything loads it; the planted command never runs."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.trainer.harness import run_launcher, run_trainer
from tests.trainer.security.layouts import layout_config
from tests.trainer.security.tampering import Place, byte_entries, plant

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("checkpoint_of")]  # the layouts' checkpoints, built once


def _run_folder(checkpoint_of, tmp_path: Path) -> tuple[Path, Path]:
    """(config, checkpoint): a copy of the FSDP2 checkpoint in the checkpoint_dir of a config of that layout."""
    config = layout_config(tmp_path, "fsdp2")
    ckpt = Path(shutil.copytree(checkpoint_of("fsdp2"), tmp_path / "ckpt" / "epoch_0_step_1"))
    return config, ckpt


def _error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


def test_launcher_refuses_planted_metadata_with_exit_2_and_runs_nothing(checkpoint_of, tmp_path, capsys):
    from service.cli.train import run_argv

    config, ckpt = _run_folder(checkpoint_of, tmp_path)
    marker = tmp_path / "ran"
    plant(ckpt, Place(Path("optim/.metadata")), marker)
    expected = f"error: checkpoint file {ckpt / 'optim' / '.metadata'}: is "  # of another size, or not DCP metadata
    result = run_launcher(config, "--nproc-per-node", "2")
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    [line] = _error_lines(result.stderr)
    assert line.startswith(expected)
    assert run_argv([str(config), "--dry-run"]) == 2  # a dry run says the same, in this process
    assert _error_lines(capsys.readouterr().err)[0].startswith(expected)
    assert not marker.exists()


def test_trainer_process_refuses_a_planted_byte_entry_before_loading(checkpoint_of, tmp_path):
    """Without the launcher (torchrun or srun straight to `python -m trainer`), rank 0 checks the files."""
    config, ckpt = _run_folder(checkpoint_of, tmp_path)
    marker = tmp_path / "ran"
    entry = next(byte_entries(ckpt))
    plant(ckpt, entry, marker)
    result = run_trainer(config, nproc=0)
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    [line] = _error_lines(result.stderr)
    assert f"checkpoint file {ckpt / entry.file}: entry {entry.fqn}" in line
    assert not marker.exists()
