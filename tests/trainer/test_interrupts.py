"""Ctrl-C, a failed save and a lost peer: the workers stop without tracebacks, exit 130 or name the cause, and
leave only whole checkpoints, so a resume takes the newest complete one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import launch_server
from tests.paths import REPO
from tests.trainer.harness import _env, records, write_config
from trainer.contract.checkpoint_layout import find_latest, is_complete, list_complete


def _python(code: str, config: Path) -> subprocess.CompletedProcess:
    """``python -c code CONFIG`` in the config's folder, as the trainer's processes run."""
    return launch_server.subprocess_run([sys.executable, "-c", code, str(config)], cwd=config.parent, env=_env(),
                                        capture_output=True, text=True, timeout=120)


def _run_with_a_failing_save(tmp_path, failure: str) -> subprocess.CompletedProcess:
    """One training process whose first checkpoint save raises what torch.distributed.checkpoint raises:
    a CheckpointException (a BaseException) wrapping each rank's exception."""
    config = write_config(tmp_path, {"step_scheduler": {"max_steps": 4, "checkpoint_interval": 2}})
    code = ("import os, signal, sys\n"
            "from torch.distributed.checkpoint.api import CheckpointException\n"
            "import trainer.launch as launch, trainer.recipes.base_recipe as base\n"
            "def save_checkpoint(self, *args):\n"
            f"    try:\n        {failure}\n"
            "    except BaseException as exc:\n        raise CheckpointException('write', {0: (exc, None)})\n"
            "base.BaseRecipe.save_checkpoint = save_checkpoint\n"
            "launch.main([sys.argv[1]])")
    return _python(code, config)


def _run_interrupted_at(tmp_path, steps: int, patch: str) -> subprocess.CompletedProcess:
    """One training process with ``patch`` (code that sends itself a SIGINT somewhere) applied first."""
    config = write_config(tmp_path, {"step_scheduler": {"max_steps": steps, "checkpoint_interval": 2}})
    code = f"import os, signal, sys\nimport trainer.launch as launch\n{patch}\nlaunch.main([sys.argv[1]])"
    return _python(code, config)


# LATEST was written after the rename, so a Ctrl-C (or a kill) between the two left it naming
# the previous checkpoint beside a newer complete one, and resume redid two steps. Now LATEST comes first.
PUBLISH_CTRL_C = {
    "between LATEST and the rename": (
        "import trainer.components.checkpoint as ck\nreal = ck.write_atomic\n"
        "def write_atomic(path, text):\n    real(path, text)\n"
        "    if path.name == 'LATEST' and 'step_4' in text:\n        os.kill(os.getpid(), signal.SIGINT)\n"
        "ck.write_atomic = write_atomic",
        ["epoch_0_step_2"], "epoch_0_step_2"),  # LATEST names step 4, never renamed into place: skipped
    "after the rename": (
        "import trainer.components.checkpoint as ck\nreal = ck.fsync_path\n"
        "def fsync_path(path):\n    real(path)\n"
        "    if path == ck.Path(sys.argv[1]).parent / 'ckpt' and (path / 'epoch_0_step_4').is_dir():\n"
        "        os.kill(os.getpid(), signal.SIGINT)\n"
        "ck.fsync_path = fsync_path",
        ["epoch_0_step_2", "epoch_0_step_4"], "epoch_0_step_4"),
}


# `train` ran outside the CLI's KeyboardInterrupt handler; and before main() installed its handler, a worker's
# imports ended in a traceback.
EARLY_CTRL_C = {
    "while train checks the config": (
        # Python keeps SIGINT ignored when its parent ignored it (a pytest-xdist worker does): a shell does not
        "import os, signal, sys\nsignal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "import service.cli.train as ct\nreal = ct.report_validation\n"
        "def report_validation(*a, **k):\n    os.kill(os.getpid(), signal.SIGINT)\n    return real(*a, **k)\n"
        "ct.report_validation = report_validation\nfrom service.cli.app import main\n"
        "sys.exit(main(['train', sys.argv[1], '--nproc-per-node', '2']))"),
    "while a worker imports": (
        "import builtins, os, runpy, signal, sys\nreal_import = builtins.__import__\n"
        "def importing(name, *a, **k):\n"
        "    if name == 'trainer.launch':\n        os.kill(os.getpid(), signal.SIGINT)\n"
        "    return real_import(name, *a, **k)\n"
        "builtins.__import__ = importing\n"
        "sys.argv = ['trainer', sys.argv[1]]\nrunpy.run_module('trainer', run_name='__main__')"),
}


def test_a_worker_stopped_by_keyboard_interrupt_exits_130_without_a_traceback():
    code = ("import trainer.launch as launch\n"
            "def interrupted(argv):\n    raise KeyboardInterrupt\n"
            "launch.run = interrupted\nlaunch.main([])")
    result = launch_server.subprocess_run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                                          timeout=60)
    assert result.returncode == 130
    assert result.stderr == ""


def test_a_sigint_inside_a_checkpoint_save_exits_130_without_a_traceback(tmp_path):
    """A CI run met this: the SIGINT landed in os.fsync of a save on both ranks."""
    result = _run_with_a_failing_save(tmp_path, "os.kill(os.getpid(), signal.SIGINT)")
    assert result.returncode == 130, result.stderr[-3000:]
    assert "Traceback" not in result.stderr and "CheckpointException" not in result.stderr


