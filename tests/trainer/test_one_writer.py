"""One run per checkpoint folder: the workers die with their launcher (a SIGKILL of `recipe-advisor train` left
them training, and their `keep_last` deleted the checkpoint the next run was loading), and a second run on a folder
in use is refused with the PID that holds it, while a lock left by a dead run blocks nothing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.trainer.harness import _env, run_trainer, write_config
from trainer.contract.checkpoint_lock import LOCK_FILE, check_checkpoint_dir_free, hold_checkpoint_dir
from trainer.contract.overrides import ConfigError


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:  # ended meanwhile
                continue
            if int(stat.rpartition(")")[2].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def _running(pid: int) -> bool:
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's")
def test_a_sigkill_of_the_launcher_takes_its_workers_with_it(tmp_path):
    # ~25 steps a second on 2 CPU processes: minutes of training left when the launcher is killed at step 2
    config = write_config(tmp_path, {"step_scheduler": {"max_steps": 4000, "checkpoint_interval": 2000},
                                     "dataset": {"num_samples": 32000}})
    log = tmp_path / "ckpt" / "training.jsonl"
    cmd = [sys.executable, "-m", "service.cli.app", "train", str(config), "--nproc-per-node", "2"]
    launcher = subprocess.Popen(cmd, cwd=tmp_path, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                start_new_session=True)
    workers: list[int] = []
    try:
        deadline = time.monotonic() + 90
        while not (log.is_file() and len(log.read_text().splitlines()) >= 2):
            assert launcher.poll() is None, launcher.stderr.read()[-3000:]
            assert time.monotonic() < deadline, "training did not reach step 2"
            time.sleep(0.1)
        workers = _children(launcher.pid)
        assert len(workers) == 2, workers
        with pytest.raises(ConfigError, match=r"PID (\d+) holds its lock") as refused:
            check_checkpoint_dir_free(tmp_path / "ckpt")  # rank 0 holds the folder for the run
        assert int(refused.value.args[0].split("PID ")[1].split()[0]) in workers

        launcher.kill()
        launcher.wait(10)
        deadline = time.monotonic() + 10
        while any(map(_running, workers)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(map(_running, workers)), "the workers outlived their launcher"
        assert len(log.read_text().splitlines()) < 1000, "they stopped with it, not at the end of the run"
        # The kernel releases the lock once the last process holding it has exited; a worker's own children
        # (data loading) die a moment after it, so the release is waited for, not assumed at once.
        deadline = time.monotonic() + 20
        while True:
            try:
                check_checkpoint_dir_free(tmp_path / "ckpt")
                break
            except ConfigError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
    finally:
        for pid in [launcher.pid, *workers]:
            if _running(pid):
                os.kill(pid, signal.SIGKILL)
        launcher.wait()
        launcher.stderr.close()


def test_a_second_run_on_a_folder_in_use_is_refused_with_the_holders_pid(tmp_path, monkeypatch, capsys):
    from service.cli import train as cli_train
    from service.cli.app import main

    launched = []
    monkeypatch.setattr(cli_train, "launch", lambda args: launched.append(args) or 0)
    config = write_config(tmp_path)
    (tmp_path / "ckpt").mkdir()
    with hold_checkpoint_dir(tmp_path / "ckpt"):
        for dry_run in ([], ["--dry-run"]):
            assert main(["train", str(config), "--nproc-per-node", "2", *dry_run]) == 2
            err = capsys.readouterr().err
            assert f"is in use by another training run (PID {os.getpid()} holds its lock" in err, err
            assert f"kill {os.getpid()}" in err and "or give this run another checkpoint.checkpoint_dir" in err
        assert launched == []
    assert main(["train", str(config), "--nproc-per-node", "2"]) == 0  # released
    assert len(launched) == 1


def test_a_lock_left_by_a_dead_run_blocks_nothing(tmp_path):
    folder = tmp_path / "ckpt"
    folder.mkdir()
    code = ("import os, signal, sys\nfrom pathlib import Path\n"
            "from trainer.contract.checkpoint_lock import hold_checkpoint_dir\n"
            "hold_checkpoint_dir(Path(sys.argv[1]))\nos.kill(os.getpid(), signal.SIGKILL)")
    dead = subprocess.Popen([sys.executable, "-c", code, str(folder)], env=_env())
    assert dead.wait(60) == -signal.SIGKILL
    assert (folder / LOCK_FILE).read_text().split()[0] == str(dead.pid)  # its PID is left behind, its lock is not
    check_checkpoint_dir_free(folder)
    with hold_checkpoint_dir(folder) as lock:
        lock.seek(0)
        assert lock.read().split()[0] == str(os.getpid())


def test_the_trainer_itself_refuses_a_folder_in_use(tmp_path):
    """Under a torchrun of one's own (no `recipe-advisor train` to check first), rank 0 refuses."""
    config = write_config(tmp_path)
    (tmp_path / "ckpt").mkdir()
    with hold_checkpoint_dir(tmp_path / "ckpt"):
        result = run_trainer(config, nproc=0)
    assert result.returncode == 2, result.stderr[-3000:]
    assert f"(PID {os.getpid()} holds its lock" in result.stderr and "Traceback" not in result.stderr
    assert not list((tmp_path / "ckpt").glob("epoch_*"))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's")
@pytest.mark.parametrize("launcher, code, out", [("parent", 0, "9\n"), ("another", 128 + signal.SIGKILL, "")])
def test_a_worker_asks_for_sigkill_with_its_launcher_and_stops_if_it_is_already_gone(launcher, code, out):
    """A launcher that died before the death signal was set is seen: the worker has another parent by then."""
    script = ("import ctypes, os, sys\nfrom trainer.launch import die_with_launcher\n"
              "pid = str(os.getppid() if sys.argv[1] == 'parent' else os.getppid() + 1)\n"
              "die_with_launcher({'TORCHELASTIC_RUN_ID': 'x', 'RECIPE_ADVISOR_LAUNCHER_PID': pid})\n"
              "sig = ctypes.c_int()\nctypes.CDLL(None).prctl(2, ctypes.byref(sig), 0, 0, 0)  # PR_GET_PDEATHSIG\n"
              "print(sig.value)")
    result = subprocess.run([sys.executable, "-c", script, launcher], env=_env(), capture_output=True, text=True,
                            timeout=60)
    assert (result.returncode, result.stdout) == (code, out), result.stderr[-2000:]
