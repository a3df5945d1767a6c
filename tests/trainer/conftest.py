"""Fixtures of the trainer tests: the runs several test modules compare against, each trained once per test
process (session scope) and only read by the tests (a test that resumes one copies it first)."""

from __future__ import annotations

import pytest

from tests.trainer.harness import assert_clean_exit, run_trainer, write_config
from tests.trainer.resume_cases import config_dict, write_run_config


@pytest.fixture(scope="session")
def straight_run(tmp_path_factory):
    """8 steps, 2 FSDP2 processes, checkpoints at steps 4 and 8."""
    folder = tmp_path_factory.mktemp("straight")
    assert_clean_exit(run_trainer(write_run_config(folder, config_dict())))
    return folder / "ckpt"


@pytest.fixture(scope="session")
def reference(tmp_path_factory):
    """The same 8 steps in one process, no launcher: `python -m trainer CONFIG`."""
    folder = tmp_path_factory.mktemp("single")
    assert_clean_exit(run_trainer(write_config(folder), nproc=0))
    return folder / "ckpt"