def test_a_failed_checkpoint_save_is_reported_as_a_training_failure(tmp_path):
    result = _run_with_a_failing_save(tmp_path, "raise OSError('No space left on device')")
    assert result.returncode == 1, result.stderr[-3000:]
    assert "training failed" in result.stderr and "CheckpointException" in result.stderr


@pytest.mark.parametrize("when", PUBLISH_CTRL_C)
def test_a_ctrl_c_inside_a_publish_resumes_the_newest_complete_checkpoint(tmp_path, when):
    patch, complete, latest = PUBLISH_CTRL_C[when]
    result = _run_interrupted_at(tmp_path, 6, patch)
    assert result.returncode == 130 and "Traceback" not in result.stderr, result.stderr[-3000:]
    ckpt = tmp_path / "ckpt"
    assert [p.name for p in list_complete(ckpt)] == complete
    assert (ckpt / "LATEST").read_text().strip() == "epoch_0_step_4"
    assert find_latest(ckpt).name == latest


def test_a_sigint_while_a_finished_run_tears_down_is_quiet(tmp_path):
    """The handler still raised after run() returned, out of exit_process."""
    patch = ("import torch.distributed as dist\nreal = dist.destroy_process_group\n"
             "def destroy(*a, **k):\n    os.kill(os.getpid(), signal.SIGINT)\n    return real(*a, **k)\n"
             "dist.destroy_process_group = destroy")
    result = _run_interrupted_at(tmp_path, 2, patch)
    assert result.returncode == 130, result.stderr[-3000:]
    assert "Traceback" not in result.stderr and "KeyboardInterrupt" not in result.stderr


@pytest.mark.parametrize("when", EARLY_CTRL_C)
def test_an_early_ctrl_c_exits_130_quietly(tmp_path, when):
    result = _python(EARLY_CTRL_C[when], write_config(tmp_path))
    assert result.returncode == 130 and "Traceback" not in result.stderr, result.stderr[-3000:]


def test_workers_stopped_by_sigint_map_to_130_with_one_line(capsys):
    from torch.distributed.elastic.multiprocessing.errors import ProcessFailure

    from service.cli.train import exit_code_of_failures

    failures = {rank: ProcessFailure(local_rank=rank, pid=1000 + rank, exitcode=code, error_file="")
                for rank, code in enumerate((130, -signal.SIGTERM))}
    assert exit_code_of_failures(failures) == 130
    assert capsys.readouterr().err == "error: the workers were stopped by SIGINT\n"


def test_sigint_to_train_stops_quietly_and_leaves_whole_checkpoints(tmp_path):
    """torch.distributed.run passes the SIGINT on to the workers; each stops without a traceback and the
    launcher says it once. Checkpoints are complete or absent, so resume takes the newest complete one
    (resuming from such a folder is tested in test_trainer_distributed.py)."""
    config = write_config(tmp_path, {"step_scheduler": {"max_steps": 32, "checkpoint_interval": 2}})
    log = tmp_path / "ckpt" / "training.jsonl"
    cmd = [sys.executable, "-m", "service.cli.app", "train", str(config), "--nproc-per-node", "2"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        while not (log.is_file() and len(log.read_text().splitlines()) >= 3):
            assert proc.poll() is None and time.monotonic() < deadline, "training did not reach step 3"
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:  # SIGTERM first: the launcher stops its workers (sessions of their own)
            proc.terminate()
            try:
                proc.wait(45)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    assert proc.returncode == 130, err[-3000:]
    for noise in ("Traceback", "KeyboardInterrupt", "death signal", "training failed", "ChildFailedError"):
        assert noise not in err, err[-3000:]
    assert err.count("error: stopped by SIGINT; the workers were terminated") == 1
    saved = [p for p in (tmp_path / "ckpt").glob("epoch_*") if p.is_dir()]
    assert saved and all(is_complete(p) for p in saved), "checkpoints are complete or absent"
    latest = find_latest(tmp_path / "ckpt")
    assert latest == max(saved, key=lambda p: int(p.name.rsplit("_", 1)[1]))
    assert int(latest.name.rsplit("_", 1)[1]) <= len(records(log))


@pytest.mark.parametrize("error, reason", [
    (RuntimeError("[../gloo/transport/tcp/pair.cc:537] Read error [127.0.0.1]:645: Connection reset by peer. "
                  "This is typically caused by a remote worker hanging"), "Connection reset by peer"),
    (RuntimeError("NCCL communicator was aborted on rank 3."), "NCCL communicator was aborted"),
    (RuntimeError("shape mismatch: [4, 8] vs [8, 4]"), ""),
    (ValueError("Connection reset by peer"), ""),
])
def test_a_lost_peer_is_told_from_a_failure_of_the_rank_itself(error, reason):
    from trainer.distributed.dist import lost_peer

    assert lost_peer(error) == reason


def test_a_lost_peer_inside_a_checkpoint_save_is_named():
    """A survivor of a peer lost mid-save printed a traceback, not "another rank left"."""
    from torch.distributed.checkpoint.api import CheckpointException

    from trainer.distributed.dist import lost_peer

    assert lost_peer(CheckpointException("write", {1: (RuntimeError("Connection reset by peer"), None)}))
    assert not lost_peer(CheckpointException("write", {0: (OSError("No space left on device"), None)}))
