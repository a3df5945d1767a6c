"""Fixtures of the trainer tests."""

from __future__ import annotations

import pytest

from tests.trainer.harness import assert_clean_exit, run_trainer
from tests.trainer.resume_cases import config_dict, write_run_config


@pytest.fixture(scope="module")
def straight_run(tmp_path_factory):
    """8 steps, 2 FSDP2 processes, checkpoints at steps 4 and 8."""
    folder = tmp_path_factory.mktemp("straight")
    assert_clean_exit(run_trainer(write_run_config(folder, config_dict())))
    return folder / "ckpt"
